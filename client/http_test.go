package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// contractServer answers the two routes the SDK uses the way API v1 specifies them, on top of a
// backend: POST /v1/namespaces/{ns}/blocks and GET /v1/namespaces/{ns}, bearer tokens, and errors as
// {"error":{"code","message"}} with their statuses.
type contractServer struct {
	be       Backend
	token    string // the namespace's token; empty: no auth
	leases   atomic.Int64
	lastAuth atomic.Value // the last Authorization header
	mu       sync.Mutex
	bodies   []string
}

func (s *contractServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/namespaces/{ns}/blocks", func(w http.ResponseWriter, r *http.Request) {
		if !s.auth(w, r) {
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
		if err != nil || len(body) > 4096 {
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", "the body must be at most 4 KiB")
			return
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		var req struct {
			Size *int64 `json:"size"`
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if len(body) > 0 {
			if err := dec.Decode(&req); err != nil {
				writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
				return
			}
		}
		size := int64(0)
		if req.Size != nil {
			if size = *req.Size; size < 1 {
				writeError(w, http.StatusBadRequest, "invalid_size", "size must be 1 or more")
				return
			}
		}
		blk, err := s.be.Lease(r.Context(), r.PathValue("ns"), size)
		if err != nil {
			writeBackendError(w, err)
			return
		}
		s.leases.Add(1)
		writeJSON(w, http.StatusOK, wireOf(blk))
	})
	mux.HandleFunc("GET /v1/namespaces/{ns}", func(w http.ResponseWriter, r *http.Request) {
		if !s.auth(w, r) {
			return
		}
		ns, err := s.be.Settings(r.Context(), r.PathValue("ns"))
		if err != nil {
			writeBackendError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"name": r.PathValue("ns"), "block_size": ns.BlockSize,
			"max_block_size": ns.MaxBlockSize, "lease_ttl": ns.LeaseTTL.String(), "start": "1", "max_id": "9223372036854775807"})
	})
	return mux
}

func (s *contractServer) auth(w http.ResponseWriter, r *http.Request) bool {
	h := r.Header.Get("Authorization")
	s.lastAuth.Store(h)
	switch {
	case s.token == "":
		return true
	case h == "":
		writeError(w, http.StatusUnauthorized, "missing_token", "send Authorization: Bearer <token>")
		return false
	case h != "Bearer "+s.token:
		writeError(w, http.StatusForbidden, "forbidden", "this token is not valid for the namespace")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e wireError
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

// wireOf is a block as API v1 sends it.
func wireOf(b Block) wireBlock {
	last, _ := b.last()
	w := wireBlock{Namespace: b.Namespace, Start: strconv.FormatInt(b.Start, 10), Step: b.Step, Size: b.Size,
		Last: strconv.FormatInt(last, 10), Server: b.Server}
	if !b.ExpiresAt.IsZero() {
		t := b.ExpiresAt.UTC()
		w.ExpiresAt = &t
	}
	return w
}

func writeBackendError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "namespace_not_found", err.Error())
	case errors.Is(err, ErrInvalidNamespace):
		writeError(w, http.StatusBadRequest, "invalid_namespace", err.Error())
	case errors.Is(err, ErrInvalidSize):
		writeError(w, http.StatusBadRequest, "invalid_size", err.Error())
	case errors.Is(err, ErrExhausted):
		writeError(w, http.StatusConflict, "id_space_exhausted", err.Error())
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no ticket server usable")
	}
}

func startContract(t *testing.T, be Backend, token string) (*contractServer, *httptest.Server) {
	t.Helper()
	cs := &contractServer{be: be, token: token}
	srv := httptest.NewServer(cs.handler())
	t.Cleanup(srv.Close)
	return cs, srv
}

