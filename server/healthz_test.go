package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/version"
)

// TestHealthzTellsTheAdminTheBuild: /healthz answers everyone 200; only the admin's answer names the
// running build, the one `ticketd version` prints and ticketd_build_info carries.
func TestHealthzTellsTheAdminTheBuild(t *testing.T) {
	s := newTestServer(t, nil)
	want := version.Get()
	for _, tc := range []struct {
		name, token string
		build       bool
	}{
		{"no token", "", false},
		{"a namespace's token", ordersTok, false},
		{"a wrong token", "not-" + ordersTok, false},
		{"the admin token", adminTok, true},
	} {
		w := s.do(t, request{method: "GET", path: "/healthz", token: tc.token})
		var h api.Health
		if err := json.Unmarshal(w.Body.Bytes(), &h); w.Code != 200 || err != nil || h.Status != "ok" {
			t.Fatalf("%s: %d %q (%v)", tc.name, w.Code, w.Body, err)
		}
		if !tc.build {
			if h != (api.Health{Status: "ok"}) {
				t.Fatalf("%s: told %+v, want the bare status", tc.name, h)
			}
			continue
		}
		if h.Version != want.Version || h.Commit != want.Commit || h.Dirty == nil || *h.Dirty != want.Dirty || h.Go != want.Go || h.Go == "" {
			t.Fatalf("%s: %+v, want the build %+v", tc.name, h, want)
		}
	}
	w := s.do(t, request{method: "GET", path: "/metrics", token: adminTok})
	if line := `ticketd_build_info{commit="` + want.Commit + `"`; !strings.Contains(w.Body.String(), line) || !strings.Contains(w.Body.String(), `version="`+want.Version+`"} 1`) {
		t.Fatalf("/metrics has no ticketd_build_info of the build %+v", want)
	}
}

// TestJSONAnswersEndWithANewline: every JSON answer ends with a newline, as a shell prompt after curl
// wants, the hand-written ones of the hot path included.
func TestJSONAnswersEndWithANewline(t *testing.T) {
	s := newTestServer(t, nil)
	for _, r := range []request{
		{method: "GET", path: "/healthz"},
		{method: "GET", path: "/readyz"},
		{method: "GET", path: "/openapi.json"},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":5}`},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=3", token: ordersTok},
		{method: "GET", path: "/v1/namespaces/orders", token: ordersTok},
		{method: "GET", path: "/v1/namespaces", token: adminTok},
		{method: "GET", path: "/v1/namespaces/nosuch", token: adminTok},
		{method: "POST", path: "/v1/namespaces/orders/blocks"},
	} {
		w := s.do(t, r)
		if body := w.Body.String(); !strings.HasSuffix(body, "}\n") || !json.Valid([]byte(body)) {
			t.Errorf("%s %s: %d %q does not end with a newline", r.method, r.path, w.Code, body)
		}
	}
}
