package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthcheck(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer up.Close()
	if out, errOut, code := run(t, nil, "healthcheck", "--url", up.URL+"/healthz"); code != 0 || out != "ok\n" {
		t.Fatalf("healthy: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := run(t, nil, "healthcheck", "--url", up.URL+"/nope"); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("404: exit %d %q", code, errOut)
	}
	up.Close()
	if _, _, code := run(t, nil, "healthcheck", "--url", up.URL+"/healthz", "--timeout", "500ms"); code != 1 {
		t.Fatalf("down: exit %d", code)
	}
	if _, errOut, code := run(t, nil, "healthcheck", "--url", "ftp://x"); code != 2 || !strings.Contains(errOut, "http(s) URL") {
		t.Fatalf("bad url: exit %d %q", code, errOut)
	}
}