// TestHTTPUniqueAcrossTwoServers: two servers over one backend, many goroutines; round-robin reaches
// both, and no ID comes twice.
func TestHTTPUniqueAcrossTwoServers(t *testing.T) {
	fake := newFake(testNS{Name: "orders", BlockSize: 200, MaxBlockSize: 10_000})
	a, srvA := startContract(t, fake, "tok")
	b, srvB := startContract(t, fake, "tok")
	c := newClient(t, HTTP(srvA.URL, srvB.URL+"/"), "orders", WithToken("tok"), WithRefillInterval(10*time.Millisecond))
	const goroutines, perG = 32, 20_000
	set := newIDSet()
	if err := takeConcurrently(c, set, goroutines, perG); err != nil {
		t.Fatal(err)
	}
	set.check(t, goroutines*perG)
	t.Logf("stats %+v", c.Stats())
	if a.leases.Load() == 0 || b.leases.Load() == 0 {
		t.Fatalf("round-robin: %d leases from A, %d from B", a.leases.Load(), b.leases.Load())
	}
	if got := a.lastAuth.Load(); got != "Bearer tok" {
		t.Fatalf("Authorization = %q", got)
	}
	// A lease counts on its endpoint when the answer comes, and in Refills when its block is cached: the
	// counts agree once no lease is in flight, unless a hedged refill's second block was dropped (its
	// IDs in Discarded).
	var st Stats
	eventually(t, "no lease in flight, every answer counted", func() bool {
		st = c.Stats()
		leases := st.Endpoints[0].Leases + st.Endpoints[1].Leases
		return st.InFlight == 0 && (leases == st.Refills || leases > st.Refills && st.Discarded > 0)
	})
	if len(st.Endpoints) != 2 || !st.Endpoints[0].Healthy && !st.Endpoints[1].Healthy {
		t.Fatalf("endpoints %+v, refills %d", st.Endpoints, st.Refills)
	}
	a.mu.Lock()
	first := a.bodies[0]
	a.mu.Unlock()
	b.mu.Lock()
	if b.bodies[0] != "{}" && first != "{}" {
		t.Fatalf("the first lease should ask for the namespace's size ({}), got %q and %q", first, b.bodies[0])
	}
	b.mu.Unlock()
}

// TestHTTPFailoverAndBothDown: one server goes away mid-run and IDs keep flowing from the other; then
// both are gone, the cached IDs are still served, and then Next returns ErrUnavailable.
func TestHTTPFailoverAndBothDown(t *testing.T) {
	fake := newFake(testNS{Name: "links", BlockSize: 100, MaxBlockSize: 1000})
	_, srvA := startContract(t, fake, "")
	_, srvB := startContract(t, fake, "")
	c := newClient(t, HTTP(srvA.URL, srvB.URL), "links", WithRefillInterval(10*time.Millisecond),
		WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	set := newIDSet()
	var served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			add := set.adder()
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, err := c.Next(context.Background())
				if err != nil {
					errs <- err
					return
				}
				add.add(id)
				served.Add(1)
			}
		}()
	}
	eventually(t, "IDs from both servers", func() bool { return served.Load() > 50_000 })
	srvB.CloseClientConnections()
	srvB.Close()
	killedAt, refillsAt := served.Load(), c.Stats().Refills
	eventually(t, "IDs after B is gone", func() bool {
		return served.Load() > killedAt+200_000 && c.Stats().Refills > refillsAt+20
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a caller failed while one server was up: %v", err)
	}
	st := c.Stats()
	if st.Endpoints[1].Failures == 0 && st.Endpoints[1].LastError == "" {
		// B was never tried after it went (round-robin must have reached it)
		t.Fatalf("B shows no failure: %+v", st.Endpoints)
	}

	// Both gone: what is cached is served, then ErrUnavailable.
	srvA.CloseClientConnections()
	srvA.Close()
	after, err := drain(c, set, 300*time.Millisecond)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrServerUnavailable) {
		t.Fatalf("with both servers gone: %v, want ErrUnavailable and ErrServerUnavailable", err)
	}
	set.check(t, served.Load()+after)
	if after == 0 {
		t.Fatalf("no cached ID was served after both servers went")
	}
	t.Logf("%d IDs before, %d cached IDs served after both servers went; %+v", served.Load(), after, c.Stats().Endpoints)
}

func TestHTTPAuthErrors(t *testing.T) {
	fake := newFake(testNS{Name: "sec"})
	_, srv := startContract(t, fake, "right")
	for _, tc := range []struct {
		name  string
		token string
		is    error
	}{
		{"no token", "", ErrUnauthorized},
		{"another token", "wrong", ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, HTTP(srv.URL), "sec", WithToken(tc.token))
			start := time.Now()
			_, err := c.Next(ctxTimeout(t, 20*time.Second))
			if !errors.Is(err, tc.is) {
				t.Fatalf("Next = %v, want %v", err, tc.is)
			}
			if strings.Contains(err.Error(), "right") || (tc.token != "" && strings.Contains(err.Error(), tc.token)) {
				t.Fatalf("the error %q shows a token", err)
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("waited %s for an error that waiting does not cure", time.Since(start))
			}
		})
	}
	c := newClient(t, HTTP(srv.URL), "sec", WithToken("right"))
	mustNext(t, c)
}

