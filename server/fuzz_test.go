package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/api"
)

// Fuzz modes, bits of the mode argument.
const (
	fuzzCacheOff  = 1 << iota // the segment cache off
	fuzzServerOut             // both ticket servers down: leases fail with ErrUnavailable
	fuzzAccessLog             // every request logged
)

// fuzzTokens are the tokens a fuzzed request may carry, by the tok argument modulo their number.
var fuzzTokens = []string{"", adminTok, ordersTok, linksTok, "wrong-token-0123456789"}

// FuzzHandler sends requests built from fuzzed parts (method, target with path and query, one header,
// the body, a token, and the server's mode) through the HTTP parser and the handler, and checks what
// must hold for every request: no panic and no 5xx but a 503 from an unusable backend; every error
// answer is the error JSON with a known code (and WWW-Authenticate or Retry-After where they belong);
// a refused request moves no counter and writes nothing; no invalid namespace name reaches the backend;
// and no token shows in an answer or a log line unless the request carried it outside its
// Authorization header.
func FuzzHandler(f *testing.F) {
	type seed struct {
		method, target    string
		tok               byte
		hname, hval, body string
		mode              byte
	}
	seeds := []seed{
		{"POST", "/v1/namespaces/orders/blocks", 2, "", "", `{"size":10}`, 0},
		{"POST", "/v1/namespaces/orders/blocks", 1, "Content-Type", "application/json", `{"size":1000}`, fuzzCacheOff},
		{"POST", "/v1/namespaces/orders/blocks", 2, "", "", `{"size":10}`, fuzzServerOut},
		{"POST", "/v1/namespaces/orders/blocks", 3, "", "", `{"size":10}`, 0},
		{"POST", "/v1/namespaces/orders/blocks", 2, "", "", `{"size": 1e3}`, 0},
		{"POST", "/v1/namespaces/orders/blocks", 2, "", "", `{"size":10}{"size":1}`, 0},
		{"POST", "/v1/namespaces/orders/blocks", 2, "Transfer-Encoding", "chunked", "5\r\n{\"siz\r\n0\r\n\r\n", 0},
		{"POST", "/v1/namespaces/orders/blocks", 2, "", "", strings.Repeat(" ", api.MaxBodyBytes+1), 0},
		{"GET", "/v1/namespaces/links/ids?count=5", 3, "X-Request-Id", "caller-1", "", fuzzAccessLog},
		{"GET", "/v1/namespaces/links/ids?count=5", 3, "", "", "", fuzzServerOut | fuzzAccessLog},
		{"GET", "/v1/namespaces/links/ids?count=5&count=6", 3, "", "", "", 0},
		{"GET", "/v1/namespaces/links/ids?count=%2B5", 3, "", "", "", 0},
		{"GET", "/v1/namespaces/orders", 2, "", "", "", 0},
		{"GET", "/v1/namespaces", 1, "", "", "", 0},
		{"GET", "/v1/namespaces", 0, "Authorization", "Bearer " + ordersTok, "", 0},
		{"GET", "/v1/namespaces", 0, "Authorization", "bearer   " + adminTok + "  ", "", 0},
		{"PUT", "/v1/namespaces/payments", 1, "", "", `{"block_size":50,"lease_ttl":"10m","start":"5000"}`, 0},
		{"PUT", "/v1/namespaces/orders", 1, "", "", `{"start":"9223372036854775807"}`, 0},
		{"PUT", "/v1/namespaces/orders", 2, "", "", `{"start":"1"}`, 0},
		{"PUT", "/v1/namespaces/orders%27%3B%20DROP%20TABLE%20tickets%3B--", 1, "", "", `{}`, 0},
		{"POST", "/v1/namespaces/a%2F..%2Fb/blocks", 1, "", "", ``, 0},
		{"DELETE", "/v1/namespaces/orders", 1, "", "", "", 0},
		{"GET", "/", 1, "", "", "", 0},
		{"GET", "/?x=1", 1, "", "", "", fuzzServerOut},
		{"GET", "/readyz", 0, "", "", "", fuzzServerOut},
		{"GET", "/metrics", 0, "", "", "", 0},
		{"GET", "/openapi.json", 4, "", "", "", 0},
		{"BREW", "/v1/namespaces/orders", 2, "Accept", "*/*", "", 0},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, s.tok, s.hname, s.hval, s.body, s.mode)
	}
	f.Fuzz(func(t *testing.T, method, target string, tok byte, hname, hval, body string, mode byte) {
		token := fuzzTokens[int(tok)%len(fuzzTokens)]
		var raw strings.Builder
		fmt.Fprintf(&raw, "%s %s HTTP/1.1\r\nHost: ticketd\r\n", method, target)
		authLine := ""
		if token != "" {
			authLine = "Authorization: Bearer " + token + "\r\n"
		}
		raw.WriteString(authLine)
		if hname != "" {
			fmt.Fprintf(&raw, "%s: %s\r\n", hname, hval)
		}
		if !strings.EqualFold(hname, "Transfer-Encoding") {
			fmt.Fprintf(&raw, "Content-Length: %d\r\n", len(body))
		}
		raw.WriteString("\r\n" + body)
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw.String())))
		if err != nil {
			return // net/http refuses it before any handler runs
		}
		req.RemoteAddr = "192.0.2.1:1234"
		// What the caller sent besides the Authorization line this test added: a token found there may
		// come back (an unknown field's name, say); any other token must not.
		sent := strings.Replace(raw.String(), authLine, "", 1)

		s := newTestServer(t, func(c *Config) {
			c.Cache.Disabled = mode&fuzzCacheOff != 0
			c.AccessLog = mode&fuzzAccessLog != 0
		})
		// A good lease first, so that the cache holds segments and prefetches as it does in service.
		if w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":3}`}); w.Code != 200 {
			t.Fatalf("warm-up lease: %d %s", w.Code, w.Body.String())
		}
		if mode&fuzzServerOut != 0 {
			s.fake.SetDown("a", "")
			s.fake.SetDown("b", "")
		}
		waitIdle(t, s.Server)
		before, leases, writes := fmt.Sprint(s.fake.Counters()), s.fake.Leases(), s.fake.Writes()

		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		waitIdle(t, s.Server)

		answer := w.Body.String()
		status := w.Code
		switch {
		case status < 200 || status > 599:
			t.Fatalf("status %d", status)
		case status >= 500 && (status != 503 || mode&fuzzServerOut == 0):
			t.Fatalf("status %d with the backend %s: %s\nlog: %s", status, map[bool]string{true: "down", false: "up"}[mode&fuzzServerOut != 0], answer, s.logs.String())
		}
		if w.Header().Get("X-Request-Id") == "" {
			t.Fatal("no X-Request-Id")
		}
		if s.fake.BadNames() != 0 {
			t.Fatalf("an invalid namespace name reached the backend (%s %q)", req.Method, req.URL.Path)
		}
		for _, known := range []string{adminTok, ordersTok, linksTok} {
			if (strings.Contains(answer, known) || strings.Contains(fmt.Sprint(w.Header()), known) ||
				strings.Contains(s.logs.String(), known)) && !strings.Contains(sent, known) {
				t.Fatalf("a token shows in the answer or the log:\n%s\n%s", answer, s.logs.String())
			}
		}
		if status < 400 {
			checkSuccess(t, req, w)
			return
		}
		if req.Method != http.MethodHead {
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("error answer %d with Content-Type %q", status, ct)
			}
			var e api.Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == "" || !slices.Contains(errorCodes, e.Error.Code) {
				t.Fatalf("error answer %d is not the error JSON: %q (%v)", status, answer, err)
			}
		}
		if status == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Fatal("401 without WWW-Authenticate")
		}
		if (status == 429 || status == 503) && w.Header().Get("Retry-After") == "" {
			t.Fatalf("%d without Retry-After", status)
		}
		if after := fmt.Sprint(s.fake.Counters()); after != before || s.fake.Leases() != leases || s.fake.Writes() != writes {
			t.Fatalf("refused with %d, but the backend moved: counters %s → %s, leases %d → %d, writes %d → %d",
				status, before, after, leases, s.fake.Leases(), writes, s.fake.Writes())
		}
	})
}

// checkSuccess checks a 2xx answer: JSON on the API routes, HTML for the status page.
func checkSuccess(t *testing.T, req *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	ct := w.Header().Get("Content-Type")
	switch {
	case req.URL.Path == "/":
		if !strings.HasPrefix(ct, "text/html") {
			t.Fatalf("status page as %q", ct)
		}
	case req.URL.Path == "/metrics":
	case !json.Valid(w.Body.Bytes()) || ct != "application/json":
		t.Fatalf("%d answer %q as %q", w.Code, w.Body.String(), ct)
	}
	if strings.HasSuffix(req.URL.Path, "/blocks") {
		var b api.Block
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ToBlock(); err != nil || b.Size < 1 {
			t.Fatalf("block %+v: %v", b, err)
		}
		if n, _ := strconv.ParseInt(b.Start, 10, 64); n < 1 {
			t.Fatalf("block starts at %s", b.Start)
		}
	}
}
