package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	adminTok  = "admin-token-0123456789"
	ordersTok = "orders-token-0123456789"
	linksTok  = "links-token-0123456789"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer = allocatortest.LogBuffer

type testServer struct {
	*Server
	fake *allocatortest.Fake
	logs *syncBuffer
}

// newTestServer builds a Server on a fake pair with namespaces "orders" (max 1,000) and "links", and
// the admin, orders and links tokens.
func newTestServer(t *testing.T, tweak func(*Config)) *testServer {
	t.Helper()
	f := allocatortest.NewFake(allocatortest.Config{})
	ctx := context.Background()
	if _, err := f.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxBlockSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.CreateNamespace(ctx, allocator.Namespace{Name: "links"}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg := Config{
		Backend: f,
		Auth:    Auth{Admin: adminTok, Tokens: []NamespaceToken{{Namespace: "orders", Token: ordersTok}, {Namespace: "links", Token: linksTok}}},
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &testServer{Server: s, fake: f, logs: logs}
}

// serving is a Server answering on a loopback port.
type serving struct {
	addr   string
	cancel context.CancelFunc // begins the graceful shutdown
	done   chan struct{}      // closed when Serve has returned, with err
	err    error
}

// serve starts s on a loopback port; at the test's end it is stopped, and must stop cleanly.
func serve(t *testing.T, s *Server) *serving {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sv := &serving{addr: ln.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go func() {
		sv.err = s.Serve(ctx, ln)
		close(sv.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-sv.done
		if sv.err != nil {
			t.Errorf("Serve: %v", sv.err)
		}
	})
	return sv
}

// listen serves s on a loopback port until the test ends, and returns its address.
func listen(t *testing.T, s *Server) string { return serve(t, s).addr }

type request struct {
	method, path, token, body string
	header                    map[string]string
}

func (s *testServer) do(t *testing.T, r request) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
	// As the SDK and a local curl send them: a loopback Host, and JSON on the methods with a body.
	req.Host = "127.0.0.1:8080"
	if r.method != "GET" && r.method != "HEAD" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("answer %d %q: %v", w.Code, w.Body.String(), err)
	}
	return v
}

func TestLeaseBlock(t *testing.T) {
	s := newTestServer(t, nil)
	w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":10}`})
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	b := decode[api.Block](t, w)
	blk, err := b.ToBlock()
	if err != nil || b.Namespace != "orders" || b.Size != 10 || b.Step != 2 || b.ExpiresAt != nil {
		t.Fatalf("block %+v: %v", b, err)
	}
	if (b.Server == "a") != (blk.Start%2 == 1) {
		t.Fatalf("block %+v: server a issues odd IDs, b even ones", b)
	}
	// No body: the namespace's block size.
	b = decode[api.Block](t, s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: adminTok}))
	if b.Size != 100 {
		t.Fatalf("default size %d, want the namespace's 100", b.Size)
	}
	// The IDs route, with the admin token.
	ids := decode[api.IDs](t, s.do(t, request{method: "GET", path: "/v1/namespaces/links/ids?count=5", token: adminTok}))
	if len(ids.IDs) != 5 || ids.Namespace != "links" {
		t.Fatalf("ids %+v", ids)
	}
	ids = decode[api.IDs](t, s.do(t, request{method: "GET", path: "/v1/namespaces/links/ids", token: linksTok}))
	if len(ids.IDs) != 1 {
		t.Fatalf("default count: %+v", ids)
	}
}

