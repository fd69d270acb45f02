package server

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/api"
)

// The security matrix: who may call what, how tokens are compared and kept out of logs, the size and
// time limits on what a client sends, rate limiting, and names that look like SQL. TLS is in
// tls_test.go.

// rotatedOrdersTok is a second token of namespace orders, as during a rotation.
const rotatedOrdersTok = "orders-token-rotated-0123456789"

// TestAuthMatrix sends every route with every kind of credential and checks the status against the
// table; a route that is not in the table fails the test, so a new route must say who may call it.
func TestAuthMatrix(t *testing.T) {
	type creds struct{ none, malformed, wrong, own, rotated, other, admin int }
	public := creds{200, 200, 200, 200, 200, 200, 200}
	// /readyz answers anyone (the admin with each server's state), but a token it does not know is
	// refused as anywhere else.
	readiness := creds{200, 401, 401, 200, 200, 200, 200}
	nsRoute := creds{401, 401, 401, 200, 200, 403, 200}
	adminRoute := creds{401, 401, 401, 403, 403, 403, 200}
	routes := map[string]struct {
		path, body string
		want       creds
	}{
		"POST /v1/namespaces/:ns/blocks": {"/v1/namespaces/orders/blocks", `{"size":5}`, nsRoute},
		"GET /v1/namespaces/:ns/ids":     {"/v1/namespaces/orders/ids?count=3", "", nsRoute},
		"GET /v1/namespaces/:ns":         {"/v1/namespaces/orders", "", nsRoute},
		"PUT /v1/namespaces/:ns":         {"/v1/namespaces/orders", `{"block_size":100}`, adminRoute},
		"GET /v1/namespaces":             {"/v1/namespaces", "", adminRoute},
		"GET /":                          {"/", "", adminRoute},
		"GET /healthz":                   {"/healthz", "", public},
		"GET /readyz":                    {"/readyz", "", readiness},
		"GET /metrics":                   {"/metrics", "", adminRoute},
		"GET /openapi.json":              {"/openapi.json", "", public},
	}
	s := newTestServer(t, func(c *Config) {
		c.Auth.Tokens = append(c.Auth.Tokens, NamespaceToken{Namespace: "orders", Token: rotatedOrdersTok})
	})
	seen := map[string]bool{}
	for _, r := range s.e.Routes() {
		if r.Method == "echo_route_not_found" {
			continue
		}
		key := r.Method + " " + r.Path
		seen[key] = true
		rt, ok := routes[key]
		if !ok {
			t.Errorf("route %s is not in the matrix: add it with who may call it", key)
			continue
		}
		method := r.Method
		for _, c := range []struct {
			name   string
			header string
			want   int
		}{
			{"no token", "", rt.want.none},
			{"not a bearer token", "Basic " + ordersTok, rt.want.malformed},
			{"unknown token", "Bearer not-" + ordersTok, rt.want.wrong},
			{"own namespace's token", "Bearer " + ordersTok, rt.want.own},
			{"own namespace's second token", "Bearer " + rotatedOrdersTok, rt.want.rotated},
			{"another namespace's token", "Bearer " + linksTok, rt.want.other},
			{"admin token", "Bearer " + adminTok, rt.want.admin},
		} {
			waitIdle(t, s.Server)
			before, writes := fmt.Sprint(s.fake.Counters()), s.fake.Writes()
			req := request{method: method, path: rt.path, body: rt.body}
			if c.header != "" {
				req.header = map[string]string{"Authorization": c.header}
			}
			w := s.do(t, req)
			if w.Code != c.want {
				t.Errorf("%s with %s: %d, want %d (%s)", key, c.name, w.Code, c.want, w.Body.String())
			}
			if w.Code >= 400 {
				waitIdle(t, s.Server)
				if after := fmt.Sprint(s.fake.Counters()); after != before || s.fake.Writes() != writes {
					t.Errorf("%s with %s was refused but moved the backend: %s → %s", key, c.name, before, after)
				}
			}
		}
	}
	for key := range routes {
		if !seen[key] {
			t.Errorf("the matrix names %s, which is no route", key)
		}
	}
}

