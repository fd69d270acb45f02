package links

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/inprocess"
	"github.com/ticketd/ticketd/internal/testenv"
)

// fixture is a Service on the harness's Redis, under a key prefix of its own, taking IDs from an
// embedded ticket store through the SDK.
type fixture struct {
	svc    *Service
	rdb    *goredis.Client
	prefix string
	ids    *client.Client
}

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testScrambleKey is the fixture's scramble key: a secret of real strength, as New requires.
const testScrambleKey = "5f0c2a9e7b31d48c6e2f90a1b7d35c84e8a6c3f1d9b27450a3e1f6c8d2b97e04"

// newFixture starts a fixture; edit adjusts the Config first. Namespace "links" exists unless the
// Config's IDs are set by edit.
func newFixture(t testing.TB, edit func(*Config)) *fixture {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testenv.RedisPrefix(t, "shortener-test-")
	cfg := Config{Redis: rdb, KeyPrefix: prefix, BaseURL: "https://sho.rt", ScrambleKey: testScrambleKey, Now: func() time.Time { return testNow }}
	if edit != nil {
		edit(&cfg)
	}
	if cfg.IDs == nil {
		cfg.IDs = linksClient(t, true)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{svc: svc, rdb: rdb, prefix: prefix, ids: cfg.IDs}
}

// linksClient returns an SDK client on a fresh embedded store, with namespace links when create is set.
func linksClient(t testing.TB, create bool) *client.Client {
	t.Helper()
	var namespaces []allocator.Namespace
	if create {
		namespaces = append(namespaces, allocator.Namespace{Name: "links", BlockSize: 100})
	}
	st := testenv.Embedded(t, namespaces...)
	c, err := client.New(inprocess.Source(st), "links", client.WithMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// do sends a request to the service and returns the answer.
func (f *fixture) do(t testing.TB, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	f.svc.Handler().ServeHTTP(rec, req)
	return rec
}

func (f *fixture) keys(t testing.TB) int {
	t.Helper()
	keys, err := f.rdb.Keys(context.Background(), f.prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

func (f *fixture) create(t testing.TB, url string) linkJSON {
	t.Helper()
	rec := f.do(t, "POST", "/api/links", fmt.Sprintf(`{"url":%q}`, url))
	if rec.Code != http.StatusCreated {
		t.Fatalf("POST /api/links %s: %d %s", url, rec.Code, rec.Body)
	}
	var l linkJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// wantError checks an error answer's status and code.
func wantError(t testing.TB, rec *httptest.ResponseRecorder, status int, code string) api.ErrorBody {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != status || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("got %d %s, want %d with code %s and a message", rec.Code, rec.Body, status, code)
	}
	return e.Error
}

func TestCreateRedirectAndCount(t *testing.T) {
	f := newFixture(t, nil)
	const target = "https://example.com/a/b?q=1#frag"
	l := f.create(t, target)
	if strings.Contains(f.do(t, "GET", "/api/links/"+l.Code, "").Body.String(), `"id"`) {
		t.Fatal("the API shows the link's ID, which counts the links")
	}
	if id, err := f.svc.codec.Decode(l.Code); err != nil || id < 1 {
		t.Fatalf("code %q decodes to %d, %v", l.Code, id, err)
	}
	if l.ShortURL != "https://sho.rt/"+l.Code || l.URL != target {
		t.Fatalf("answer %+v", l)
	}
	for i := range 3 {
		rec := f.do(t, "GET", "/"+l.Code, "")
		if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != target {
			t.Fatalf("redirect %d: %d, Location %q", i, rec.Code, rec.Header().Get("Location"))
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q, want no-store so that every visit is counted", cc)
		}
	}
	rec := f.do(t, "GET", "/api/links/"+l.Code, "")
	var got linkJSON
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
		t.Fatalf("GET /api/links/%s: %d %s", l.Code, rec.Code, rec.Body)
	}
	if got.Hits == nil || *got.Hits != 3 || got.URL != target || got.Code != l.Code || got.CreatedAt == nil || !got.CreatedAt.Equal(testNow) {
		t.Fatalf("GET /api/links/%s = %s", l.Code, rec.Body)
	}
	st := f.svc.Stats()
	if st.Created != 1 || st.Redirects != 3 || st.Refused != 0 || st.IDs.Served != 1 || st.IDs.Refills < 1 {
		t.Fatalf("stats %+v", st)
	}
	if f.keys(t) != 2 {
		t.Fatalf("%d keys in Redis for one link, want its hash and the count of links", f.keys(t))
	}
}

func TestShortURLFromTheRequestHost(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BaseURL, c.Development = "", true })
	req := httptest.NewRequest("POST", "http://s.example:8081/api/links", strings.NewReader(`{"url":"http://example.com"}`))
	rec := httptest.NewRecorder()
	f.svc.Handler().ServeHTTP(rec, req)
	var l linkJSON
	if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &l) != nil || l.ShortURL != "http://s.example:8081/"+l.Code {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// TestRefusedRequestsCreateNothing: each invalid request gets a 400 (or 413) in the error shape of
// ticketd, and no key appears in Redis and no ID is taken from the client.
func TestRefusedRequestsCreateNothing(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "https://example.com/first") // so that the client holds a block
	before := f.svc.Stats()
	keys := f.keys(t)
	long := "https://example.com/" + strings.Repeat("a", MaxURLBytes-len("https://example.com/")+1)
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"empty body", ``, 400, api.CodeInvalidJSON},
		{"not JSON", `url=https://example.com`, 400, api.CodeInvalidJSON},
		{"array", `["https://example.com"]`, 400, api.CodeInvalidJSON},
		{"two objects", `{"url":"https://example.com"}{"url":"https://example.com"}`, 400, api.CodeInvalidJSON},
		{"trailing brace", `{"url":"https://example.com"}}`, 400, api.CodeInvalidJSON},
		{"url not a string", `{"url":42}`, 400, api.CodeInvalidJSON},
		{"unknown field", `{"url":"https://example.com","code":"mine"}`, 400, api.CodeUnknownField},
		{"no url", `{}`, 400, CodeInvalidURL},
		{"null url", `{"url":null}`, 400, CodeInvalidURL},
		{"empty url", `{"url":""}`, 400, CodeInvalidURL},
		{"ftp", `{"url":"ftp://example.com/file"}`, 400, CodeInvalidURL},
		{"javascript", `{"url":"javascript:alert(1)"}`, 400, CodeInvalidURL},
		{"mailto", `{"url":"mailto:a@example.com"}`, 400, CodeInvalidURL},
		{"relative", `{"url":"/just/a/path"}`, 400, CodeInvalidURL},
		{"no scheme", `{"url":"example.com/x"}`, 400, CodeInvalidURL},
		{"no host", `{"url":"https:///path"}`, 400, CodeInvalidURL},
		{"port only", `{"url":"http://:8080/"}`, 400, CodeInvalidURL},
		{"opaque", `{"url":"http:example.com"}`, 400, CodeInvalidURL},
		{"credentials", `{"url":"https://user:pw@example.com/"}`, 400, CodeInvalidURL},
		{"space", `{"url":"https://example.com/a b"}`, 400, CodeInvalidURL},
		{"newline", `{"url":"https://example.com/a\nb"}`, 400, CodeInvalidURL},
		{"bad escape", `{"url":"https://example.com/%zz"}`, 400, CodeInvalidURL},
		{"2049 bytes", fmt.Sprintf(`{"url":%q}`, long), 400, CodeInvalidURL},
		{"too long once encoded", fmt.Sprintf(`{"url":%q}`, "https://example.com/"+strings.Repeat("é", 700)), 400, CodeInvalidURL},
		{"body too large", fmt.Sprintf(`{"url":"https://example.com/%s"}`, strings.Repeat("a", MaxBodyBytes)), 413, api.CodeBodyTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, f.do(t, "POST", "/api/links", tc.body), tc.status, tc.code)
		})
	}
	after := f.svc.Stats()
	if n := f.keys(t); n != keys {
		t.Errorf("Redis keys went from %d to %d", keys, n)
	}
	if after.IDs.Served != before.IDs.Served || after.IDs.Refills != before.IDs.Refills {
		t.Errorf("refused requests took IDs: served %d → %d, refills %d → %d", before.IDs.Served, after.IDs.Served, before.IDs.Refills, after.IDs.Refills)
	}
	if after.Created != before.Created || after.Refused != before.Refused+int64(len(cases)) {
		t.Errorf("stats %+v → %+v", before, after)
	}
}

