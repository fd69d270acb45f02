package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/api"
)

// What a caller without the right token, or a web page, can reach: the open development server, the
// answers of /readyz and /metrics, failed logins, the rate limiter's memory, and the headers and TLS
// suites every answer gets.

// unchanged fails the test when the backend was called or a counter moved since before.
func unchanged(t *testing.T, s *testServer, what, before string, calls int64) {
	t.Helper()
	waitIdle(t, s.Server)
	if after := fmt.Sprint(s.fake.Counters()); after != before || s.fake.Calls() != calls {
		t.Errorf("%s was refused but reached the backend (%d calls): %s → %s", what, s.fake.Calls()-calls, before, after)
	}
}

// TestOpenServerRefusesWebPages: without authentication, a web page can neither drive the server
// through the browser (a cross-site text/plain or form POST, a foreign Origin, a cross-site GET of
// IDs) nor reach it under a name of its own (DNS rebinding: a foreign Host). Each refusal reaches no
// handler, so no counter moves and no namespace is created. What a local client sends still works.
func TestOpenServerRefusesWebPages(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.Auth = Auth{Disabled: true}; c.CreateOnLease = true })
	waitIdle(t, s.Server)
	before, calls := fmt.Sprint(s.fake.Counters()), s.fake.Calls()
	for _, c := range []struct {
		name   string
		r      request
		status int
		code   string
	}{
		{"a cross-site text/plain POST", request{method: "POST", path: "/v1/namespaces/evil/blocks", body: `{"size":10}`,
			header: map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}}, 403, api.CodeCrossSite},
		{"a text/plain POST", request{method: "POST", path: "/v1/namespaces/evil/blocks", body: `{"size":10}`,
			header: map[string]string{"Content-Type": "text/plain"}}, 415, api.CodeNotJSON},
		{"a form POST", request{method: "POST", path: "/v1/namespaces/evil/blocks", body: `size=10`,
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 415, api.CodeNotJSON},
		{"a bodiless POST without a type", request{method: "POST", path: "/v1/namespaces/orders/blocks",
			header: map[string]string{"Content-Type": ""}}, 415, api.CodeNotJSON},
		{"a JSON PUT from another origin", request{method: "PUT", path: "/v1/namespaces/evil", body: `{"block_size":10}`,
			header: map[string]string{"Origin": "https://evil.example"}}, 403, api.CodeCrossSite},
		{"a PUT from an opaque origin", request{method: "PUT", path: "/v1/namespaces/evil", body: `{}`,
			header: map[string]string{"Origin": "null"}}, 403, api.CodeCrossSite},
		{"a cross-site GET of IDs", request{method: "GET", path: "/v1/namespaces/orders/ids?count=5",
			header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, api.CodeCrossSite},
		{"a GET of IDs from another origin", request{method: "GET", path: "/v1/namespaces/orders/ids",
			header: map[string]string{"Origin": "http://evil.example"}}, 403, api.CodeCrossSite},
		{"a rebound name moving a counter", request{method: "PUT", path: "/v1/namespaces/orders", body: `{"start":"9000000000000000000"}`,
			header: map[string]string{"Host": "rebind.evil.example:8080"}}, 403, api.CodeForeignHost},
		{"a rebound name leasing", request{method: "POST", path: "/v1/namespaces/orders/blocks",
			header: map[string]string{"Host": "rebind.evil.example"}}, 403, api.CodeForeignHost},
		{"a rebound name reading the status page", request{method: "GET", path: "/",
			header: map[string]string{"Host": "rebind.evil.example"}}, 403, api.CodeForeignHost},
		{"a rebound name reading the metrics", request{method: "GET", path: "/metrics",
			header: map[string]string{"Host": "10.0.0.1:8080"}}, 403, api.CodeForeignHost},
		{"a rebound name reading the namespaces", request{method: "GET", path: "/v1/namespaces",
			header: map[string]string{"Host": "localhost.evil.example"}}, 403, api.CodeForeignHost},
	} {
		w := s.do(t, c.r)
		if e := decode[api.Error](t, w); w.Code != c.status || e.Error.Code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, w.Code, e.Error.Code, c.status, c.code)
		}
		unchanged(t, s, c.name, before, calls)
	}
	if _, err := s.fake.Namespace(t.Context(), "evil"); err == nil {
		t.Fatal("a refused request created namespace evil")
	}

	// What a developer's own tools send.
	for _, c := range []struct {
		name string
		r    request
	}{
		{"the SDK on 127.0.0.1", request{method: "POST", path: "/v1/namespaces/orders/blocks", body: `{"size":5}`}},
		{"JSON with a charset on localhost", request{method: "POST", path: "/v1/namespaces/orders/blocks", body: `{"size":5}`,
			header: map[string]string{"Host": "localhost:8080", "Content-Type": "application/json; charset=utf-8"}}},
		{"IPv6 loopback", request{method: "GET", path: "/v1/namespaces/orders/ids", header: map[string]string{"Host": "[::1]:8080"}}},
		{"a page served from loopback", request{method: "PUT", path: "/v1/namespaces/made", body: `{}`,
			header: map[string]string{"Origin": "http://127.0.0.1:3000", "Sec-Fetch-Site": "same-site"}}},
		{"a browser's own address bar", request{method: "GET", path: "/", header: map[string]string{"Sec-Fetch-Site": "none"}}},
		{"a cross-site page reading the status page (no state changes)", request{method: "GET", path: "/",
			header: map[string]string{"Sec-Fetch-Site": "cross-site"}}},
	} {
		w := s.do(t, c.r)
		if w.Code != 200 && w.Code != 201 {
			t.Errorf("%s: %d %s", c.name, w.Code, w.Body.String())
		}
	}

	// Served on purpose to every address, or with tokens, any Host is answered.
	public := newTestServer(t, func(c *Config) { c.Auth = Auth{Disabled: true, AnyHost: true} })
	if w := public.do(t, request{method: "GET", path: "/v1/namespaces/orders", header: map[string]string{"Host": "ticketd.internal"}}); w.Code != 200 {
		t.Fatalf("AnyHost: %d %s", w.Code, w.Body.String())
	}
	tokens := newTestServer(t, nil)
	if w := tokens.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok, header: map[string]string{"Host": "ticketd.internal"}}); w.Code != 200 {
		t.Fatalf("with tokens: %d %s", w.Code, w.Body.String())
	}
	if err := (Auth{Admin: adminTok, AnyHost: true}).Validate(); err == nil {
		t.Fatal("AnyHost with tokens was accepted")
	}
}