// TestTokenComparisonIsConstantTime reads authenticator.lookup's source: it must hash the token, then
// compare the fixed-length digest against every configured one with crypto/subtle, in a loop over all
// credentials that nothing leaves early, and compare tokens no other way. (A timing test would be
// flaky; this one fails when someone adds a break, an early return or a bytes.Equal.)
func TestTokenComparisonIsConstantTime(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "auth.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lookup *ast.FuncDecl
	for _, d := range file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "lookup" && fd.Recv != nil {
			lookup = fd
		}
	}
	if lookup == nil {
		t.Fatal("no method lookup in auth.go")
	}
	src := func(n ast.Node) string {
		var b strings.Builder
		_ = printer.Fprint(&b, fset, n)
		return b.String()
	}
	hashes, loops := 0, 0
	ast.Inspect(lookup.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			switch fn := src(n.Fun); fn {
			case "sha256.Sum256":
				hashes++
			case "subtle.ConstantTimeCompare":
			default:
				if strings.Contains(fn, "Equal") || strings.Contains(fn, "Compare") || strings.Contains(fn, "Has") {
					t.Errorf("lookup compares with %s, not crypto/subtle", fn)
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && !strings.Contains(src(n.X), "subtle.ConstantTimeCompare") {
				t.Errorf("lookup compares with %s at %s", n.Op, fset.Position(n.Pos()))
			}
		case *ast.RangeStmt:
			if src(n.X) != "a.creds" {
				return true
			}
			loops++
			compares := 0
			ast.Inspect(n.Body, func(m ast.Node) bool {
				switch m := m.(type) {
				case *ast.BranchStmt, *ast.ReturnStmt:
					t.Errorf("the loop over the credentials can stop early: %s at %s", src(m), fset.Position(m.Pos()))
				case *ast.CallExpr:
					if src(m.Fun) == "subtle.ConstantTimeCompare" {
						compares++
						if !strings.HasSuffix(src(m.Args[0]), "[:]") || !strings.HasSuffix(src(m.Args[1]), "digest[:]") {
							t.Errorf("subtle compares %s, not two digests", src(m))
						}
					}
				}
				return true
			})
			// The comparison is the first thing of each iteration, not behind a condition.
			if compares != 1 || len(n.Body.List) == 0 || !strings.Contains(src(n.Body.List[0]), "subtle.ConstantTimeCompare") {
				t.Errorf("each iteration must begin with one subtle.ConstantTimeCompare:\n%s", src(n.Body))
			}
		}
		return true
	})
	if hashes != 1 || loops != 1 {
		t.Fatalf("lookup hashes the token %d times and loops over the credentials %d times; want 1 and 1:\n%s", hashes, loops, src(lookup))
	}
}

// TestTokensAreNeverLogged sends valid, invalid and near-miss tokens in every form, to every route,
// through failures of every kind, with every request logged at debug, and then looks for each token in
// the log, the answers and their headers.
func TestTokensAreNeverLogged(t *testing.T) {
	clk := allocatortest.NewClock() // stands still: the rate limit's buckets do not refill
	s := newTestServer(t, func(c *Config) {
		c.AccessLog, c.now = true, clk.Now
		c.RateLimit, c.RateBurst = 1, 40
		c.AuthFailureBurst = 1000 // every wrong token is answered 401 and logged; none is turned away unread
	})
	wrong := []string{"wrong-token-0123456789", adminTok + "x", ordersTok[:len(ordersTok)-1], strings.ToUpper(linksTok)}
	all := append([]string{adminTok, ordersTok, linksTok}, wrong...)
	var answers strings.Builder
	send := func(r request) {
		w := s.do(t, r)
		fmt.Fprintf(&answers, "%d %v %s\n", w.Code, w.Header(), w.Body.String())
	}
	paths := []struct{ method, path, body string }{
		{"POST", "/v1/namespaces/orders/blocks", `{"size":5}`},
		{"POST", "/v1/namespaces/orders/blocks", `{"size":"five"}`},
		{"GET", "/v1/namespaces/links/ids?count=0", ""},
		{"GET", "/v1/namespaces/nosuch", ""},
		{"PUT", "/v1/namespaces/orders", `{"lease_ttl":"soon"}`},
		{"GET", "/v1/namespaces", ""},
		{"GET", "/", ""},
		{"DELETE", "/v1/namespaces/orders", ""},
	}
	for _, tok := range all {
		for _, form := range []string{"Bearer %s", "bearer %s", "Bearer   %s  ", "Token %s", "%s", "Bearer %s, Bearer x"} {
			for _, p := range paths {
				send(request{method: p.method, path: p.path, body: p.body, header: map[string]string{"Authorization": fmt.Sprintf(form, tok)}})
			}
		}
	}
	// Server-side failures log their detail at Error.
	s.fake.SetLeaseErr(fmt.Errorf("a: %w: offsets overlap", allocator.ErrMisconfigured))
	s.cache.forget("orders")
	send(request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok})
	s.fake.SetLeaseErr(fmt.Errorf("%w: both down", allocator.ErrUnavailable))
	send(request{method: "POST", path: "/v1/namespaces/links/blocks", token: linksTok})
	s.fake.SetLeaseErr(nil)
	// The rate limit's answer.
	for i := 0; i < 50; i++ {
		send(request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok})
	}
	// And what net/http itself logs, on a real connection: malformed requests that carry a token.
	addr := listen(t, s.Server)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + adminTok + "\r\nBroken header line\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ordersTok + "\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"GET /?" + linksTok + " HTTP/9.9\r\nAuthorization: Bearer " + linksTok + "\r\n\r\n",
	} {
		answers.WriteString(rawExchange(t, addr, raw))
	}

	logs := s.logs.String()
	if !strings.Contains(logs, `"level":"ERROR"`) || !strings.Contains(logs, `"status":401`) || !strings.Contains(logs, `"status":429`) {
		t.Fatalf("the log lacks the lines this test wants to search:\n%s", logs)
	}
	for _, tok := range all {
		if strings.Contains(logs, tok) {
			t.Errorf("a token is in the log:\n%s", logs)
		}
		if strings.Contains(answers.String(), tok) {
			t.Errorf("a token is in an answer:\n%s", answers.String())
		}
	}
}