// TestErrorRows sends one request per error answer of the API and checks status, code and headers.
func TestErrorRows(t *testing.T) {
	big := `{"size":1` + strings.Repeat(" ", api.MaxBodyBytes) + `}`
	tests := []struct {
		name   string
		tweak  func(*Config)
		setup  func(*testing.T, *testServer)
		req    request
		status int
		code   string
	}{
		{"bad name", nil, nil, request{method: "POST", path: "/v1/namespaces/Orders!/blocks", token: adminTok}, 400, api.CodeInvalidNamespace},
		{"name too long", nil, nil, request{method: "GET", path: "/v1/namespaces/" + strings.Repeat("a", 65), token: adminTok}, 400, api.CodeInvalidNamespace},
		{"size zero", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":0}`}, 400, api.CodeInvalidSize},
		{"size negative", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":-5}`}, 400, api.CodeInvalidSize},
		{"size above the namespace max", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":1001}`}, 400, api.CodeInvalidSize},
		{"size above the max, cache off", func(c *Config) { c.Cache.Disabled = true }, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":1001}`}, 400, api.CodeInvalidSize},
		{"size above any limit", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":99999999999999}`}, 400, api.CodeInvalidSize},
		{"size a string", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":"10"}`}, 400, api.CodeInvalidJSON},
		{"size a fraction", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":1.5}`}, 400, api.CodeInvalidJSON},
		{"bad JSON", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":`}, 400, api.CodeInvalidJSON},
		{"JSON array", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `[10]`}, 400, api.CodeInvalidJSON},
		{"two objects", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":1}{"size":2}`}, 400, api.CodeInvalidJSON},
		{"unknown field", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"sise":10}`}, 400, api.CodeUnknownField},
		{"count zero", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids?count=0", token: ordersTok}, 400, api.CodeInvalidCount},
		{"count too big", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids?count=10001", token: ordersTok}, 400, api.CodeInvalidCount},
		{"count not a number", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids?count=ten", token: ordersTok}, 400, api.CodeInvalidCount},
		{"count twice", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids?count=1&count=2", token: ordersTok}, 400, api.CodeInvalidCount},
		{"count above the namespace max", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids?count=1001", token: ordersTok}, 400, api.CodeInvalidSize},
		{"unknown parameter", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids?cnt=1", token: ordersTok}, 400, api.CodeUnknownParameter},
		{"prefer a wait that is no number", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, header: map[string]string{"Prefer": "wait=soon"}}, 400, api.CodeInvalidPrefer},
		{"prefer a negative wait", nil, nil, request{method: "GET", path: "/v1/namespaces/orders/ids", token: ordersTok, header: map[string]string{"Prefer": "wait=-1"}}, 400, api.CodeInvalidPrefer},
		{"bad lease_ttl", nil, nil, request{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: `{"lease_ttl":"soon"}`}, 400, api.CodeInvalidSettings},
		{"bad start", nil, nil, request{method: "PUT", path: "/v1/namespaces/new", token: adminTok, body: `{"start":"-1"}`}, 400, api.CodeInvalidSettings},
		{"block size above max", nil, nil, request{method: "PUT", path: "/v1/namespaces/new", token: adminTok, body: `{"block_size":10,"max_block_size":5}`}, 400, api.CodeInvalidSettings},
		{"no token", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks"}, 401, api.CodeMissingToken},
		{"not a bearer token", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", header: map[string]string{"Authorization": "Basic b3JkZXJzOng="}}, 401, api.CodeMissingToken},
		{"unknown token", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: "not-a-token-of-ours-at-all"}, 401, api.CodeInvalidToken},
		{"another namespace's token", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: linksTok}, 403, api.CodeForbidden},
		{"namespace token reads another", nil, nil, request{method: "GET", path: "/v1/namespaces/orders", token: linksTok}, 403, api.CodeForbidden},
		{"namespace token on an admin route", nil, nil, request{method: "GET", path: "/v1/namespaces", token: ordersTok}, 403, api.CodeForbidden},
		{"namespace token writes settings", nil, nil, request{method: "PUT", path: "/v1/namespaces/orders", token: ordersTok, body: `{}`}, 403, api.CodeForbidden},
		{"namespace missing", nil, nil, request{method: "POST", path: "/v1/namespaces/nosuch/blocks", token: adminTok}, 404, api.CodeNotFound},
		{"namespace missing, cache off", func(c *Config) { c.Cache.Disabled = true }, nil, request{method: "GET", path: "/v1/namespaces/nosuch/ids", token: adminTok}, 404, api.CodeNotFound},
		{"namespace missing on read", nil, nil, request{method: "GET", path: "/v1/namespaces/nosuch", token: adminTok}, 404, api.CodeNotFound},
		{"no such route", nil, nil, request{method: "GET", path: "/v2/anything", token: adminTok}, 404, api.CodeRouteNotFound},
		{"wrong method", nil, nil, request{method: "DELETE", path: "/v1/namespaces/orders", token: adminTok}, 405, api.CodeMethodNotAllowed},
		{"exhausted", nil, func(t *testing.T, s *testServer) { s.fake.SetLeaseErr(fmt.Errorf("fake: %w", allocator.ErrExhausted)) },
			request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}, 409, api.CodeExhausted},
		{"body too large", nil, nil, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: big}, 413, api.CodeBodyTooLarge},
		{"settings body too large", nil, nil, request{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: big}, 413, api.CodeBodyTooLarge},
		{"rate limited", func(c *Config) { c.RateLimit, c.RateBurst = 0.001, 1 },
			func(t *testing.T, s *testServer) {
				s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok})
			},
			request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok}, 429, api.CodeRateLimited},
		{"unavailable", nil, func(t *testing.T, s *testServer) { s.fake.SetDown("a", ""); s.fake.SetDown("b", "") },
			request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}, 503, api.CodeUnavailable},
		{"unavailable though one server is exhausted", nil, func(t *testing.T, s *testServer) {
			s.fake.SetLeaseErr(fmt.Errorf("%w: %w", allocator.ErrUnavailable, errors.Join(
				fmt.Errorf("a: %w", allocator.ErrExhausted), errors.New("b: connection refused"))))
		}, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}, 503, api.CodeUnavailable},
		{"misconfigured", nil, func(t *testing.T, s *testServer) {
			s.fake.SetLeaseErr(fmt.Errorf("a: %w: offset", allocator.ErrMisconfigured))
		}, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}, 500, api.CodeMisconfigured},
		{"closed", nil, func(t *testing.T, s *testServer) { s.fake.SetLeaseErr(allocator.ErrClosed) },
			request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}, 503, api.CodeShuttingDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, tt.tweak)
			if tt.setup != nil {
				tt.setup(t, s)
			}
			w := s.do(t, tt.req)
			e := decode[api.Error](t, w)
			if w.Code != tt.status || e.Error.Code != tt.code || e.Error.Message == "" {
				t.Fatalf("%d %s, want %d %s (body %s)", w.Code, e.Error.Code, tt.status, tt.code, w.Body.String())
			}
			if retry := w.Header().Get("Retry-After"); (tt.status == 429 || tt.status == 503) != (retry != "") {
				t.Fatalf("Retry-After %q with status %d", retry, w.Code)
			}
			if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
			if w.Header().Get("X-Request-Id") == "" {
				t.Fatal("no X-Request-Id")
			}
			for _, tok := range []string{adminTok, ordersTok, linksTok} {
				if strings.Contains(w.Body.String(), tok) || strings.Contains(s.logs.String(), tok) {
					t.Fatal("a token appears in an answer or the log")
				}
			}
		})
	}
}

func TestErrorTable(t *testing.T) {
	for _, row := range errorTable {
		a := classify(fmt.Errorf("context: %w", row.err))
		if a.status != row.status || a.code != row.code {
			t.Errorf("%v: %d %s, want %d %s", row.err, a.status, a.code, row.status, row.code)
		}
	}
	// errors.Is sees through errors.Join: which row wins is decided by the table's order.
	joined := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"unavailable wrapping exhausted", fmt.Errorf("%w: %w", allocator.ErrUnavailable, errors.Join(allocator.ErrExhausted, errors.New("down"))), 503, api.CodeUnavailable},
		{"exhausted wrapping exhausted", fmt.Errorf("%w: %w", allocator.ErrExhausted, errors.Join(allocator.ErrExhausted, allocator.ErrExhausted)), 409, api.CodeExhausted},
		{"unavailable wrapping misconfigured", fmt.Errorf("%w: %w", allocator.ErrUnavailable, allocator.ErrMisconfigured), 503, api.CodeUnavailable},
		{"unknown", errors.New("boom"), 500, api.CodeInternal},
		{"cancelled", fmt.Errorf("lease: %w", context.Canceled), 503, api.CodeUnavailable},
		{"timed out", context.DeadlineExceeded, 503, api.CodeUnavailable},
	}
	for _, tt := range joined {
		if a := classify(tt.err); a.status != tt.status || a.code != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, a.status, a.code, tt.status, tt.code)
		}
	}
	// 5xx answers do not carry the internal detail.
	a := classify(fmt.Errorf("%w: db-a.internal:3306: connection refused", allocator.ErrUnavailable))
	if strings.Contains(a.message, "db-a.internal") || !a.internal {
		t.Fatalf("503 message %q leaks the detail", a.message)
	}
}

// TestBadRequestsChangeNoCounter sends a burst of refused requests and checks that no counter moved
// and no lease, create or update reached the backend.
func TestBadRequestsChangeNoCounter(t *testing.T) {
	s := newTestServer(t, nil)
	// Warm the cache with one good lease so that the settings are known.
	if w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":1}`}); w.Code != 200 {
		t.Fatal(w.Body.String())
	}
	// Let any prefetch finish, then take the counters.
	waitIdle(t, s.Server)
	before, leases, writes := s.fake.Counters(), s.fake.Leases(), s.fake.Writes()
	bad := badRequests()
	for i := 0; i < 20; i++ {
		for _, r := range bad {
			if w := s.do(t, r); w.Code < 400 {
				t.Fatalf("%+v was accepted: %d", r, w.Code)
			}
		}
	}
	waitIdle(t, s.Server)
	if after := s.fake.Counters(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("counters moved: %v → %v", before, after)
	}
	if s.fake.Leases() != leases || s.fake.Writes() != writes {
		t.Fatalf("bad requests reached the backend: leases %d→%d, writes %d→%d", leases, s.fake.Leases(), writes, s.fake.Writes())
	}
}

// badRequests are refused requests of every kind, with the orders token and the admin token.
func badRequests() []request {
	return []request{
		{method: "POST", path: "/v1/namespaces/orders/blocks", body: `{"size":10}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: "wrong-token-0123456789", body: `{"size":10}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: linksTok, body: `{"size":10}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":1001}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":0}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":-1}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":5000000000}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":"5"}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":5,"x":1}`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":5`},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: strings.Repeat("x", api.MaxBodyBytes+1)},
		{method: "POST", path: "/v1/namespaces/ORDERS/blocks", token: adminTok, body: `{"size":5}`},
		{method: "POST", path: "/v1/namespaces/orders%27%3B%20DROP%20TABLE%20x/blocks", token: adminTok, body: `{"size":5}`},
		{method: "POST", path: "/v1/namespaces/nosuch/blocks", token: ordersTok},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=0", token: ordersTok},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=10001", token: ordersTok},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=1001", token: ordersTok},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=1&evil=1", token: ordersTok},
		{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":5}`, header: map[string]string{"Prefer": "wait=1.5"}},
		{method: "GET", path: "/v1/namespaces/orders/ids?count=2", token: ordersTok, header: map[string]string{"Prefer": "respond-async, wait=x"}},
		{method: "PUT", path: "/v1/namespaces/orders", token: ordersTok, body: `{"start":"999999"}`},
		{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: `{"start":"-1"}`},
		{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: `{"block_size":2000}`},
		{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: `{"lease_ttl":"1ms"}`},
		{method: "PUT", path: "/v1/namespaces/orders", token: adminTok, body: `{"start":"1","bogus":true}`},
		{method: "PUT", path: "/v1/namespaces/Bad", token: adminTok, body: `{}`},
		{method: "DELETE", path: "/v1/namespaces/orders", token: adminTok},
	}
}

// waitIdle waits until no cache call is in flight.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	if s.cache == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		s.cache.mu.RLock()
		for _, sp := range s.cache.spaces {
			busy = busy || sp.busy.Load()
		}
		s.cache.mu.RUnlock()
		if !busy {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("cache still busy after 5s")
}

// TestBadRequestsChangeNoStoredCounter runs the same burst against the real embedded store, with and
// without the cache, and compares the stored counters and namespaces.
func TestBadRequestsChangeNoStoredCounter(t *testing.T) {
	for _, cacheOff := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache-off=%v", cacheOff), func(t *testing.T) {
			store := testenv.Embedded(t, allocator.Namespace{Name: "orders", BlockSize: 100, MaxBlockSize: 1000}, allocator.Namespace{Name: "links"})
			ctx := context.Background()
			s := newTestServer(t, func(c *Config) { c.Backend, c.Cache.Disabled, c.CreateOnLease = store, cacheOff, true })
			snapshot := func() string {
				list, err := store.Namespaces(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return fmt.Sprint(list)
			}
			before := snapshot()
			for i := 0; i < 10; i++ {
				for _, r := range badRequests() {
					if w := s.do(t, r); w.Code < 400 {
						t.Fatalf("%+v was accepted: %d", r, w.Code)
					}
				}
			}
			waitIdle(t, s.Server)
			if after := snapshot(); after != before {
				t.Fatalf("stored state changed:\n%s\n%s", before, after)
			}
		})
	}
}

func TestNamespaceRoutes(t *testing.T) {
	s := newTestServer(t, nil)
	w := s.do(t, request{method: "PUT", path: "/v1/namespaces/payments", token: adminTok, body: `{"block_size":50,"lease_ttl":"10m","start":"5000"}`})
	if w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	ns := decode[api.Namespace](t, w)
	if ns.BlockSize != 50 || ns.MaxBlockSize != allocator.DefaultMaxBlockSize || ns.LeaseTTL != "10m0s" || ns.Start != "5000" || len(ns.Servers) != 2 {
		t.Fatalf("created %+v", ns)
	}
	// An update keeps what it does not name, and advances the counters to start.
	w = s.do(t, request{method: "PUT", path: "/v1/namespaces/payments", token: adminTok, body: `{"max_block_size":500,"start":"90000"}`})
	if w.Code != 200 {
		t.Fatalf("update: %d %s", w.Code, w.Body.String())
	}
	ns = decode[api.Namespace](t, w)
	if ns.BlockSize != 50 || ns.MaxBlockSize != 500 || ns.LeaseTTL != "10m0s" {
		t.Fatalf("updated %+v", ns)
	}
	for _, st := range ns.Servers {
		if st.Next < 90000 {
			t.Fatalf("counter of %s at %d, want ≥ 90000", st.Server, st.Next)
		}
	}
	b := decode[api.Block](t, s.do(t, request{method: "POST", path: "/v1/namespaces/payments/blocks", token: adminTok}))
	blk, _ := b.ToBlock()
	if blk.Start < 90000 || b.Size != 50 || b.ExpiresAt == nil {
		t.Fatalf("block after the update %+v", b)
	}
	list := decode[api.Namespaces](t, s.do(t, request{method: "GET", path: "/v1/namespaces", token: adminTok}))
	if len(list.Namespaces) != 3 || list.Namespaces[0].Name != "links" || list.Namespaces[2].Name != "payments" {
		t.Fatalf("list %+v", list)
	}
	got := decode[api.Namespace](t, s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok}))
	if got.Name != "orders" || got.MaxBlockSize != 1000 {
		t.Fatalf("get %+v", got)
	}
}

func TestCreateOnLease(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.CreateOnLease = true })
	// A namespace token may not create: it is for one namespace, which the operator made.
	if w := s.do(t, request{method: "POST", path: "/v1/namespaces/fresh/blocks", token: ordersTok}); w.Code != 403 {
		t.Fatalf("namespace token on another namespace: %d", w.Code)
	}
	w := s.do(t, request{method: "POST", path: "/v1/namespaces/fresh/blocks", token: adminTok, body: `{"size":10}`})
	if w.Code != 200 {
		t.Fatalf("admin lease on a missing namespace: %d %s", w.Code, w.Body.String())
	}
	if _, err := s.fake.Namespace(context.Background(), "fresh"); err != nil {
		t.Fatalf("not created: %v", err)
	}
	// Without CreateOnLease even the admin gets 404.
	s2 := newTestServer(t, nil)
	if w := s2.do(t, request{method: "POST", path: "/v1/namespaces/fresh/blocks", token: adminTok}); w.Code != 404 {
		t.Fatalf("%d", w.Code)
	}
}

func TestNoAuth(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.Auth = Auth{Disabled: true}; c.CreateOnLease = true })
	if w := s.do(t, request{method: "POST", path: "/v1/namespaces/demo/blocks", body: `{"size":10}`}); w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body.String())
	}
	if w := s.do(t, request{method: "GET", path: "/v1/namespaces"}); w.Code != 200 {
		t.Fatalf("%d", w.Code)
	}
}

