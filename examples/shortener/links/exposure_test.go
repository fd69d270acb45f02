package links

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/api"
)

// formerPublicKey was the built-in scramble key, readable in this repository by anyone.
const formerPublicKey = "ticketd-shortener-default-key"

// TestNoPublicDefaultKey: New refuses to run without a scramble key of real strength, unless in
// development; there it scrambles with a key of its own, so that encoding the IDs 1, 2, 3, … with the
// key this repository once built in (the attack of listing every link) finds nothing.
func TestNoPublicDefaultKey(t *testing.T) {
	ids := linksClient(t, true)
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for name, key := range map[string]string{
		"no key":             "",
		"a short key":        "0123456789abcdef",
		"a repeated key":     strings.Repeat("abcd1234", 5),
		"few distinct chars": strings.Repeat("ab", 20),
	} {
		_, err := New(Config{IDs: ids, Redis: rdb, BaseURL: "https://sho.rt", ScrambleKey: key})
		if err == nil || !strings.Contains(err.Error(), "scramble key") || (key != "" && strings.Contains(err.Error(), key)) {
			t.Errorf("%s: New gave %v, want a refusal naming the scramble key and not quoting it", name, err)
		}
	}

	f := newFixture(t, func(c *Config) { c.ScrambleKey, c.Development = "", true })
	for range 20 {
		f.create(t, "https://example.com/private")
	}
	public := NewCodec(formerPublicKey)
	for id := int64(1); id <= 300; id++ {
		code, _ := public.Encode(id)
		if rec := f.do(t, "GET", "/api/links/"+code, ""); rec.Code != http.StatusNotFound {
			t.Fatalf("ID %d encoded with the former public key: GET /api/links/%s answered %d %s", id, code, rec.Code, rec.Body)
		}
	}
}

// TestNoHostTrustedOutsideDevelopment: short URLs start with the base URL, never with the Host a
// client sends; New refuses to run without one unless in development.
func TestNoHostTrustedOutsideDevelopment(t *testing.T) {
	ids := linksClient(t, true)
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := New(Config{IDs: ids, Redis: rdb, ScrambleKey: testScrambleKey}); err == nil || !strings.Contains(err.Error(), "base URL") {
		t.Fatalf("New without a base URL: %v", err)
	}
	f := newFixture(t, nil)
	req := httptest.NewRequest("POST", "http://evil.example/api/links", strings.NewReader(`{"url":"http://example.com"}`))
	rec := httptest.NewRecorder()
	f.svc.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"short_url":"https://sho.rt/`) || strings.Contains(rec.Body.String(), "evil") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// from sends POST /api/links from a client address, with a bearer token if given.
func (f *fixture) from(t *testing.T, addr, token string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", "/api/links", strings.NewReader(`{"url":"https://example.com/`+strings.Repeat("x", 2000)+`"}`))
	req.RemoteAddr = addr + ":50000"
	req.Header.Set("X-Forwarded-For", "198.51.100.99")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	f.svc.Handler().ServeHTTP(rec, req)
	return rec
}

// TestLinkCreationIsLimited: past a client address's burst, POST /api/links answers 429 with
// Retry-After (X-Forwarded-For does not choose the bucket); with a creation token, a request without
// it, or with another, is 401; past MaxLinks, 507. None of them takes an ID or writes to Redis, and
// each is counted in Stats.
func TestLinkCreationIsLimited(t *testing.T) {
	const createTok = "shortener-create-token-0123456789"
	f := newFixture(t, func(c *Config) { c.CreateRate, c.CreateBurst, c.CreateToken, c.MaxLinks = 0.001, 3, createTok, 5 })
	for range 3 {
		if rec := f.from(t, "192.0.2.1", createTok); rec.Code != http.StatusCreated {
			t.Fatalf("within the burst: %d %s", rec.Code, rec.Body)
		}
	}
	before, keys := f.svc.Stats(), f.keys(t)
	rec := f.from(t, "192.0.2.1", createTok)
	if wantError(t, rec, http.StatusTooManyRequests, api.CodeRateLimited); rec.Header().Get("Retry-After") != "1000" {
		t.Fatalf("Retry-After %q, want 1000 (one link per 1000 s)", rec.Header().Get("Retry-After"))
	}
	for _, tok := range []string{"", "not-the-create-token-0123", strings.ToUpper(createTok)} {
		rec := f.from(t, "192.0.2.2", tok)
		wantError(t, rec, http.StatusUnauthorized, api.CodeInvalidToken)
		if strings.Contains(rec.Body.String(), createTok) || strings.Contains(rec.Body.String(), strings.ToUpper(createTok)) {
			t.Fatalf("a 401 shows a token: %s", rec.Body)
		}
	}
	// Redirects and reads need no token.
	l := f.do(t, "GET", "/healthz", "")
	if l.Code != http.StatusOK {
		t.Fatalf("healthz %d", l.Code)
	}
	st := f.svc.Stats()
	if st.IDs.Served != before.IDs.Served || f.keys(t) != keys || st.Created != 3 || st.RateLimited != 1 || st.Unauthorized != 3 {
		t.Fatalf("refusals took %d IDs and wrote %d keys; stats %+v", st.IDs.Served-before.IDs.Served, f.keys(t)-keys, st)
	}
	// Another address has its bucket; the cap of 5 stops the sixth link.
	for range 2 {
		if rec := f.from(t, "192.0.2.3", createTok); rec.Code != http.StatusCreated {
			t.Fatalf("another address: %d %s", rec.Code, rec.Body)
		}
	}
	before, keys = f.svc.Stats(), f.keys(t)
	wantError(t, f.from(t, "192.0.2.3", createTok), http.StatusInsufficientStorage, CodeTooManyLinks)
	if st := f.svc.Stats(); st.IDs.Served != before.IDs.Served || f.keys(t) != keys || st.OverCap != 1 || st.Failed != 0 {
		t.Fatalf("past the cap: %d IDs taken, %d keys written; stats %+v", st.IDs.Served-before.IDs.Served, f.keys(t)-keys, st)
	}
	if _, err := New(Config{IDs: f.ids, Redis: f.rdb, BaseURL: "https://sho.rt", ScrambleKey: testScrambleKey, CreateToken: "short"}); err == nil {
		t.Fatal("a weak creation token was accepted")
	}
}