// rawExchange writes raw on a new connection and returns what comes back before the server closes
// it or a second passes.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	got, _ := io.ReadAll(c)
	return string(got)
}

// TestSizeLimits: a body over api.MaxBodyBytes is refused with 413 however it is sent, without the
// server reading it all; headers over MaxHeaderBytes are refused by net/http with 431.
func TestSizeLimits(t *testing.T) {
	s := newTestServer(t, nil)
	addr := listen(t, s.Server)
	waitIdle(t, s.Server)
	status := func(raw string) int {
		t.Helper()
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(rawExchange(t, addr, raw))), nil)
		if err != nil {
			t.Fatalf("no HTTP answer: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	post := "POST /v1/namespaces/orders/blocks HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer " + ordersTok + "\r\n"
	padded := func(n int) string { return `{"size":7` + strings.Repeat(" ", n-len(`{"size":7}`)) + `}` }
	leases := s.fake.Leases()
	if got := status(post + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", api.MaxBodyBytes, padded(api.MaxBodyBytes))); got != 200 {
		t.Fatalf("a body of exactly %d bytes: %d", api.MaxBodyBytes, got)
	}
	waitIdle(t, s.Server)
	before, leases := fmt.Sprint(s.fake.Counters()), s.fake.Leases()
	for name, raw := range map[string]string{
		"one byte over": post + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", api.MaxBodyBytes+1, padded(api.MaxBodyBytes+1)),
		"chunked":       post + "Transfer-Encoding: chunked\r\n\r\n" + chunked(padded(3*api.MaxBodyBytes), 1000),
		// Declared, not sent: refused at once rather than after reading a gigabyte.
		"a gigabyte declared": post + "Content-Length: 1073741824\r\n\r\n{",
	} {
		if got := status(raw); got != 413 {
			t.Errorf("%s: %d, want 413", name, got)
		}
	}
	waitIdle(t, s.Server)
	if after := fmt.Sprint(s.fake.Counters()); after != before || s.fake.Leases() != leases {
		t.Fatalf("refused bodies moved the counters: %s → %s", before, after)
	}
	// Headers: the default limit is 16 KiB (net/http allows 4 KiB on top).
	get := "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	if got := status(get + "X-Fill: " + strings.Repeat("a", 8<<10) + "\r\n\r\n"); got != 200 {
		t.Fatalf("8 KiB of headers: %d", got)
	}
	if got := status(get + "X-Fill: " + strings.Repeat("a", 32<<10) + "\r\n\r\n"); got != 431 {
		t.Fatalf("32 KiB of headers: %d, want 431", got)
	}
	if got := status(get + strings.Repeat("X-Many: a\r\n", 3000) + "\r\n"); got != 431 {
		t.Fatalf("3,000 header lines: %d, want 431", got)
	}
	small := newTestServer(t, func(c *Config) { c.MaxHeaderBytes = 1 << 10 })
	smallAddr := listen(t, small.Server)
	resp := rawExchange(t, smallAddr, get+"X-Fill: "+strings.Repeat("a", 8<<10)+"\r\n\r\n")
	if !strings.HasPrefix(resp, "HTTP/1.1 431") {
		t.Fatalf("8 KiB of headers with MaxHeaderBytes 1 KiB: %q", firstLine(resp))
	}
}

