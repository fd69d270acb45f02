package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recoveringURLs are ticketd URLs over one backend that go through an outage together: while it lasts
// they answer every request 503 unavailable. When it ends, the URL asked first holds every request it
// takes (a ticketd that hangs), and the others answer 503 for a while more (ticketds still checking
// their ticket servers again) before they serve.
type recoveringURLs struct {
	srvs    []*httptest.Server
	later   time.Duration
	release chan struct{}

	mu   sync.Mutex
	down bool
	back time.Time // when the outage ended; zero before
	slow int       // the URL asked first after it; -1 until one is
}

func startRecovering(t *testing.T, be Backend, urls int, later time.Duration) *recoveringURLs {
	t.Helper()
	u := &recoveringURLs{later: later, release: make(chan struct{}), slow: -1}
	for i := range urls {
		h := (&contractServer{be: be}).handler()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch u.fate(i) {
			case Refuse503:
				writeError(w, http.StatusServiceUnavailable, "unavailable", "no ticket server available")
			case Hold:
				select {
				case <-u.release:
				case <-r.Context().Done():
				}
			default:
				h.ServeHTTP(w, r)
			}
		}))
		t.Cleanup(srv.Close)
		u.srvs = append(u.srvs, srv)
	}
	t.Cleanup(func() { close(u.release) }) // before Close, which waits for the requests held
	return u
}

type urlFate int

const (
	Serve urlFate = iota
	Refuse503
	Hold
)

func (u *recoveringURLs) fate(i int) urlFate {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.down:
		return Refuse503
	case u.back.IsZero():
		return Serve
	}
	if u.slow < 0 {
		u.slow = i
	}
	switch {
	case u.slow == i:
		return Hold
	case time.Since(u.back) < u.later:
		return Refuse503
	}
	return Serve
}

func (u *recoveringURLs) urls() []string {
	out := make([]string, len(u.srvs))
	for i, s := range u.srvs {
		out[i] = s.URL
	}
	return out
}

func (u *recoveringURLs) setDown(down bool) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.down = down
	if !down {
		u.back = time.Now()
	}
	return u.back
}

// TestHedgeAfterAnOutage: callers draw IDs through two URLs that go through an outage (every lease
// answered 503) long enough that the client's refills fail; then the URL asked first takes requests
// and answers none, and the other answers 503 for 300 ms more before it serves. The refill begun then
// is hedged to the other URL, which refuses it; the hedge must not wait on the hung URL with the
// refill's first request, and is sent again until the other URL serves: no Next begun after the
// outage, or waiting when it ended, waits for the request timeout (2 s) from then. No ID comes twice.
func TestHedgeAfterAnOutage(t *testing.T) {
	fake := newFake(testNS{Name: "o", BlockSize: 50, MaxBlockSize: 50})
	u := startRecovering(t, fake, 2, 300*time.Millisecond)
	// A short backoff: the refill after the outage starts within 50 ms, so what the callers wait for
	// is the refill's requests.
	c := newClient(t, HTTP(u.urls()...), "o", WithRequestTimeout(2*time.Second), WithHedgeDelay(20*time.Millisecond),
		WithBackoff(10*time.Millisecond, 50*time.Millisecond), WithMaxWait(time.Minute))
	var (
		mu      sync.Mutex
		back    time.Time
		longest time.Duration
		after   int
		set     = newIDSet()
		stop    = make(chan struct{})
		errs    = make(chan error, 2)
		wg      sync.WaitGroup
	)
	for range 2 {
		wg.Go(func() {
			add := set.adder()
			for {
				select {
				case <-stop:
					return
				default:
				}
				begin := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				id, err := c.Next(ctx)
				cancel()
				end := time.Now()
				if err != nil {
					errs <- err
					return
				}
				add.add(id)
				mu.Lock()
				if !back.IsZero() && end.After(back) {
					longest = max(longest, end.Sub(later(begin, back))) // waited since the outage ended
					after++
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // warm-up
	failed := c.Stats().RefillErrors
	u.setDown(true)
	eventually(t, "refills failing", func() bool { return c.Stats().RefillErrors >= failed+3 })
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	back = u.setDown(false)
	mu.Unlock()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	set.check(t, set.n.Load())
	st := c.Stats()
	t.Logf("longest wait after the outage: %s; %d calls after it; %d refills, %d errors, %d hedges, %d won",
		longest, after, st.Refills, st.RefillErrors, st.Hedges, st.HedgesWon)
	if after == 0 {
		t.Fatal("no Next returned after the outage")
	}
	if longest >= time.Second {
		t.Fatalf("a Next waited %s after the outage, want under a second: its refill waited for the hung URL", longest)
	}
}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestLeaseAsksToBeHeld: a lease asks ticketd to hold it while no ticket server is in rotation, for
// half the request timeout in whole seconds; a timeout under two seconds asks for no wait. Reading the
// namespace's settings asks for none.
func TestLeaseAsksToBeHeld(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    string
	}{{0, "wait=2"}, {3 * time.Second, "wait=1"}, {time.Minute, "wait=30"}, {1999 * time.Millisecond, ""}} {
		fake := newFake(testNS{Name: "p", BlockSize: 10, MaxBlockSize: 10})
		h := (&contractServer{be: fake}).handler()
		var mu sync.Mutex
		got := map[string]string{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[r.Method] = r.Header.Get("Prefer")
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		opts := []Option{}
		if tc.timeout > 0 {
			opts = append(opts, WithRequestTimeout(tc.timeout))
		}
		c := newClient(t, HTTP(srv.URL), "p", opts...)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the settings read", func() bool { mu.Lock(); defer mu.Unlock(); _, ok := got[http.MethodGet]; return ok })
		c.Close()
		srv.Close()
		mu.Lock()
		if got[http.MethodPost] != tc.want || got[http.MethodGet] != "" {
			t.Errorf("request timeout %s: a lease sent Prefer %q, the settings read %q; want %q and none", tc.timeout, got[http.MethodPost], got[http.MethodGet], tc.want)
		}
		mu.Unlock()
	}
}

// TestHeldAnswerIsAskedAgainAtOnce: ticketd held the lease for the wait asked (the clock moves by it)
// and answered 503 with "Preference-Applied: wait=1" and no Retry-After: the client asks again at once,
// not after its backoff (at least 500 ms here, and the test's clock never moves to end one), and the
// caller gets its ID. An answer that claims a hold it did not take is backed off as usual.
func TestHeldAnswerIsAskedAgainAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   time.Duration // how far the clock moves before the 503
		served bool
	}{{"held", time.Second, true}, {"not held", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			fake := newFake(testNS{Name: "h", BlockSize: 10, MaxBlockSize: 10})
			h := (&contractServer{be: fake}).handler()
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && posts.Add(1) == 1 {
					clk.Advance(tc.held)
					w.Header().Set("Preference-Applied", "wait=1")
					writeError(w, http.StatusServiceUnavailable, "unavailable", "no ticket server is usable right now")
					return
				}
				h.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, HTTP(srv.URL), "h", withClock(clk), WithBackoff(time.Second, 5*time.Second),
				WithRequestTimeout(3*time.Second), WithHedgeDelay(time.Hour), WithMaxWait(time.Hour))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := c.Next(ctx)
			if served := err == nil; served != tc.served {
				t.Fatalf("Next: %v after %d leases; want served %v", err, posts.Load(), tc.served)
			}
			if st := c.Stats(); st.RefillErrors != 1 {
				t.Fatalf("%d refill errors, want the one held answer", st.RefillErrors)
			}
		})
	}
}
