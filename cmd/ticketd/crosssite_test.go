package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCrossSiteChecksWithTokens: with tokens on, a state-changing request that a web page may have
// sent (a foreign Origin, Sec-Fetch-Site cross-site or same-site, a form body from a browser) is
// refused even with a valid token, and moves nothing; reads, the server's own origin, and curl's form
// body without browser headers are served.
func TestCrossSiteChecksWithTokens(t *testing.T) {
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin, "TICKETD_TOKENS": "orders=" + e2eToken}
	p := startServe(t, env, "--data-dir", t.TempDir(), "--create-namespaces", "on")
	ns := p.URL + "/v1/namespaces/orders"
	mustCall(t, 200, "POST", ns+"/blocks", e2eAdmin, `{"size":1}`) // creates it
	send := func(method, url, token, body string, h map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := e2eClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const json, form = "application/json", "application/x-www-form-urlencoded"
	for _, c := range []struct {
		name, method, url, token, body string
		h                              map[string]string
		want                           int
	}{
		{"a foreign Origin", "POST", ns + "/blocks", e2eToken, `{"size":1}`, map[string]string{"Origin": "https://evil.example", "Content-Type": json}, 403},
		{"a null Origin", "POST", ns + "/blocks", e2eToken, `{"size":1}`, map[string]string{"Origin": "null", "Content-Type": json}, 403},
		{"a cross-site fetch", "POST", ns + "/blocks", e2eToken, `{"size":1}`, map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": json}, 403},
		{"a same-site fetch", "PUT", ns, e2eAdmin, `{"block_size":7}`, map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": json}, 403},
		{"GET ids from a foreign Origin", "GET", ns + "/ids?count=2", e2eToken, "", map[string]string{"Origin": "https://evil.example"}, 403},
		{"a form from a browser page", "POST", ns + "/blocks", e2eToken, `{"size":1}`, map[string]string{"Sec-Fetch-Site": "same-origin", "Content-Type": form}, 415},
		{"text/plain from the server's own origin", "PUT", ns, e2eAdmin, `{"block_size":7}`, map[string]string{"Origin": p.URL, "Content-Type": "text/plain"}, 415},
		{"a read from a foreign Origin", "GET", ns, e2eToken, "", map[string]string{"Origin": "https://evil.example"}, 200},
		{"JSON from the server's own origin", "POST", ns + "/blocks", e2eToken, `{"size":1}`, map[string]string{"Origin": p.URL, "Sec-Fetch-Site": "same-origin", "Content-Type": json}, 200},
		{"curl -d with a token", "POST", ns + "/blocks", e2eToken, `{"size":1}`, map[string]string{"Content-Type": form}, 200},
	} {
		before := string(mustCall(t, 200, "GET", ns, e2eAdmin, ""))
		code, body := send(c.method, c.url, c.token, c.body, c.h)
		if code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
		if after := string(mustCall(t, 200, "GET", ns, e2eAdmin, "")); code >= 400 && after != before {
			t.Errorf("%s was refused but moved the namespace: %s → %s", c.name, before, after)
		}
	}
}