func TestURLLimits(t *testing.T) {
	f := newFixture(t, nil)
	exact := "https://example.com/" + strings.Repeat("a", MaxURLBytes-len("https://example.com/"))
	if l := f.create(t, exact); l.URL != exact {
		t.Fatalf("a URL of exactly %d bytes came back as %q", MaxURLBytes, l.URL)
	}
	// Normal form: net/url percent-encodes what needs it, and that is what the redirect sends.
	if l := f.create(t, "HTTP://example.com/ä"); l.URL != "http://example.com/%C3%A4" {
		t.Fatalf("normal form %q", l.URL)
	}
}

func TestUnknownAndMalformedCodes(t *testing.T) {
	f := newFixture(t, nil)
	keys := f.keys(t)
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/abc", 404, CodeLinkNotFound},           // well-formed, no such link
		{"GET", "/ab-c", 404, CodeLinkNotFound},          // no link can have it
		{"GET", "/0abc", 404, CodeLinkNotFound},          // leading zero: never written
		{"GET", "/AzL8n0Y58m8", 404, CodeLinkNotFound},   // above 2^63-1
		{"GET", "/favicon.ico", 404, CodeLinkNotFound},   // browsers ask
		{"GET", "/api/links/abc", 404, CodeLinkNotFound}, // well-formed, no such link
		{"GET", "/api/links/ab-c", 400, CodeInvalidCode},
		{"GET", "/api/links/123456789012", 400, CodeInvalidCode},
		{"GET", "/a/b", 404, CodeLinkNotFound},
		{"GET", "/", 404, api.CodeRouteNotFound},
		{"PUT", "/api/links", 405, api.CodeMethodNotAllowed},
		{"DELETE", "/api/links/abc", 405, api.CodeMethodNotAllowed},
	} {
		e := wantError(t, f.do(t, tc.method, tc.path, ""), tc.status, tc.code)
		t.Logf("%s %s: %d %s", tc.method, tc.path, tc.status, e.Message)
	}
	if n := f.keys(t); n != keys {
		t.Errorf("lookups of unknown codes changed Redis: %d keys → %d", keys, n)
	}
	if st := f.svc.Stats(); st.NotFound != 7 || st.IDs.Served != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestNoScrambleCodeIsTheID: without the scramble a code is the link's ID in base 62. (Consecutive links