func TestAuthConfig(t *testing.T) {
	tests := []struct {
		name string
		auth Auth
		want string
	}{
		{"nothing", Auth{}, "no token configured"},
		{"short admin", Auth{Admin: "short"}, "at least 16"},
		{"space in token", Auth{Tokens: []NamespaceToken{{"orders", "has a space in it!!"}}}, "printable ASCII"},
		{"bad namespace", Auth{Tokens: []NamespaceToken{{"Orders", ordersTok}}}, "invalid namespace"},
		{"shared token", Auth{Admin: ordersTok, Tokens: []NamespaceToken{{"orders", ordersTok}}}, "also the admin's token"},
		{"tokens and disabled", Auth{Disabled: true, Admin: adminTok}, "disabled but tokens"},
	}
	for _, tt := range tests {
		err := tt.auth.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), ordersTok) || strings.Contains(err.Error(), adminTok)) {
			t.Errorf("%s: the error shows the token", tt.name)
		}
	}
	ok := Auth{Admin: adminTok, Tokens: []NamespaceToken{{"orders", ordersTok}, {"orders", linksTok}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("two tokens for one namespace (rotation): %v", err)
	}
}

func TestParseTokens(t *testing.T) {
	got, err := ParseTokens(" orders=" + ordersTok + ", links=" + linksTok + ",")
	if err != nil || len(got) != 2 || got[0] != (NamespaceToken{"orders", ordersTok}) || got[1].Namespace != "links" {
		t.Fatalf("%+v %v", got, err)
	}
	file := "# tokens\n\norders=" + ordersTok + "\n  links = " + linksTok + "  \n"
	got, err = ParseTokenFile(strings.NewReader(file))
	if err != nil || len(got) != 2 || got[1] != (NamespaceToken{"links", linksTok}) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"orders", "orders=short", "Bad=" + ordersTok, "=" + ordersTok} {
		_, err := ParseTokens(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), ordersTok) || strings.Contains(err.Error(), "short") {
			t.Errorf("%q: the error shows the token: %v", bad, err)
		}
	}
	if _, err := ParseTokenFile(strings.NewReader("orders=" + ordersTok + "\nnonsense\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad file: %v", err)
	}
}