// TestAnonymousCallersLearnNothing: /readyz tells an anonymous caller only whether the server is
// ready, never a ticket server's name or error (a database error names its user and host); the admin
// gets both. /metrics, which names every namespace and ticket server, needs the admin token or the
// metrics token, which is good for nothing else.
func TestAnonymousCallersLearnNothing(t *testing.T) {
	const metricsTok = "metrics-scraper-token-0123456789"
	const dbError = "Error 1045 (28000): Access denied for user 'tkd'@'127.0.0.1' (using password: YES)"
	s := newTestServer(t, func(c *Config) { c.Auth.Metrics = metricsTok })
	s.fake.Fence("a", dbError)
	s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok})

	for _, tok := range []string{"", ordersTok, metricsTok} {
		w := s.do(t, request{method: "GET", path: "/readyz", token: tok})
		body := strings.TrimSpace(w.Body.String())
		if w.Code != 200 || body != `{"ready":true}` {
			t.Errorf("/readyz with token %q: %d %s, want 200 {\"ready\":true}", tok, w.Code, body)
		}
	}
	w := s.do(t, request{method: "GET", path: "/readyz", token: adminTok})
	if r := decode[api.Readiness](t, w); len(r.Servers) != 2 || r.Servers[0].Reason != dbError {
		t.Fatalf("the admin's /readyz lacks the servers and the reason: %s", w.Body.String())
	}
	s.fake.SetDown("b", "")
	w = s.do(t, request{method: "GET", path: "/readyz"})
	if e := decode[api.Readiness](t, w); w.Code != 503 || e.Error == nil || e.Error.Code != api.CodeNotReady ||
		strings.Contains(w.Body.String(), "Access denied") || strings.Contains(w.Body.String(), "servers") {
		t.Fatalf("anonymous /readyz with no server usable: %d %s", w.Code, w.Body.String())
	}
	s.fake.SetUp("b")

	for _, c := range []struct {
		tok  string
		want int
	}{{"", 401}, {ordersTok, 403}, {linksTok, 403}, {metricsTok, 200}, {adminTok, 200}} {
		w := s.do(t, request{method: "GET", path: "/metrics", token: c.tok})
		if w.Code != c.want {
			t.Errorf("/metrics with token %q: %d, want %d", c.tok, w.Code, c.want)
		}
		if c.want == 200 && !strings.Contains(w.Body.String(), `ticketd_ids_issued_total{ticketd_namespace="orders"}`) {
			t.Errorf("/metrics with token %q lacks the namespaces' counters", c.tok)
		}
		if c.want != 200 && strings.Contains(w.Body.String(), "orders") {
			t.Errorf("a refused /metrics names a namespace: %s", w.Body.String())
		}
	}
	for _, r := range []request{
		{method: "GET", path: "/v1/namespaces", token: metricsTok},
		{method: "GET", path: "/v1/namespaces/orders", token: metricsTok},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: metricsTok},
		{method: "GET", path: "/", token: metricsTok},
	} {
		if w := s.do(t, r); w.Code != 403 {
			t.Errorf("the metrics token on %s %s: %d, want 403", r.method, r.path, w.Code)
		}
	}
	// A listener of their own serves the metrics without a token.
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "ticketd_ids_issued_total") {
		t.Fatalf("MetricsHandler: %d", rec.Code)
	}
	if err := (Auth{Admin: adminTok, Metrics: adminTok}).Validate(); err == nil {
		t.Fatal("a metrics token equal to the admin token was accepted")
	}
}