// need not get consecutive IDs: the SDK serves each processor from its own run of the block.)
func TestNoScrambleCodeIsTheID(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.NoScramble = true })
	seen := map[string]bool{}
	for range 20 {
		l := f.create(t, "https://example.com/")
		id, err := f.svc.codec.Decode(l.Code)
		if err != nil || id < 1 || l.Code != base62(uint64(id)) || seen[l.Code] {
			t.Fatalf("link %+v: want the code to be base 62 of a new ID", l)
		}
		seen[l.Code] = true
	}
}

// TestTakenCodeIsNeverOverwritten: a code already in Redis (as after a change of scramble key) is left
// alone and the link gets the next ID's code.
func TestTakenCodeIsNeverOverwritten(t *testing.T) {
	f := newFixture(t, nil)
	first, _ := f.svc.codec.Encode(1) // the first ID of a fresh namespace
	key := f.prefix + "link:" + first
	if err := f.rdb.HSet(context.Background(), key, "url", "https://old.example/", "id", "77", "created", testNow.Format(time.RFC3339Nano), "hits", "5").Err(); err != nil {
		t.Fatal(err)
	}
	l := f.create(t, "https://new.example/")
	if id, _ := f.svc.codec.Decode(l.Code); l.Code == first || id == 1 {
		t.Fatalf("the new link took the code %s of an existing one: %+v", first, l)
	}
	if url, _ := f.rdb.HGet(context.Background(), key, "url").Result(); url != "https://old.example/" {
		t.Fatalf("the old link now points to %q", url)
	}
}

