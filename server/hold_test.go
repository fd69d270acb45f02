package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ticketd/ticketd/api"
)

// TestHeldLeaseServedWhenAServerIsBack: with both ticket servers out of rotation, a lease that asks
// "Prefer: wait=5" is held, not answered; when a server comes back it is served at once, although the
// cache's backoff after its failed calls (grown to half a second or more) has not ended: a server
// back in rotation ends it.
func TestHeldLeaseServedWhenAServerIsBack(t *testing.T) {
	s := newTestServer(t, nil)
	s.fake.SetDown("a", "connection refused")
	s.fake.SetDown("b", "connection refused")
	sp := s.cache.space("orders")
	failures := func() int {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		return sp.failures
	}
	for failures() < 7 { // a backoff of 0.5 to 1 s after the last
		if w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%d with both servers down: %s", w.Code, w.Body.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		answered <- s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok,
			header: map[string]string{"Prefer": "wait=5"}})
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case w := <-answered:
		t.Fatalf("answered %d while no server was in rotation, before the wait asked: %s", w.Code, w.Body.String())
	default:
	}
	if sp.retryAt.Load() <= time.Now().UnixNano() {
		t.Fatal("the cache's backoff has ended already: the test shows nothing")
	}
	s.fake.SetUp("a")
	w := <-answered
	if w.Code != http.StatusOK {
		t.Fatalf("held lease answered %d once a server was back: %s", w.Code, w.Body.String())
	}
	if blk := decode[api.Block](t, w); blk.Size == 0 {
		t.Fatalf("no block: %s", w.Body.String())
	}
}

// TestHeldLeaseAnsweredWhenTheWaitEnds: with no ticket server back, a held lease is answered 503
// unavailable once the wait it asked passed, on both lease routes, with "Preference-Applied: wait=1"
// and no Retry-After (the client waited already); nothing is issued. Without Prefer the answer comes at
// once, with Retry-After.
func TestHeldLeaseAnsweredWhenTheWaitEnds(t *testing.T) {
	s := newTestServer(t, nil)
	s.fake.SetDown("a", "connection refused")
	s.fake.SetDown("b", "connection refused")
	before := s.fake.Counters()
	for _, r := range []request{
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, header: map[string]string{"Prefer": "wait=1"}},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=3", token: ordersTok, header: map[string]string{"Prefer": "respond-async, wait=1"}},
	} {
		begin := time.Now()
		w := s.do(t, r)
		took := time.Since(begin)
		e := decode[api.Error](t, w)
		if w.Code != http.StatusServiceUnavailable || e.Error.Code != api.CodeUnavailable {
			t.Fatalf("%s %s: %d %s, want 503 unavailable", r.method, r.path, w.Code, e.Error.Code)
		}
		if took < time.Second {
			t.Fatalf("%s %s: answered after %s, before the second it asked to wait", r.method, r.path, took)
		}
		if got, retry := w.Header().Get("Preference-Applied"), w.Header().Get("Retry-After"); got != "wait=1" || retry != "" {
			t.Fatalf("Preference-Applied %q, Retry-After %q; want wait=1 and none", got, retry)
		}
	}
	w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok})
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || w.Header().Get("Preference-Applied") != "" {
		t.Fatalf("without Prefer: %d, Retry-After %q, Preference-Applied %q", w.Code, w.Header().Get("Retry-After"), w.Header().Get("Preference-Applied"))
	}
	if after := s.fake.Counters(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("counters %v → %v", before, after)
	}
}

// TestPreferredWait: the wait is whole seconds, the longest of several, at most 10 s and half the
// write timeout; other preferences are left alone; a wait that is not whole seconds is
// refused with what to send instead.
func TestPreferredWait(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.WriteTimeout = 4500 * time.Millisecond })
	long := newTestServer(t, func(c *Config) { c.WriteTimeout = time.Minute })
	for _, tc := range []struct {
		s       *testServer
		headers []string
		want    time.Duration
		bad     bool
	}{
		{s, nil, 0, false},
		{s, []string{"return=minimal"}, 0, false},
		{s, []string{"wait=1"}, time.Second, false},
		{s, []string{"respond-async, WAIT=2"}, 2 * time.Second, false},
		{s, []string{`wait="2"`}, 2 * time.Second, false},
		{s, []string{"wait=1", "wait=2"}, 2 * time.Second, false},
		{s, []string{"wait=0"}, 0, false},
		{s, []string{"wait=9"}, 2 * time.Second, false}, // half the write timeout, in whole seconds
		{long, []string{"wait=60"}, 10 * time.Second, false},
		{s, []string{"wait=soon"}, 0, true},
		{s, []string{"wait=-1"}, 0, true},
		{s, []string{"wait=1.5"}, 0, true},
		{s, []string{"wait=99999999999"}, 0, true},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/orders/blocks", nil)
		for _, h := range tc.headers {
			r.Header.Add("Prefer", h)
		}
		got, err := tc.s.preferredWait(r)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("Prefer %q: %s, %v; want %s, error %v", tc.headers, got, err, tc.want, tc.bad)
		}
		if err != nil {
			if a := classify(err); a.status != http.StatusBadRequest || a.code != api.CodeInvalidPrefer {
				t.Errorf("Prefer %q: %d %s, want 400 %s", tc.headers, a.status, a.code, api.CodeInvalidPrefer)
			}
		}
	}
}
