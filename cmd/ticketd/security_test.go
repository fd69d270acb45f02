package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecretsStayOutOfErrors gives passwords and tokens in every malformed way a person might, on the
// command line and in the environment, and looks for them in what ticketd prints.
func TestSecretsStayOutOfErrors(t *testing.T) {
	dir := t.TempDir()
	const b64Token = "c2VjcmV0LXRva2VuLXZhbHVl==" // a token with an '=' of its own, given without "NS="
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte("orders="+e2eToken+"\n"+b64Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A serve that passes every check fails at once on the missing certificate, never serves.
	tls := []string{"--tls-cert", filepath.Join(dir, "none.pem"), "--tls-key", filepath.Join(dir, "none.pem")}
	for _, c := range []struct {
		name   string
		env    map[string]string
		args   []string
		secret string
	}{
		{"a Redis URL with a bad port", nil, []string{"lease", "x", "--redis", "redis://tkd:SECRET-pw-one@host:notaport/0"}, "SECRET-pw-one"},
		{"a Redis URL with a bad escape in the password", nil, []string{"lease", "x", "--redis", "redis://tkd:pw%zzSECRETtwo@host:1/0"}, "SECRETtwo"},
		{"a Redis URL with a bad host", map[string]string{"TICKETD_REDIS": "rediss://:SECRET-pw-three@[::1"}, []string{"namespace", "create", "x"}, "SECRET-pw-three"},
		{"a Redis password without a scheme", nil, []string{"lease", "x", "--redis", ":SECRET-pw-seven@127.0.0.1:6379"}, "SECRET-pw-seven"},
		{"a Redis user and password without a scheme", map[string]string{"TICKETD_REDIS": "tkd:SECRET-pw-eight@127.0.0.1:1"}, []string{"doctor"}, "SECRET-pw-eight"},
		{"a Redis password without a scheme or colon", nil, []string{"lease", "x", "--redis", "SECRET-pw-nine@127.0.0.1:1"}, "SECRET-pw-nine"},
		{"a Redis URL to serve", map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}, []string{"serve", "--redis", "redis://tkd:SECRET-pw-four@host:notaport/0"}, "SECRET-pw-four"},
		{"a MySQL DSN with a bad port", nil, []string{"lease", "x", "--lease-timeout", "1s", "--attempt-timeout", "500ms", "--mysql", "tkd:SECRET-pw-five@tcp(127.0.0.1:notaport)/db"}, "SECRET-pw-five"},
		{"a MySQL DSN with a bad parameter", nil, []string{"doctor", "--mysql", "tkd:SECRET-pw-six@tcp(127.0.0.1:1)/db?timeout=soon"}, "SECRET-pw-six"},
		{"a token without NS= in the environment", map[string]string{"TICKETD_TOKENS": b64Token}, []string{"serve", "--data-dir", dir}, "c2VjcmV0"},
		{"a token without NS= in a list", nil, []string{"serve", "--data-dir", dir, "--tokens", "orders=" + e2eToken + "," + b64Token}, "c2VjcmV0"},
		{"a token without NS= in the token file", nil, []string{"serve", "--data-dir", dir, "--token-file", tokenFile}, "c2VjcmV0"},
		{"a short admin token", nil, []string{"serve", "--data-dir", dir, "--admin-token", "SECRET-short"}, "SECRET-short"},
		{"a weak admin token", map[string]string{"TICKETD_ADMIN_TOKEN": strings.Repeat("SECRET", 4)}, []string{"serve", "--data-dir", dir}, "SECRETSECRET"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if args[0] == "serve" {
				args = append(append(args, tls...), "--listen", "127.0.0.1:0")
			}
			out, errOut, code := run(t, c.env, args...)
			if code == 0 {
				t.Fatalf("exit 0:\n%s", errOut)
			}
			if strings.Contains(out+errOut, c.secret) {
				t.Fatalf("the secret is in the output:\n%s%s", out, errOut)
			}
		})
	}
}

// TestNoAuthOnAPublicAddress: --no-auth on an address that is not loopback is refused with what to do
// instead; --insecure-public-no-auth serves it, any Host included, and logs that it is not loopback.
func TestNoAuthOnAPublicAddress(t *testing.T) {
	dir := t.TempDir()
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:8080"} {
		_, errOut, code := run(t, nil, "serve", "--no-auth", "--data-dir", dir, "--listen", listen, "--tls-cert", "none.pem", "--tls-key", "none.pem")
		if code != 2 || !strings.Contains(errOut, "not a loopback address") || !strings.Contains(errOut, "--insecure-public-no-auth") {
			t.Errorf("--no-auth --listen %s: exit %d %q", listen, code, errOut)
		}
	}
	if _, errOut, code := run(t, nil, "serve", "--insecure-public-no-auth", "--data-dir", dir, "--listen", "0.0.0.0:0"); code != 2 || !strings.Contains(errOut, "with --no-auth only") {
		t.Errorf("--insecure-public-no-auth alone: exit %d %q", code, errOut)
	}
	p := startServe(t, nil, "--no-auth", "--insecure-public-no-auth", "--listen", "0.0.0.0:0", "--data-dir", dir)
	if !strings.Contains(p.Log(), "NOT loopback") {
		t.Fatalf("no warning that the open address is not loopback:\n%s", p.Log())
	}
	req, _ := http.NewRequest("PUT", strings.Replace(p.URL, "0.0.0.0", "127.0.0.1", 1)+"/v1/namespaces/orders", strings.NewReader(`{"block_size":10}`))
	req.Host = "ticketd.internal:8080"
	req.Header.Set("Content-Type", "application/json")
	resp, err := e2eClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("an open public server refused a PUT for its own name: %d", resp.StatusCode)
	}
}