// TestTokenLookupChecksEveryCredential: the comparison does not stop at the first match or mismatch,
// so its time does not depend on which token (if any) matches.
func TestTokenLookupChecksEveryCredential(t *testing.T) {
	a := newAuthenticator(Auth{Admin: adminTok, Tokens: []NamespaceToken{{"orders", ordersTok}, {"links", linksTok}}})
	for tok, want := range map[string]identity{adminTok: {admin: true, key: "admin"}, ordersTok: {namespace: "orders", key: "ns:orders#0"}, linksTok: {namespace: "links", key: "ns:links#1"}} {
		got, ok := a.lookup(tok)
		if !ok || got != want {
			t.Errorf("lookup: %+v %v, want %+v", got, ok, want)
		}
	}
	for _, tok := range []string{"", adminTok + "x", adminTok[:len(adminTok)-1], strings.ToUpper(ordersTok)} {
		if _, ok := a.lookup(tok); ok {
			t.Errorf("a near miss was accepted")
		}
	}
	allocs := testing.AllocsPerRun(100, func() { a.lookup(ordersTok) })
	if allocs > 1 {
		t.Errorf("lookup allocates %.0f times", allocs)
	}
}

func TestRateLimitPerToken(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.RateLimit, c.RateBurst = 0.01, 3 })
	for i := 0; i < 3; i++ {
		if w := s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok}); w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	w := s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok})
	if w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("fourth request: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	// Another token has its own bucket; health checks are never limited.
	if w := s.do(t, request{method: "GET", path: "/v1/namespaces/links", token: linksTok}); w.Code != 200 {
		t.Fatalf("other token: %d", w.Code)
	}
	if w := s.do(t, request{method: "GET", path: "/healthz"}); w.Code != 200 {
		t.Fatalf("healthz: %d", w.Code)
	}
}

