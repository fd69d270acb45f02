package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// callFrom sends a request with a bearer token and, when xff is not empty, an X-Forwarded-For header.
func callFrom(t *testing.T, method, url, token, xff string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := e2eClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestWrongTokensNeverLockOutTheRightOne: once one address has sent enough wrong tokens to be refused
// 429, the valid token from that same address is still served, on the API and on /metrics; only the
// wrong tokens are refused.
func TestWrongTokensNeverLockOutTheRightOne(t *testing.T) {
	const metricsTok = "e2e-metrics-token-0123456789"
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin, "TICKETD_TOKENS": "orders=" + e2eToken, "TICKETD_METRICS_TOKEN": metricsTok}
	p := startServe(t, env, "--data-dir", t.TempDir(), "--create-namespaces", "on")
	ns := p.URL + "/v1/namespaces/orders"
	got429 := false
	for i := 0; i < 40; i++ {
		if callFrom(t, "GET", ns, "wrong-token-0123456789", "") == http.StatusTooManyRequests {
			got429 = true
		}
	}
	if !got429 {
		t.Fatal("40 wrong tokens from one address were never refused 429")
	}
	if code := callFrom(t, "GET", ns, "wrong-token-0123456789", ""); code != http.StatusTooManyRequests {
		t.Fatalf("a wrong token after the lockout: %d, want 429", code)
	}
	mustCall(t, 200, "POST", ns+"/blocks", e2eAdmin, `{"size":3}`)
	mustCall(t, 200, "POST", ns+"/blocks", e2eToken, `{"size":3}`)
	mustCall(t, 200, "GET", p.URL+"/metrics", metricsTok, "")
	mustCall(t, 200, "GET", p.URL+"/readyz", e2eAdmin, "")
}

// TestTrustedProxyNamesTheClient: with --trusted-proxy, the client behind the proxy is the one named
// in X-Forwarded-For, so one guesser behind the proxy does not lock out the others; IPv6 addresses of
// one /64 count as one client. Without the flag, the header is ignored.
func TestTrustedProxyNamesTheClient(t *testing.T) {
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}
	if _, errOut, code := run(t, env, "serve", "--data-dir", t.TempDir(), "--trusted-proxy", "proxy.internal", "--listen", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "--trusted-proxy") || !strings.Contains(errOut, "CIDR") {
		t.Fatalf("a proxy given by name: exit %d %q", code, errOut)
	}
	lockOut := func(url, xff string) {
		t.Helper()
		for i := 0; i < 40; i++ {
			if callFrom(t, "GET", url, "wrong-token-0123456789", xff) == http.StatusTooManyRequests {
				return
			}
		}
		t.Fatalf("40 wrong tokens from %q were never refused 429", xff)
	}
	p := startServe(t, env, "--data-dir", t.TempDir(), "--trusted-proxy", "127.0.0.1/32")
	ns := p.URL + "/v1/namespaces"
	lockOut(ns, "198.51.100.1")
	if code := callFrom(t, "GET", ns, "wrong-token-0123456789", "198.51.100.2"); code != http.StatusUnauthorized {
		t.Fatalf("another client behind the trusted proxy: %d, want 401 (its own count)", code)
	}
	lockOut(ns, "2001:db8:1:2::1")
	if code := callFrom(t, "GET", ns, "wrong-token-0123456789", "2001:db8:1:2:ffff::9"); code != http.StatusTooManyRequests {
		t.Fatalf("an address of the same IPv6 /64: %d, want 429", code)
	}
	if code := callFrom(t, "GET", ns, "wrong-token-0123456789", "2001:db8:1:3::1"); code != http.StatusUnauthorized {
		t.Fatalf("an address of another IPv6 /64: %d, want 401", code)
	}

	// Without --trusted-proxy the header is the client's word, and counts for nothing.
	q := startServe(t, env, "--data-dir", t.TempDir())
	lockOut(q.URL+"/v1/namespaces", "198.51.100.1")
	if code := callFrom(t, "GET", q.URL+"/v1/namespaces", "wrong-token-0123456789", "198.51.100.2"); code != http.StatusTooManyRequests {
		t.Fatalf("a forged X-Forwarded-For without --trusted-proxy: %d, want 429", code)
	}
}

// TestWeakTokensAreRefused: a token that is long and varied but not random is refused, with how to
// make one, and never quoted.
func TestWeakTokensAreRefused(t *testing.T) {
	for _, tok := range []string{"Password12345678", "0123456789abcdef", "qwertyQWERTY123456"} {
		// A serve that passes the check fails at once on the missing certificate, never serves.
		_, errOut, code := run(t, map[string]string{"TICKETD_ADMIN_TOKEN": tok}, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--tls-cert", "none.pem", "--tls-key", "none.pem")
		if code != 2 || !strings.Contains(errOut, "openssl rand -hex 32") || strings.Contains(errOut, tok) {
			t.Errorf("admin token %q: exit %d %q", tok, code, errOut)
		}
	}
}