// TestTokenFileMustBePrivate: a token file that other users may read or change (any group or other
// permission), or that another user owns, is refused with the chmod or chown that fixes it.
func TestTokenFileMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tokens")
	if err := os.WriteFile(f, []byte("orders="+e2eToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o644, 0o604, 0o602, 0o640, 0o660, 0o620} {
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
		// A serve that passes the check fails at once on the missing certificate, never serves.
		_, errOut, code := run(t, nil, "serve", "--data-dir", dir, "--token-file", f, "--tls-cert", f+".pem", "--tls-key", f+".pem", "--listen", "127.0.0.1:0")
		if code != 2 || !strings.Contains(errOut, "chmod 600") || strings.Contains(errOut, e2eToken) {
			t.Errorf("token file of mode %04o: exit %d %q", mode, code, errOut)
		}
	}
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // only root can give a file away
		if err := os.Chown(f, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := run(t, nil, "serve", "--data-dir", dir, "--token-file", f, "--tls-cert", f+".pem", "--tls-key", f+".pem", "--listen", "127.0.0.1:0")
		if code != 2 || !strings.Contains(errOut, "belongs to user 65534") || !strings.Contains(errOut, "chown 0 ") {
			t.Errorf("a token file of another user: exit %d %q", code, errOut)
		}
		if err := os.Chown(f, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(f, 0o400); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, nil, "--data-dir", dir, "--token-file", f)
	mustCall(t, 404, "GET", p.URL+"/v1/namespaces/orders", e2eToken, "")
}

// TestTLSKeyMustBePrivate: a TLS key that other users may read, or that another user owns, is refused
// with the chmod or chown that fixes it; a private one passes the check.
func TestTLSKeyMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, p := range []string{cert, key} {
		if err := os.WriteFile(p, []byte("-----BEGIN NOTHING-----\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}
	args := []string{"serve", "--data-dir", dir, "--tls-cert", cert, "--tls-key", key, "--listen", "127.0.0.1:0"}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := run(t, env, args...); code != 2 || !strings.Contains(errOut, "--tls-key") || !strings.Contains(errOut, "chmod 600") {
			t.Errorf("a TLS key of mode %04o: exit %d %q", mode, code, errOut)
		}
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(key, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := run(t, env, args...); code != 2 || !strings.Contains(errOut, "belongs to user 65534") {
			t.Errorf("a TLS key of another user: exit %d %q", code, errOut)
		}
		if err := os.Chown(key, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// A private key passes the check; this one is no key, which the TLS setup then says.
	if _, errOut, code := run(t, env, args...); code == 0 || strings.Contains(errOut, "chmod") || strings.Contains(errOut, "chown") {
		t.Errorf("a private TLS key: exit %d %q", code, errOut)
	}
}

// TestMetricsOnTheirOwnAddress: /metrics on the API address needs the admin or the metrics token;
// --metrics-listen serves them without one on an address of its own, and nothing else there.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	const metricsTok = "e2e-metrics-token-0123456789"
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin, "TICKETD_TOKENS": "orders=" + e2eToken, "TICKETD_METRICS_TOKEN": metricsTok}
	p := startServe(t, env, "--data-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	mustCall(t, 401, "GET", p.URL+"/metrics", "", "")
	mustCall(t, 403, "GET", p.URL+"/metrics", e2eToken, "")
	mustCall(t, 200, "GET", p.URL+"/metrics", metricsTok, "")
	mustCall(t, 403, "GET", p.URL+"/v1/namespaces", metricsTok, "")
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" && time.Now().Before(deadline) {
		for _, l := range strings.Split(p.Log(), "\n") {
			var line struct{ Msg, Addr string }
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "serving /metrics without a token" {
				addr = line.Addr
			}
		}
	}
	if addr == "" {
		t.Fatalf("no log line names the metrics address:\n%s", p.Log())
	}
	if body := string(mustCall(t, 200, "GET", "http://"+addr+"/metrics", "", "")); !strings.Contains(body, "ticketd_http_requests_total") {
		t.Fatalf("the metrics address serves no metrics:\n%s", body)
	}
	mustCall(t, 404, "GET", "http://"+addr+"/v1/namespaces", e2eAdmin, "")
	mustCall(t, 404, "GET", "http://"+addr+"/", e2eAdmin, "")
}