func TestConcurrentCreatesGetDistinctCodes(t *testing.T) {
	f := newFixture(t, nil)
	const workers, each = 16, 100
	var mu sync.Mutex
	codes := map[string]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				url := fmt.Sprintf("https://example.com/%d/%d", w, i)
				l := f.create(t, url)
				mu.Lock()
				if other, dup := codes[l.Code]; dup {
					t.Errorf("%s and %s share the code %s", other, url, l.Code)
				}
				codes[l.Code] = url
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n := f.keys(t); n != workers*each+1 || len(codes) != workers*each { // and the count of links
		t.Fatalf("%d keys and %d codes for %d links", n, len(codes), workers*each)
	}
}

func TestTicketdFailureIs503AndCreatesNothing(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.IDs = linksClient(t, false) }) // no namespace: every lease fails
	e := wantError(t, f.do(t, "POST", "/api/links", `{"url":"https://example.com/"}`), 503, api.CodeUnavailable)
	if !strings.Contains(e.Message, "the namespace does not exist on ticketd") {
		t.Errorf("the 503 does not say why: %q", e.Message)
	}
	if n := f.keys(t); n != 0 {
		t.Fatalf("%d keys after a failed create", n)
	}
	if st := f.svc.Stats(); st.Failed != 1 || st.Created != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHealthz(t *testing.T) {
	f := newFixture(t, nil)
	f.create(t, "https://example.com/") // a lease has succeeded
	if rec := f.do(t, "GET", "/healthz", ""); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"status":"ok","ticketd":"ok"}` {
		t.Fatalf("healthz: %d %s", rec.Code, rec.Body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	down := goredis.NewClient(&goredis.Options{Addr: dead, MaxRetries: -1, DialTimeout: time.Second})
	defer down.Close()
	g := newFixture(t, func(c *Config) { c.Redis = down })
	rec := g.do(t, "GET", "/healthz", "")
	wantError(t, rec, 503, api.CodeUnavailable)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("a 503 without Retry-After")
	}
	// With Redis down, creating a link fails cleanly too.
	wantError(t, g.do(t, "POST", "/api/links", `{"url":"https://example.com/"}`), 503, api.CodeUnavailable)
	wantError(t, g.do(t, "GET", "/abc", ""), 503, api.CodeUnavailable)
}

// TestRefusedTokenIsTheCause: when ticketd refuses the shortener's token, a new link's 503 and /healthz
// say so, with ticketd's code and message, instead of only "unavailable" with the cause in the log.
func TestRefusedTokenIsTheCause(t *testing.T) {
	ticketd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.Error{Error: api.ErrorBody{Code: api.CodeInvalidToken, Message: "the token is not one this server accepts"}})
	}))
	defer ticketd.Close()
	ids, err := client.New(client.HTTP(ticketd.URL), "links", client.WithToken("rotated-away-0123456789"), client.WithMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ids.Close()
	f := newFixture(t, func(c *Config) { c.IDs = ids })
	const cause = "ticketd answered 401 invalid_token: the token is not one this server accepts"
	e := wantError(t, f.do(t, "POST", "/api/links", `{"url":"https://example.com/"}`), 503, api.CodeUnavailable)
	if !strings.Contains(e.Message, cause) || !strings.Contains(e.Message, "--token") {
		t.Errorf("the 503 says %q, want the cause %q and what to fix", e.Message, cause)
	}
	if strings.Contains(e.Message, ticketd.URL) {
		t.Errorf("the 503 shows ticketd's address to the shortener's callers: %q", e.Message)
	}
	rec := f.do(t, "GET", "/healthz", "")
	var h Health
	if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil || rec.Code != 200 || h.Status != "degraded" || !strings.Contains(h.Ticketd, cause) {
		t.Fatalf("healthz: %d %s, want 200, degraded, and the cause", rec.Code, rec.Body)
	}
	if n := f.keys(t); n != 0 {
		t.Fatalf("%d keys after refused leases", n)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	ids := linksClient(t, true)
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for name, cfg := range map[string]Config{
		"no IDs":          {Redis: rdb},
		"no Redis":        {IDs: ids},
		"base URL ftp":    {IDs: ids, Redis: rdb, BaseURL: "ftp://sho.rt"},
		"base URL host":   {IDs: ids, Redis: rdb, BaseURL: "https://"},
		"base URL query":  {IDs: ids, Redis: rdb, BaseURL: "https://sho.rt/?a=1"},
		"base URL parses": {IDs: ids, Redis: rdb, BaseURL: "https://sho.rt/%zz"},
	} {
		if cfg.BaseURL != "" {
			cfg.ScrambleKey = testScrambleKey // refused for the base URL alone
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	s, err := New(Config{IDs: ids, Redis: rdb, BaseURL: "https://sho.rt/s/", ScrambleKey: testScrambleKey})
	if err != nil || s.baseURL != "https://sho.rt/s" || !s.codec.Scrambled() {
		t.Fatalf("New: %v, base %q", err, s.baseURL)
	}
}

// BenchmarkService measures the service in-process (no HTTP hop) on the harness's Redis, IDs from an
// embedded store through the SDK: creating links, and redirects, from 16 goroutines per processor
// (a request spends most of its time waiting for Redis).
func BenchmarkService(b *testing.B) {
	f := newFixture(b, nil)
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f.create(b, "https://example.com/bench")
			}
		})
		st := f.svc.Stats()
		b.ReportMetric(st.BlocksPer1000Links(), "blocks/1000links")
	})
	code := f.create(b, "https://example.com/bench").Code
	b.Run("redirect", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if rec := f.do(b, "GET", "/"+code, ""); rec.Code != http.StatusMovedPermanently {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	})
}

// TestCodesExhausted: once ticketd has no ID left, or issues one above the largest code of
// Config.CodeLength, POST /api/links answers 507 codes_exhausted (not 503: retrying cannot help),
// creates nothing, and /healthz says "exhausted".
func TestCodesExhausted(t *testing.T) {
	for name, tc := range map[string]struct {
		start  int64
		length int
		links  int // links that fit before the refusal
	}{
		"no ID left":                  {math.MaxInt64 - 10, 0, 11},
		"an ID above the codes":       {62 * 62 * 62 * 62, 4, 0},
		"the last ID of 4 characters": {62*62*62*62 - 1, 4, 1},
	} {
		t.Run(name, func(t *testing.T) {
			st := testenv.Embedded(t, allocator.Namespace{Name: "links", BlockSize: 100, Start: tc.start})
			ids, err := client.New(inprocess.Source(st), "links", client.WithMaxWait(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ids.Close() })
			f := newFixture(t, func(c *Config) { c.IDs, c.CodeLength = ids, tc.length })
			var rec *httptest.ResponseRecorder
			created := 0
			for ; created <= tc.links; created++ {
				if rec = f.do(t, "POST", "/api/links", fmt.Sprintf(`{"url":"https://example.com/%d"}`, created)); rec.Code != http.StatusCreated {
					break
				}
				var l linkJSON
				if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || (tc.length > 0 && len(l.Code) > tc.length) {
					t.Fatalf("link %d: %s", created, rec.Body)
				}
			}
			// A ticketd whose lease takes what is left below the top may hand out a few IDs first.
			if created > tc.links || tc.links <= 1 && created != tc.links {
				t.Fatalf("%d links before the refusal, want %d", created, tc.links)
			}
			before := f.keys(t)
			e := wantError(t, rec, http.StatusInsufficientStorage, CodeExhausted)
			if !strings.Contains(e.Message, "every code is taken") {
				t.Errorf("the refusal says %q", e.Message)
			}
			wantError(t, f.do(t, "POST", "/api/links", `{"url":"https://example.com/again"}`), http.StatusInsufficientStorage, CodeExhausted)
			if n := f.keys(t); n != before {
				t.Fatalf("%d keys after a refused create, %d before", n, before)
			}
			rec = f.do(t, "GET", "/healthz", "")
			var h Health
			if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil || rec.Code != 200 || h.Status != "exhausted" || !strings.Contains(h.Ticketd, "every code") {
				t.Fatalf("healthz: %d %s, want 200 and exhausted", rec.Code, rec.Body)
			}
			if st := f.svc.Stats(); st.Exhausted != 2 || st.Failed != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
