package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// metricsAddr waits for the log line that names the metrics listener's address.
func metricsAddr(t *testing.T, log func() string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, l := range strings.Split(log(), "\n") {
			var line struct{ Msg, Addr string }
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "serving /metrics without a token" {
				return line.Addr
			}
		}
	}
	t.Fatalf("no log line names the metrics address:\n%s", log())
	return ""
}

// TestMetricsListenIsLoopbackUnlessOptedIn: --metrics-listen on an address that is not loopback is
// refused with what to do instead, unless --metrics-listen-public says so; the metrics listener keeps
// the API's connection limits.
func TestMetricsListenIsLoopbackUnlessOptedIn(t *testing.T) {
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:9090"} {
		_, errOut, code := run(t, env, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-listen", addr, "--tls-cert", "none.pem", "--tls-key", "none.pem")
		if code != 2 || !strings.Contains(errOut, "not a loopback address") || !strings.Contains(errOut, "--metrics-listen-public") {
			t.Errorf("--metrics-listen %s: exit %d %q", addr, code, errOut)
		}
	}
	if _, errOut, code := run(t, env, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--metrics-listen-public"); code != 2 || !strings.Contains(errOut, "with --metrics-listen only") {
		t.Errorf("--metrics-listen-public alone: exit %d %q", code, errOut)
	}
	pub := startServe(t, env, "--data-dir", t.TempDir(), "--metrics-listen", "0.0.0.0:0", "--metrics-listen-public")
	addr := strings.Replace(metricsAddr(t, pub.Log), "0.0.0.0", "127.0.0.1", 1)
	mustCall(t, 200, "GET", "http://"+addr+"/metrics", "", "")

	p := startServe(t, env, "--data-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:0", "--max-connections-per-client", "2")
	addr = metricsAddr(t, p.Log)
	holdBusy(t, addr, "/metrics", 2)
	if !closedAtOnce(t, addr) {
		t.Fatal("the metrics listener kept a third connection from one address with a bound of 2")
	}
	if st := healthzOn(dialFrom(t, "127.0.0.2", addr)); st != "404 Not Found" {
		t.Fatalf("another client address on the metrics listener: %s, want 404 for /healthz", st)
	}
}