func TestHTTPNotFound(t *testing.T) {
	_, srv := startContract(t, newFake(), "")
	c := newClient(t, HTTP(srv.URL), "nosuch")
	_, err := c.Next(ctxTimeout(t, 20*time.Second))
	var se *StatusError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &se) || se.Status != 404 || se.Code != "namespace_not_found" {
		t.Fatalf("Next = %v, want a 404 StatusError matching ErrNotFound", err)
	}
}

// TestHTTPBadAnswersFailOver: a server that answers nonsense is skipped, the good one serves.
func TestHTTPBadAnswersFailOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		code int
	}{
		{"not JSON", "<html>proxy error</html>", 200},
		{"another namespace", `{"namespace":"other","start":"1000001","step":1,"size":10,"last":"1000010","expires_at":null,"server":"x"}`, 200},
		{"last does not match", `{"namespace":"ns","start":"1000001","step":1,"size":10,"last":"5","expires_at":null,"server":"x"}`, 200},
		{"negative start", `{"namespace":"ns","start":"-5","step":1,"size":10,"last":"4","expires_at":null,"server":"x"}`, 200},
		{"zero step", `{"namespace":"ns","start":"1000001","step":0,"size":10,"last":"1000001","expires_at":null,"server":"x"}`, 200},
		{"bad gateway", "upstream down", 502},
		{"teapot", "", 418},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var badCalls atomic.Int64
			bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				badCalls.Add(1)
				w.WriteHeader(tc.code)
				fmt.Fprint(w, tc.body)
			}))
			defer bad.Close()
			fake := newFake(testNS{Name: "ns", BlockSize: 10, MaxBlockSize: 10})
			_, srv := startContract(t, fake, "")
			c := newClient(t, HTTP(bad.URL, srv.URL), "ns", WithBackoff(time.Millisecond, 2*time.Millisecond))
			for range 100 {
				id := mustNext(t, c)
				if id > 1000 {
					t.Fatalf("served ID %d from the bad answer", id)
				}
			}
			st := c.Stats()
			if badCalls.Load() == 0 || st.Endpoints[0].LastError == "" && st.Endpoints[0].Failures == 0 && st.RefillErrors == 0 {
				t.Fatalf("the bad server was never tried or never blamed: calls %d, %+v", badCalls.Load(), st.Endpoints)
			}
		})
	}
}

// TestHTTPRetryAfter: a 503 or 429 with Retry-After holds back the next refill at least that long.
func TestHTTPRetryAfter(t *testing.T) {
	for _, status := range []int{503, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Retry-After", "7")
				writeError(w, status, "busy", "try later")
			}))
			defer srv.Close()
			clk := newClock()
			c := newClient(t, HTTP(srv.URL), "ns", withClock(clk), WithMaxWait(time.Millisecond))
			eventually(t, "the first failure", func() bool { return c.Stats().RefillErrors == 1 })
			c.mu.Lock()
			wait := c.retrying.backoffTo.Sub(clk.Now())
			c.mu.Unlock()
			if wait < 7*time.Second {
				t.Fatalf("backoff %s after Retry-After: 7", wait)
			}
			clk.Advance(6 * time.Second)
			_, err := c.Next(context.Background())
			want := map[int]error{503: ErrServerUnavailable, 429: ErrRateLimited}[status]
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, want) {
				t.Fatalf("Next = %v, want ErrUnavailable wrapping %v", err, want)
			}
			time.Sleep(5 * time.Millisecond)
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d requests within the Retry-After", n)
			}
			clk.Advance(time.Second)
			eventually(t, "the retry after 7s", func() bool { return calls.Load() == 2 })
		})
	}
}

// TestHTTPLearnsTheNamespaceMaximum: the client reads the namespace's settings and never asks for more
// than its maximum.
func TestHTTPLearnsTheNamespaceMaximum(t *testing.T) {
	fake := newFake(testNS{Name: "max", BlockSize: 100, MaxBlockSize: 700, LeaseTTL: time.Hour})
	_, srv := startContract(t, fake, "")
	c := newClient(t, HTTP(srv.URL), "max")
	buf := make([]int64, 50)
	for range 200 {
		if _, err := c.NextN(context.Background(), buf); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	nsMax, ttl := c.size.nsMax, c.size.ttl
	c.mu.Unlock()
	if nsMax != 700 || ttl != time.Hour {
		t.Fatalf("learnt max %d, ttl %s; want 700, 1h", nsMax, ttl)
	}
	for _, s := range fake.Sizes() {
		if s > 700 {
			t.Fatalf("asked for %d, above the maximum 700: %v", s, fake.Sizes())
		}
	}
	if st := c.Stats(); st.RefillErrors != 0 {
		t.Fatalf("refill errors %d: %v", st.RefillErrors, st.LastError)
	}
}