// TestRateLimitCoversTheTokenRoutes: the limit applies to every route that takes a token, the status
// page included, and to none of the others; its message names what the bucket belongs to.
func TestRateLimitCoversTheTokenRoutes(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.RateLimit, c.RateBurst = 0.01, 1 })
	if w := s.do(t, request{method: "GET", path: "/", token: adminTok}); w.Code != 200 {
		t.Fatalf("status page within the burst: %d", w.Code)
	}
	w := s.do(t, request{method: "GET", path: "/v1/namespaces", token: adminTok})
	if e := decode[api.Error](t, w); w.Code != 429 || !strings.Contains(e.Error.Message, "for this token") {
		t.Fatalf("the admin past its burst (the status page took it): %d %q", w.Code, e.Error.Message)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		for range 3 {
			if w := s.do(t, request{method: "GET", path: path, token: adminTok}); w.Code != 200 {
				t.Fatalf("%s with the admin's bucket empty: %d", path, w.Code)
			}
		}
	}

	open := newTestServer(t, func(c *Config) { c.Auth = Auth{Disabled: true}; c.RateLimit, c.RateBurst = 0.01, 1 })
	if w := open.do(t, request{method: "GET", path: "/v1/namespaces/orders"}); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	w = open.do(t, request{method: "GET", path: "/"})
	e := decode[api.Error](t, w)
	if w.Code != 429 || !strings.Contains(e.Error.Message, "for this client address") || strings.Contains(e.Error.Message, "token") {
		t.Fatalf("without auth, past the burst: %d %q; want 429 naming the client address, not a token", w.Code, e.Error.Message)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	s := newTestServer(t, nil)
	if w := s.do(t, request{method: "GET", path: "/healthz"}); w.Code != 200 || w.Body.String() != "{\"status\":\"ok\"}\n" {
		t.Fatalf("healthz %d %s", w.Code, w.Body.String())
	}
	r := decode[api.Readiness](t, s.do(t, request{method: "GET", path: "/readyz", token: adminTok}))
	if !r.Ready || len(r.Servers) != 2 {
		t.Fatalf("readyz %+v", r)
	}
	s.fake.Fence("a", "a's counter for orders is below b's water mark; run ticketd repair orders --server a")
	w := s.do(t, request{method: "GET", path: "/readyz", token: adminTok})
	r = decode[api.Readiness](t, w)
	if w.Code != 200 || !r.Ready || !r.Servers[0].Fenced || r.Servers[0].Healthy || !strings.Contains(r.Servers[0].Reason, "ticketd repair") || r.Servers[1].Reason != "" {
		t.Fatalf("one server fenced: %d %s", w.Code, w.Body.String())
	}
	if m := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String(); !strings.Contains(m, `ticketd_ticket_server_fenced{server="a"} 1`) || !strings.Contains(m, `ticketd_ticket_server_fenced{server="b"} 0`) {
		t.Fatalf("metrics do not say which server is fenced")
	}
	s.fake.SetDown("b", "")
	w = s.do(t, request{method: "GET", path: "/readyz", token: adminTok})
	r = decode[api.Readiness](t, w)
	if w.Code != 503 || r.Ready || r.Error == nil || r.Error.Code != api.CodeNotReady || w.Header().Get("Retry-After") == "" {
		t.Fatalf("both down: %d %s", w.Code, w.Body.String())
	}
}