func chunked(body string, size int) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// dripFeed writes raw on c one byte per interval until the server closes the connection or everything
// is sent, and returns how many bytes it sent and what the server answered.
func dripFeed(t *testing.T, c net.Conn, raw string, interval time.Duration) (int, string) {
	t.Helper()
	answer := make(chan string, 1)
	go func() {
		got, _ := io.ReadAll(c)
		answer <- string(got)
	}()
	sent := 0
	for ; sent < len(raw); sent++ {
		if _, err := c.Write([]byte{raw[sent]}); err != nil {
			break
		}
		select {
		case got := <-answer:
			return sent + 1, got
		case <-time.After(interval):
		}
	}
	select {
	case got := <-answer:
		return sent, got
	case <-time.After(10 * time.Second):
		t.Fatal("the server kept a drip-fed connection open")
		return 0, ""
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSlowClientsAreCutOff: a client that sends its headers, or its body, a byte at a time more slowly
// than ReadHeaderTimeout (ReadTimeout) allows is disconnected before it finishes, and its request does
// nothing.
func TestSlowClientsAreCutOff(t *testing.T) {
	s := newTestServer(t, func(c *Config) {
		c.ReadHeaderTimeout, c.ReadTimeout = 300*time.Millisecond, 600*time.Millisecond
	})
	addr := listen(t, s.Server)
	waitIdle(t, s.Server)
	before, leases := fmt.Sprint(s.fake.Counters()), s.fake.Leases()

	// Headers: 200 bytes at one per 20 ms would take 4 s.
	headers := "POST /v1/namespaces/orders/blocks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ordersTok +
		"\r\nX-Slow: " + strings.Repeat("s", 100) + "\r\nContent-Length: 10\r\n\r\n{\"size\":5}"
	start := time.Now()
	sent, answer := dripFeed(t, dial(t, addr), headers, 20*time.Millisecond)
	if sent >= len(headers)-10 {
		t.Fatalf("the whole header (%d of %d bytes) went through in %v; answer %q", sent, len(headers), time.Since(start), firstLine(answer))
	}
	if strings.Contains(answer, "200 OK") {
		t.Fatalf("a drip-fed request was served: %q", firstLine(answer))
	}

	// Body: the headers at once, then the body a byte per 100 ms, past the read timeout.
	head := "POST /v1/namespaces/orders/blocks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ordersTok + "\r\nContent-Length: 40\r\n\r\n"
	body := `{"size":5` + strings.Repeat(" ", 30) + `}`
	c := dial(t, addr)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	sent, answer = dripFeed(t, c, body, 100*time.Millisecond)
	if sent >= len(body) || strings.Contains(answer, "200 OK") {
		t.Fatalf("a drip-fed body went through: %d of %d bytes, answer %q", sent, len(body), firstLine(answer))
	}

	waitIdle(t, s.Server)
	if after := fmt.Sprint(s.fake.Counters()); after != before || s.fake.Leases() != leases {
		t.Fatalf("a slow client's request moved the counters: %s → %s", before, after)
	}
	metrics := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
	if regexp.MustCompile(`ticketd_http_requests_total\{[^}]*status="200"\} [1-9]`).MatchString(metrics) {
		t.Fatal("a slow client's request was answered 200")
	}
}

// TestRateLimitRetryAfter: past its burst a token gets 429 with a Retry-After that is long enough, and
// is served again once it has waited that long; refused tokens do not use up a valid token's budget.
func TestRateLimitRetryAfter(t *testing.T) {
	clk := allocatortest.NewClock()
	s := newTestServer(t, func(c *Config) {
		c.now = clk.Now
		c.RateLimit, c.RateBurst = 0.5, 2
		c.Auth.Tokens = append(c.Auth.Tokens, NamespaceToken{Namespace: "orders", Token: rotatedOrdersTok})
	})
	lease := func(tok string) request {
		return request{method: "POST", path: "/v1/namespaces/orders/blocks", token: tok, body: `{"size":1}`}
	}
	// Unknown tokens are refused before the limit: they cannot drain anyone's bucket.
	for i := 0; i < 20; i++ {
		if w := s.do(t, lease("wrong-token-0123456789")); w.Code != 401 {
			t.Fatalf("unknown token: %d", w.Code)
		}
	}
	for i := 0; i < 2; i++ {
		if w := s.do(t, lease(ordersTok)); w.Code != 200 {
			t.Fatalf("request %d within the burst: %d", i, w.Code)
		}
	}
	waitIdle(t, s.Server)
	before := fmt.Sprint(s.fake.Counters())
	w := s.do(t, lease(ordersTok))
	e := decode[api.Error](t, w)
	if w.Code != 429 || e.Error.Code != api.CodeRateLimited || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("past the burst: %d %s, Retry-After %q, want 429 and 2 (one request per 2 s)", w.Code, e.Error.Code, w.Header().Get("Retry-After"))
	}
	waitIdle(t, s.Server)
	if after := fmt.Sprint(s.fake.Counters()); after != before {
		t.Fatalf("a 429 moved the counters: %s → %s", before, after)
	}
	// The namespace's other token, and the admin, have buckets of their own.
	for _, tok := range []string{rotatedOrdersTok, adminTok} {
		if w := s.do(t, lease(tok)); w.Code != 200 {
			t.Fatalf("another token: %d", w.Code)
		}
	}
	clk.Advance(1900 * time.Millisecond)
	if w := s.do(t, lease(ordersTok)); w.Code != 429 {
		t.Fatalf("before Retry-After passed: %d", w.Code)
	}
	clk.Advance(100 * time.Millisecond)
	if w := s.do(t, lease(ordersTok)); w.Code != 200 {
		t.Fatalf("after waiting Retry-After: %d %s", w.Code, w.Body.String())
	}

	// Without authentication the bucket is the client's address (never X-Forwarded-For).
	open := newTestServer(t, func(c *Config) { c.now = clk.Now; c.Auth = Auth{Disabled: true}; c.RateLimit, c.RateBurst = 0.5, 1 })
	from := func(addr, forwarded string) int {
		req := httptest.NewRequest("GET", "/v1/namespaces/orders", nil)
		req.Host = "127.0.0.1:8080"
		req.RemoteAddr = addr
		req.Header.Set("X-Forwarded-For", forwarded)
		w := httptest.NewRecorder()
		open.Handler().ServeHTTP(w, req)
		return w.Code
	}
	if a, b := from("192.0.2.1:1000", "198.51.100.1"), from("192.0.2.1:1001", "198.51.100.2"); a != 200 || b != 429 {
		t.Fatalf("one address, two forwarded-for values: %d %d, want 200 429", a, b)
	}
	if c := from("192.0.2.2:1000", "198.51.100.1"); c != 200 {
		t.Fatalf("another address: %d", c)
	}
}

// sqlishNames look like SQL, or like ways around a path; each must be refused before any backend call.
var sqlishNames = []string{
	"orders'; DROP TABLE tickets; --", `x" OR "1"="1`, "' OR 1=1 --", "orders;", "orders/**/", "a`b", "orders\x00",
	"orders%00", "ORDERS", "ordérs", "..", ".hidden", "-x", "orders\\", "orders\nx", "1 UNION SELECT next FROM t",
	"orders)", "orders,links", strings.Repeat("a", 65),
}

// TestSQLishNamesNeverReachTheBackend: such a name gets 400 invalid_namespace on every route, for the
// admin too and with namespaces created on first lease, and the backend sees no call at all.
func TestSQLishNamesNeverReachTheBackend(t *testing.T) {
	for _, cacheOff := range []bool{false, true} {
		s := newTestServer(t, func(c *Config) { c.CreateOnLease, c.Cache.Disabled = true, cacheOff })
		waitIdle(t, s.Server)
		calls := s.fake.Calls()
		for _, name := range sqlishNames {
			p := "/v1/namespaces/" + url.PathEscape(name)
			for _, r := range []request{
				{method: "POST", path: p + "/blocks", token: adminTok, body: `{"size":5}`},
				{method: "GET", path: p + "/ids?count=2", token: adminTok},
				{method: "GET", path: p, token: adminTok},
				{method: "PUT", path: p, token: adminTok, body: `{"block_size":10}`},
			} {
				w := s.do(t, r)
				if e := decode[api.Error](t, w); w.Code != 400 || e.Error.Code != api.CodeInvalidNamespace {
					t.Errorf("%s %q: %d %s, want 400 invalid_namespace", r.method, name, w.Code, e.Error.Code)
				}
			}
		}
		waitIdle(t, s.Server)
		if got := s.fake.Calls(); got != calls || s.fake.BadNames() != 0 {
			t.Fatalf("cache off %v: the backend saw %d calls (%d with a bad name)", cacheOff, got-calls, s.fake.BadNames())
		}
	}
	// Nor may a token be configured for such a name.
	for _, name := range sqlishNames {
		err := Auth{Tokens: []NamespaceToken{{Namespace: name, Token: ordersTok}}}.Validate()
		if !errors.Is(err, allocator.ErrInvalidNamespace) {
			t.Errorf("a token for %q: %v", name, err)
		}
	}
}