// TestFailedLoginsAreLoggedCountedAndLimited: wrong tokens are answered 401 and logged at Warn with the
// client address (at the 1st, 2nd, 4th, … failure, never the token); past the burst, the address's
// wrong tokens are answered 429 with Retry-After until it has waited, and nothing reaches the backend;
// the right token from the same address is served all along (a guesser behind the same proxy or NAT
// must not lock the real client out), and other addresses are not affected.
func TestFailedLoginsAreLoggedCountedAndLimited(t *testing.T) {
	clk := allocatortest.NewClock()
	s := newTestServer(t, func(c *Config) { c.now = clk.Now; c.AuthFailureBurst, c.AuthFailureRate = 5, 0.1 })
	from := func(addr, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/v1/namespaces/orders", nil)
		req.Host, req.RemoteAddr = "127.0.0.1:8080", addr+":40000"
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w
	}
	waitIdle(t, s.Server)
	before, calls := fmt.Sprint(s.fake.Counters()), s.fake.Calls()
	var wrong []string
	for i := range 5 {
		tok := fmt.Sprintf("guess-%02d-abcdefghijklmnop", i)
		wrong = append(wrong, tok)
		if w := from("192.0.2.7", tok); w.Code != 401 {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	w := from("192.0.2.7", "guess-99-abcdefghijklmnop")
	if e := decode[api.Error](t, w); w.Code != 429 || e.Error.Code != api.CodeRateLimited || w.Header().Get("Retry-After") != "10" {
		t.Fatalf("a wrong token past 5 failures: %d %s, Retry-After %q; want 429 and 10", w.Code, e.Error.Code, w.Header().Get("Retry-After"))
	}
	unchanged(t, s, "a guesser", before, calls)
	if w := from("192.0.2.7", ordersTok); w.Code != 200 {
		t.Fatalf("the right token from the guesser's address: %d, want 200", w.Code)
	}
	if w := from("192.0.2.8", ordersTok); w.Code != 200 {
		t.Fatalf("another address with the right token: %d", w.Code)
	}
	clk.Advance(10 * time.Second)
	if w := from("192.0.2.7", ordersTok); w.Code != 200 {
		t.Fatalf("after waiting Retry-After: %d", w.Code)
	}

	logs := s.logs.String()
	lines := regexp.MustCompile(`"msg":"failed login: unknown token","remote":"192.0.2.7","failures":(\d+)`).FindAllStringSubmatch(logs, -1)
	var counts []string
	for _, l := range lines {
		counts = append(counts, l[1])
	}
	if strings.Join(counts, ",") != "1,2,4" || !strings.Contains(logs, `"level":"WARN","msg":"failed login`) {
		t.Fatalf("failed logins logged at counts %v, want 1,2,4 at WARN:\n%s", counts, logs)
	}
	for _, tok := range wrong {
		if strings.Contains(logs, tok) {
			t.Fatalf("a guessed token is in the log")
		}
	}
	m := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
	if !strings.Contains(m, "ticketd_auth_failures_total 5") || !strings.Contains(m, "ticketd_auth_refused_total 1") {
		t.Fatalf("metrics lack 5 failures and 1 refusal:\n%s", grepLines(m, "ticketd_auth"))
	}
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRateLimitKeysAreBounded: without authentication the rate limit keeps a bucket per client
// address; a flood of addresses (in one instant, so none is idle) leaves at most the limiter's size of
// them in memory. (That a new address forgets only the least recently used one, and no request sweeps
// the rest, is internal/ratelimit's TestNewKeyForgetsOnlyTheLeastRecentlyUsed.)
func TestRateLimitKeysAreBounded(t *testing.T) {
	const keys = 100
	clk := allocatortest.NewClock()
	s := newTestServer(t, func(c *Config) {
		c.now, c.rateKeys = clk.Now, keys
		c.Auth = Auth{Disabled: true}
		c.RateLimit, c.RateBurst = 1, 1
	})
	for i := range 3 * keys {
		req := httptest.NewRequest("GET", "/v1/namespaces/orders", nil)
		req.Host, req.RemoteAddr = "127.0.0.1:8080", fmt.Sprintf("198.51.100.%d:%d", i%250, 1000+i/250)
		if i >= 250 {
			req.RemoteAddr = fmt.Sprintf("203.0.113.%d:1000", i-250)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != 200 {
			t.Fatalf("address %d, first request: %d", i, w.Code)
		}
		if n := s.limiter.Len(); n > keys {
			t.Fatalf("%d addresses tracked after %d; the limit is %d", n, i+1, keys)
		}
	}
	if n := s.limiter.Len(); n != keys {
		t.Fatalf("%d addresses tracked, want %d", n, keys)
	}
}

// TestAnswersAreNeitherCachedNorSniffed: every answer, errors included, carries Cache-Control: no-store
// (GET /ids hands out new IDs each time) and X-Content-Type-Options: nosniff.
func TestAnswersAreNeitherCachedNorSniffed(t *testing.T) {
	s := newTestServer(t, nil)
	for _, r := range []request{
		{method: "GET", path: "/v1/namespaces/orders/ids?count=2", token: ordersTok},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok},
		{method: "GET", path: "/v1/namespaces/orders", token: ordersTok},
		{method: "GET", path: "/v1/namespaces", token: adminTok},
		{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: `{}`},
		{method: "GET", path: "/v1/namespaces", token: ordersTok},
		{method: "GET", path: "/v1/namespaces"},
		{method: "GET", path: "/nosuch"},
		{method: "GET", path: "/healthz"},
		{method: "GET", path: "/readyz"},
		{method: "GET", path: "/openapi.json"},
		{method: "GET", path: "/metrics", token: adminTok},
		{method: "GET", path: "/", token: adminTok},
	} {
		w := s.do(t, r)
		if cc, ns := w.Header().Get("Cache-Control"), w.Header().Get("X-Content-Type-Options"); cc != "no-store" || ns != "nosniff" {
			t.Errorf("%s %s (%d): Cache-Control %q, X-Content-Type-Options %q", r.method, r.path, w.Code, cc, ns)
		}
	}
}

// TestTLS12OffersOnlyAEAD: a TLS 1.2 client that offers only CBC suites (such as
// ECDHE-ECDSA-AES128-SHA) or RSA key exchange is refused; one that offers AES-GCM or ChaCha20-Poly1305
// is served.
func TestTLS12OffersOnlyAEAD(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	s := newTestServer(t, func(c *Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	addr := listen(t, s.Server)
	get := func(suites ...uint16) error {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS12, CipherSuites: suites}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, tls.TLS_RSA_WITH_AES_128_GCM_SHA256} {
		if err := get(suite); err == nil {
			t.Errorf("TLS 1.2 with %s only was served", tls.CipherSuiteName(suite))
		}
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		if err := get(suite); err != nil {
			t.Errorf("TLS 1.2 with %s: %v", tls.CipherSuiteName(suite), err)
		}
	}
}

// TestOpenConnectionsAreCapped: past MaxConns, a new connection is not served until one closes, as
// long as none of those open is idle (here each is still sending its request's headers).
func TestOpenConnectionsAreCapped(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.MaxConns = 2 })
	addr := listen(t, s.Server)
	const get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	held := []any{}
	for range 2 {
		c := dial(t, addr)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	third := dial(t, addr)
	if _, err := io.WriteString(third, get); err != nil {
		t.Fatal(err)
	}
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, _ := third.Read(make([]byte, 1)); n > 0 {
		t.Fatal("a third connection was served while two were open and the cap is 2")
	}
	held[0].(io.Closer).Close()
	_ = third.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(third, buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("the third connection once one closed: %q %v", buf, err)
	}
}

// TestTokensNeedDistinctCharacters: a long token of few distinct characters, or a shorter string
// repeated, is refused, and the message does not quote it.
func TestTokensNeedDistinctCharacters(t *testing.T) {
	for _, tok := range []string{strings.Repeat("a", 40), strings.Repeat("ab", 20), strings.Repeat("1234", 8), strings.Repeat("SECRET", 4), "password-password-pass"} {
		for name, a := range map[string]Auth{
			"admin":     {Admin: tok},
			"namespace": {Tokens: []NamespaceToken{{Namespace: "orders", Token: tok}}},
			"metrics":   {Admin: adminTok, Metrics: tok},
		} {
			err := a.Validate()
			if err == nil || !(strings.Contains(err.Error(), "distinct characters") || strings.Contains(err.Error(), "repeated")) || strings.Contains(err.Error(), tok) {
				t.Errorf("%s token %q: %v", name, tok, err)
			}
		}
	}
	if err := (Auth{Admin: "3f9a1c7e5b2d8064"}).Validate(); err != nil {
		t.Fatalf("16 random hex digits: %v", err)
	}
}

// TestTokenListNeverQuotesAToken: a token given without its "NS=" (one with an '=' of its own, as
// base64 has) is refused without being quoted as a namespace name.
func TestTokenListNeverQuotesAToken(t *testing.T) {
	const tok = "c2VjcmV0LXRva2VuLXZhbHVl=="
	for name, parse := range map[string]func() error{
		"list": func() error { _, err := ParseTokens("orders=" + ordersTok + "," + tok); return err },
		"file": func() error { _, err := ParseTokenFile(strings.NewReader("# tokens\n" + tok + "\n")); return err },
	} {
		err := parse()
		if err == nil || strings.Contains(err.Error(), "c2VjcmV0") || !strings.Contains(err.Error(), "NAMESPACE=TOKEN") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// getOn sends GET /healthz on c and reads the status line of the answer.
func getOn(t *testing.T, c net.Conn) string {
	t.Helper()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err.Error()
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err.Error()
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Status
}

// TestIdleConnectionsMakeRoom: idle keep-alive connections holding every slot do not keep a new client
// out: the one idle the longest is closed for it.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.MaxConns = 4; c.IdleTimeout = time.Hour })
	addr := listen(t, s.Server)
	var idle []net.Conn
	for range 4 {
		c := dial(t, addr)
		if st := getOn(t, c); st != "200 OK" {
			t.Fatalf("a connection within the cap: %s", st)
		}
		idle = append(idle, c)
	}
	if st := getOn(t, dial(t, addr)); st != "200 OK" {
		t.Fatalf("a new connection while 4 idle ones held the cap of 4: %s", st)
	}
	_ = idle[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := idle[0].Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the connection idle the longest is still open: %d %v", n, err)
	}
}

// TestConnectionsPerClientAreCapped: one client address holding its bound of busy connections gets
// its next one closed at once; another address is served.
func TestConnectionsPerClientAreCapped(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.MaxConns = 10; c.MaxConnsPerClient = 2 })
	addr := listen(t, s.Server)
	for range 2 { // busy: still sending the request's headers
		c := dial(t, addr)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	third := dial(t, addr)
	_ = third.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := third.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a third connection from one address with a bound of 2 was kept: %d %v", n, err)
	}
	_, port, _ := net.SplitHostPort(addr)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	other, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if st := getOn(t, other); st != "200 OK" {
		t.Fatalf("another client address: %s", st)
	}
	if !strings.Contains(s.logs.String(), "holds its limit of busy connections") {
		t.Fatalf("the refusal is not logged:\n%s", s.logs.String())
	}
}