func TestMetrics(t *testing.T) {
	s := newTestServer(t, nil)
	for i := 0; i < 3; i++ {
		s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":7}`})
	}
	s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: linksTok})
	s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":400}`}) // above the cache
	s.do(t, request{method: "BREW", path: "/v1/namespaces/orders", token: ordersTok})
	s.metrics.ObserveLease("a", 3*time.Millisecond, nil)
	s.metrics.ObserveLease("b", time.Second, errors.New("down"))
	s.metrics.ObserveFailover("b")
	s.fake.SetDown("b", "")
	waitIdle(t, s.Server)
	body := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
	for _, want := range []string{
		`ticketd_http_requests_total{method="POST",route="/v1/namespaces/:ns/blocks",status="200"} 4`,
		`ticketd_http_requests_total{method="POST",route="/v1/namespaces/:ns/blocks",status="403"} 1`,
		`ticketd_ids_issued_total{ticketd_namespace="orders"} 421`,
		`ticketd_blocks_issued_total{source="cache"} 3`,
		`ticketd_blocks_issued_total{source="backend"} 1`,
		`ticketd_lease_duration_seconds_count{result="ok",server="a"} 1`,
		`ticketd_lease_duration_seconds_count{result="error",server="b"} 1`,
		`ticketd_failovers_total{from="b"} 1`,
		`ticketd_ticket_server_up{server="a"} 1`,
		`ticketd_ticket_server_up{server="b"} 0`,
		"ticketd_cache_segments 1",
		"ticketd_cache_namespaces 1",
		"ticketd_cache_remaining_ids ",
		`ticketd_cache_fetches_total{result="ok"} `,
		`ticketd_http_request_duration_seconds_count{route="/v1/namespaces/:ns/blocks"} 5`,
		`method="other"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The first request found the cache empty, as every namespace's first does: no prefetch could
	// have come before it, so no stall (a stall series for every namespace ever leased from, and a
	// namespace asked once every --cache-idle would stall at every request).
	if strings.Contains(body, "ticketd_cache_stalls_total{") {
		t.Errorf("the first segment counted as a stall:\n%s", grepLines(body, "ticketd_cache_stalls_total"))
	}
}

func TestRequestIDsInLogs(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.AccessLog = true })
	w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, header: map[string]string{"X-Request-Id": "caller-id-1"}})
	if w.Header().Get("X-Request-Id") != "caller-id-1" {
		t.Fatalf("the caller's request ID was not kept: %q", w.Header().Get("X-Request-Id"))
	}
	w = s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: ordersTok, header: map[string]string{"X-Request-Id": "forged\nline"}})
	if id := w.Header().Get("X-Request-Id"); id == "" || strings.Contains(id, "forged") {
		t.Fatalf("an unsafe request ID was kept: %q", id)
	}
	s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: "wrong-token-0123456789",
		header: map[string]string{"X-Forwarded-For": "203.0.113.9"}})
	if strings.Contains(s.logs.String(), "203.0.113.9") {
		t.Fatal("the logged client address came from X-Forwarded-For")
	}
	lines := strings.Split(strings.TrimSpace(s.logs.String()), "\n")
	requests := 0
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["msg"] == "request" {
			requests++
			if id, _ := m["request_id"].(string); id == "" {
				t.Fatalf("request line without request_id: %s", l)
			}
		}
	}
	if requests != 3 {
		t.Fatalf("%d request lines, want 3:\n%s", requests, s.logs.String())
	}
	if strings.Contains(s.logs.String(), "wrong-token-0123456789") || strings.Contains(s.logs.String(), ordersTok) {
		t.Fatal("a token was logged")
	}
}

// TestAppendBlockMatchesEncodingJSON holds the hand-written encoder to encoding/json's output.
func TestAppendBlockMatchesEncodingJSON(t *testing.T) {
	blocks := []allocator.Block{
		{Namespace: "orders", Server: "127.0.0.1:3306", Start: 1001, Step: 2, Size: 1000},
		{Namespace: "a.b-c_d", Server: "embedded", Start: 9223372036854775000, Step: 1, Size: 807, ExpiresAt: time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 3600))},
		{Namespace: "x", Server: `we<ird>"na&me\é`, Start: 1, Step: 3, Size: 1, ExpiresAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)},
	}
	for _, b := range blocks {
		want, err := json.Marshal(api.FromBlock(b))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendBlock(nil, b); string(got) != string(want) {
			t.Errorf("\ngot  %s\nwant %s", got, want)
		}
		ids := api.IDs{Namespace: b.Namespace}
		for k := int64(0); k < min(b.Size, 5); k++ {
			id, _ := b.ID(k)
			ids.IDs = append(ids.IDs, fmt.Sprint(id))
		}
		small := b
		small.Size = min(b.Size, 5)
		want, _ = json.Marshal(ids)
		if got := appendIDs(nil, small); string(got) != string(want) {
			t.Errorf("\ngot  %s\nwant %s", got, want)
		}
	}
}

func TestQuickSize(t *testing.T) {
	for body, want := range map[string]int64{`{"size":1}`: 1, `{"size":4294967296}`: 4294967296, `{"size":10}`: 10} {
		if got, ok := quickSize([]byte(body)); !ok || got != want {
			t.Errorf("%s: %d %v", body, got, ok)
		}
	}
	for _, body := range []string{`{"size":}`, `{"size":01}`, `{"size": 1}`, `{"size":1 }`, `{"size":-1}`, `{"size":99999999999}`, `{"size":1e3}`, `{"sizes":1}`} {
		if _, ok := quickSize([]byte(body)); ok {
			t.Errorf("%s taken by the quick path", body)
		}
	}
}

// TestGracefulShutdown holds a lease in the backend, cancels Serve's context, and checks that the
// request in flight is answered, new connections are refused, and Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	s := newTestServer(t, func(c *Config) { c.Cache.Disabled = true })
	sv := serve(t, s.Server)
	url := "http://" + sv.addr
	release := s.fake.Hold()
	defer release()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	answered := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", url+"/v1/namespaces/orders/blocks", strings.NewReader(`{"size":5}`))
		req.Header.Set("Authorization", "Bearer "+ordersTok)
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("request in flight failed: %v", err)
			close(answered)
			return
		}
		answered <- resp
	}()
	for s.fake.LeaseCalls() == 0 {
		time.Sleep(time.Millisecond)
	}
	sv.cancel()
	// Shutdown has begun once the listener refuses connections.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", sv.addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections 5s after shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-sv.done:
		t.Fatalf("Serve returned %v with a request in flight", sv.err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	resp, ok := <-answered
	if !ok {
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"size":5`) {
		t.Fatalf("in-flight answer %d %s", resp.StatusCode, body)
	}
	if <-sv.done; sv.err != nil {
		t.Fatalf("Serve: %v", sv.err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	f := allocatortest.NewFake(allocatortest.Config{})
	m := NewMetrics()
	if _, err := New(Config{Auth: Auth{Disabled: true}}); err == nil {
		t.Error("no backend accepted")
	}
	if _, err := New(Config{Backend: f}); err == nil || !strings.Contains(err.Error(), "no token") {
		t.Errorf("no auth: %v", err)
	}
	if _, err := New(Config{Backend: f, Auth: Auth{Disabled: true}, TLSCertFile: "x"}); err == nil {
		t.Error("a certificate without a key accepted")
	}
	s, err := New(Config{Backend: f, Auth: Auth{Disabled: true}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := New(Config{Backend: f, Auth: Auth{Disabled: true}, Metrics: m}); err == nil {
		t.Error("a Metrics shared by two servers accepted")
	}
}
