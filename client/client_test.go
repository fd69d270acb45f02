package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newClient(t testing.TB, src Source, ns string, opts ...Option) *Client {
	t.Helper()
	c, err := New(src, ns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustNext returns the next ID; the Client's WithMaxWait (10s by default) bounds a wait.
func mustNext(t testing.TB, c *Client) int64 {
	t.Helper()
	id, err := c.Next(context.Background())
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return id
}

func TestNewRefusesBadArguments(t *testing.T) {
	fake := newFake(testNS{Name: "ok"})
	for _, tc := range []struct {
		name string
		src  Source
		ns   string
		opts []Option
		is   error  // errors.Is target, or nil
		msg  string // substring of the message
	}{
		{name: "nil source", src: nil, ns: "ok", msg: "Source is required"},
		{name: "nil backend", src: FromBackend(nil), ns: "ok", msg: "backend is required"},
		{name: "empty namespace", src: FromBackend(fake), ns: "", is: ErrInvalidNamespace},
		{name: "upper-case namespace", src: FromBackend(fake), ns: "Orders", is: ErrInvalidNamespace},
		{name: "namespace with a slash", src: HTTP("http://a"), ns: "a/b", is: ErrInvalidNamespace},
		{name: "no URL", src: HTTP(), ns: "ok", msg: "at least one"},
		{name: "ftp URL", src: HTTP("ftp://a"), ns: "ok", msg: "http:// or https://"},
		{name: "no host", src: HTTP("http://"), ns: "ok", msg: "no host"},
		{name: "credentials in URL", src: HTTP("http://u:secret@a"), ns: "ok", msg: "credentials"},
		{name: "query", src: HTTP("http://a/?x=1"), ns: "ok", msg: "without query"},
		{name: "same URL twice", src: HTTP("http://a:1", "http://a:1/"), ns: "ok", msg: "twice"},
		{name: "token with newline", src: HTTP("http://a"), ns: "ok", opts: []Option{WithToken("x\r\nEvil: 1")}, msg: "control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.src, tc.ns, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("New succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "Evil") {
				t.Fatalf("err %q repeats a secret", err)
			}
		})
	}
}

func TestOptionsAreClamped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		check func(c config) error
	}{
		{"defaults", nil, func(c config) error {
			if c.refillInterval != time.Second || c.maxWait != 10*time.Second || c.requestTimeout != 5*time.Second ||
				c.backoffMin != 50*time.Millisecond || c.backoffMax != 5*time.Second || c.minBlock != 0 || c.maxBlock != 0 ||
				c.maxInFlight != 16 {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"negative means default", []Option{WithRefillInterval(-1), WithMaxWait(-5), WithMinBlockSize(-3), WithMaxBlockSize(-1),
			WithMaxInFlight(-2)}, func(c config) error {
			if c.refillInterval != time.Second || c.maxWait != 10*time.Second || c.minBlock != 0 || c.maxBlock != 0 || c.maxInFlight != 16 {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"too small", []Option{WithRefillInterval(time.Nanosecond), WithMaxWait(time.Nanosecond), WithRequestTimeout(time.Nanosecond),
			WithBackoff(time.Nanosecond, time.Nanosecond)}, func(c config) error {
			if c.refillInterval != 10*time.Millisecond || c.maxWait != time.Millisecond || c.requestTimeout != 10*time.Millisecond ||
				c.backoffMin != time.Millisecond || c.backoffMax != time.Millisecond {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"too large", []Option{WithRefillInterval(1000 * time.Hour), WithMaxWait(1000 * time.Hour), WithRequestTimeout(time.Hour),
			WithBackoff(time.Hour, 2*time.Hour), WithMaxBlockSize(1 << 40), WithMaxInFlight(1000)}, func(c config) error {
			if c.refillInterval != time.Hour || c.maxWait != time.Hour || c.requestTimeout != 5*time.Minute ||
				c.backoffMin != 10*time.Minute || c.backoffMax != 10*time.Minute || c.maxBlock != maxBlockSizeLimit ||
				c.maxInFlight != 64 {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"backoff max below min", []Option{WithBackoff(time.Second, time.Millisecond)}, func(c config) error {
			if c.backoffMin != time.Second || c.backoffMax != time.Second {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"min block above max", []Option{WithMinBlockSize(5000), WithMaxBlockSize(100)}, func(c config) error {
			if c.minBlock != 100 || c.maxBlock != 100 {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"one lease at a time", []Option{WithMaxInFlight(1)}, func(c config) error {
			if c.maxInFlight != 1 {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
		{"nil option", []Option{nil, WithToken("t")}, func(c config) error {
			if c.token != "t" {
				return fmt.Errorf("%+v", c)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg config
			for _, o := range tc.opts {
				if o != nil {
					o(&cfg)
				}
			}
			if err := tc.check(cfg.withDefaults()); err != nil {
				t.Fatalf("config after clamping: %v", err)
			}
		})
	}
}

// TestUniqueUnderConcurrency: many goroutines through Next and NextN of one Client, small blocks so
// that they cross many block and run boundaries; no ID twice, every ID from a leased block, and the
// counters add up.
func TestUniqueUnderConcurrency(t *testing.T) {
	fake := newFake(testNS{Name: "race", BlockSize: 500, MaxBlockSize: 5000})
	c := newClient(t, FromBackend(fake), "race", WithMaxBlockSize(5000))
	const goroutines, perG = 64, 20_000
	set := newIDSet()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			add := set.adder()
			ctx := context.Background()
			buf := make([]int64, 1+g%7*300) // 1 to 1801: below and above a run
			for got := 0; got < perG; {
				if g%2 == 0 {
					id, err := c.Next(ctx)
					if err != nil {
						errs <- err
						return
					}
					add.add(id)
					got++
					continue
				}
				n, err := c.NextN(ctx, buf[:min(len(buf), perG-got)])
				for _, id := range buf[:n] {
					add.add(id)
				}
				got += n
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	set.check(t, goroutines*perG)
	// A block counts at the backend when it is leased, and in Stats when it is cached: the counts
	// agree once no lease is in flight.
	eventually(t, "no lease in flight", func() bool { return c.Stats().InFlight == 0 })
	blocks := fake.Blocks()
	var leased int64
	for _, b := range blocks {
		leased += b.Size
	}
	st := c.Stats()
	if st.Served != goroutines*perG {
		t.Fatalf("Stats().Served = %d, want %d", st.Served, goroutines*perG)
	}
	if st.Served+st.Cached+st.Discarded != leased {
		t.Fatalf("served %d + cached %d + discarded %d != leased %d", st.Served, st.Cached, st.Discarded, leased)
	}
	if st.Refills != int64(len(blocks)) {
		t.Fatalf("Refills = %d, blocks leased %d", st.Refills, len(blocks))
	}
	t.Logf("%d IDs from %d blocks; stats %+v", goroutines*perG, len(blocks), st)
}

// TestUniqueWithSeveralLeasesInFlight: while 32 goroutines take IDs through Next and NextN, eight
// leases are in flight at once and their blocks land in any order; no ID twice, and the counters add
// up.
func TestUniqueWithSeveralLeasesInFlight(t *testing.T) {
	fake := newFake(testNS{Name: "many", BlockSize: 1000, MaxBlockSize: 1000})
	fake.SetDelay(time.Millisecond)
	c := newClient(t, FromBackend(fake), "many", WithMaxInFlight(8))
	first := mustNext(t, c)
	// As if a refill had just taken an hour: the mark asks for far more than eight blocks, so eight
	// leases are in flight whenever one starts.
	c.mu.Lock()
	c.size.slowest, c.size.slowestAt = time.Hour, c.cfg.clock.Now()
	c.mu.Unlock()
	const goroutines, perG = 32, 20_000
	set := newIDSet()
	set.adder().add(first)
	l := startLoad(c, set, goroutines, perG)
	l.wait(t)
	set.check(t, goroutines*perG+1)
	eventually(t, "the last leases landed", func() bool { return c.Stats().InFlight == 0 })
	st := c.Stats()
	var leased int64
	for _, b := range fake.Blocks() {
		leased += b.Size
	}
	if st.Served != goroutines*perG+1 || st.Served+st.Cached+st.Discarded != leased || st.Refills != int64(len(fake.Blocks())) {
		t.Fatalf("stats %+v: served + cached + discarded must be the %d IDs of the %d blocks leased", st, leased, len(fake.Blocks()))
	}
	if st.PeakInFlight != 8 {
		t.Fatalf("at most %d leases in flight at once, want WithMaxInFlight's 8", st.PeakInFlight)
	}
}

// TestEveryIDComesFromALeasedBlock checks the arithmetic: IDs are exactly the blocks' IDs, with a
// step, served in full before the next block.
func TestEveryIDComesFromALeasedBlock(t *testing.T) {
	fake := newFakeWith(fakeConfig{Step: 2,
		Namespaces: []testNS{{Name: "odd", BlockSize: 10, Start: 101}}})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one processor: its runs come in order
	c := newClient(t, FromBackend(fake), "odd", WithMaxBlockSize(10), withProcs(1))
	for i := range 95 {
		if id, want := mustNext(t, c), int64(101+2*i); id != want {
			t.Fatalf("ID %d = %d, want %d (one processor, one goroutine: in order)", i, id, want)
		}
	}
	buf := make([]int64, 25)
	if n, err := c.NextN(context.Background(), buf); err != nil || n != 25 {
		t.Fatalf("NextN = %d, %v", n, err)
	}
	for i, id := range buf {
		if want := int64(101 + 2*(95+i)); id != want {
			t.Fatalf("NextN ID %d = %d, want %d", i, id, want)
		}
	}
}

// TestConcurrentCallersCauseOneFetch: while one refill is in flight, 64 callers that find the cache
// empty all wait for that one; none starts another.
func TestConcurrentCallersCauseOneFetch(t *testing.T) {
	fake := newFake(testNS{Name: "one", BlockSize: 1000, MaxBlockSize: 1000})
	gate := fake.Gate(1)
	// A frozen clock measures neither rate nor latency, so the low-water mark stays at 20% of the block
	// and the refill after the callers' one is not due.
	c := newClient(t, FromBackend(fake), "one", withProcs(2), withClock(newClock()))
	for range 1000 {
		mustNext(t, c)
	}
	// The first block is used up; the second lease is in flight, held at the gate.
	eventually(t, "the second lease", func() bool { return fake.LeaseCalls() == 2 })

	const callers = 64
	ids := make(chan int64, callers)
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := c.Next(ctxTimeout(t, 10*time.Second))
			if err != nil {
				errs <- err
				return
			}
			ids <- id
		}()
	}
	eventually(t, "64 callers waiting", func() bool { return c.Stats().Stalls == callers })
	if n := fake.LeaseCalls(); n != 2 {
		t.Fatalf("%d callers waiting caused %d lease calls in all, want 2 (the first block and one refill)", callers, n)
	}
	gate <- struct{}{}
	wg.Wait()
	close(ids)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for id := range ids {
		if seen[id] || id <= 1000 || id > 2000 {
			t.Fatalf("ID %d: duplicate or not from the second block [1001, 2000]", id)
		}
		seen[id] = true
	}
	if n := fake.LeaseCalls(); n != 2 {
		t.Fatalf("lease calls = %d after the refill landed, want exactly 2", n)
	}
	if st := c.Stats(); st.Stalls != callers || st.Refills != 2 {
		t.Fatalf("stats %+v: want %d stalls and 2 refills", st, callers)
	}
}

// TestLandingBlockGivesEveryProcessorARun: when several callers wait for a block, the block that
// lands gives every processor a run before they wake, so that they take their IDs without queueing
// for the lock; a caller alone carves its own run.
func TestLandingBlockGivesEveryProcessorARun(t *testing.T) {
	fake := newFake(testNS{Name: "herd", BlockSize: 1000, MaxBlockSize: 1000})
	gate := fake.Gate(1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // every caller on processor 0
	c := newClient(t, FromBackend(fake), "herd", withProcs(4), withClock(newClock()))
	for range 1000 {
		mustNext(t, c)
	}
	for i := 1; i < 4; i++ {
		if c.shards[i].run.Load() != nil {
			t.Fatalf("processor %d holds a run that no caller asked for", i)
		}
	}
	eventually(t, "the second lease", func() bool { return fake.LeaseCalls() == 2 })
	const callers = 8
	ids := make(chan int64, callers)
	for range callers {
		go func() {
			id, err := c.Next(ctxTimeout(t, 10*time.Second))
			if err != nil {
				t.Error(err)
			}
			ids <- id
		}()
	}
	eventually(t, "callers waiting", func() bool { return c.Stats().Stalls == callers })
	gate <- struct{}{}
	got := make([]int64, 0, callers)
	for range callers {
		got = append(got, <-ids)
	}
	second := fake.Blocks()[1]
	seen := map[int64]bool{}
	for _, id := range got {
		if seen[id] || !contains(second, id) {
			t.Fatalf("ID %d: twice, or not from the block that landed %v", id, second)
		}
		seen[id] = true
	}
	for i := range 4 {
		if r := c.shards[i].run.Load(); r == nil || r.lease.blk != second {
			t.Fatalf("processor %d holds no run of the block that landed", i)
		}
	}
}

// TestExpiredBlockIsNeverServed: with an injected clock, once a block's lease expires no ID of it is
// returned, its rest is counted as discarded, and a new block is leased.
func TestExpiredBlockIsNeverServed(t *testing.T) {
	clk := newClock()
	fake := newFakeWith(fakeConfig{Now: clk.Now,
		Namespaces: []testNS{{Name: "ttl", BlockSize: 1_000_000, LeaseTTL: 10 * time.Second}}})
	c := newClient(t, FromBackend(fake), "ttl", withClock(clk), withProcs(2))
	first := mustNext(t, c)
	for range 9 {
		mustNext(t, c)
	}
	blk := fake.Blocks()[0]
	if !contains(blk, first) {
		t.Fatalf("first ID %d not from the first block %v", first, blk)
	}
	clk.Advance(9*time.Second + 400*time.Millisecond) // before the margin (10s/20 = 500ms): still good
	if id := mustNext(t, c); !contains(blk, id) {
		t.Fatalf("ID %d before expiry should still come from %v", id, blk)
	}
	if st := c.Stats(); st.Discarded != 0 {
		t.Fatalf("discarded %d before expiry", st.Discarded)
	}

	// Goroutines keep asking while the block expires: a call that starts after the clock passed the
	// expiry never gets an ID of the block. Until then each takes at most 50,000 IDs, so that the
	// block still holds IDs when it expires, however fast they run.
	var after atomic.Bool
	stop := make(chan struct{})
	bad := make(chan int64, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for taken := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				started := after.Load()
				if !started && taken == 50_000 {
					runtime.Gosched()
					continue
				}
				taken++
				id, err := c.Next(context.Background())
				if err != nil {
					return
				}
				if started && contains(blk, id) {
					select {
					case bad <- id:
					default:
					}
					return
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	clk.Advance(600 * time.Millisecond) // 10s after the lease: expired
	after.Store(true)
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	select {
	case id := <-bad:
		t.Fatalf("ID %d of the expired block %v served after expiry", id, blk)
	default:
	}
	if st := c.Stats(); st.Discarded == 0 {
		t.Fatalf("nothing counted as discarded: %+v", st)
	}
	eventually(t, "served + cached + discarded = leased", func() bool {
		st := c.Stats()
		var leased int64
		for _, b := range fake.Blocks() {
			leased += b.Size
		}
		return st.Refills == int64(len(fake.Blocks())) && st.Served+st.Cached+st.Discarded == leased
	})
	if id := mustNext(t, c); contains(blk, id) {
		t.Fatalf("ID %d from the expired block", id)
	}
}

// TestExpiryDiscardCount: the exact count of IDs dropped at expiry, on one goroutine.
func TestExpiryDiscardCount(t *testing.T) {
	clk := newClock()
	fake := newFakeWith(fakeConfig{Now: clk.Now,
		Namespaces: []testNS{{Name: "ttl", BlockSize: 100, MaxBlockSize: 100, LeaseTTL: time.Minute}}})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one shard: no run left on another processor
	c := newClient(t, FromBackend(fake), "ttl", withClock(clk), withProcs(1))
	for range 30 {
		mustNext(t, c)
	}
	clk.Advance(time.Minute)
	if st := c.Stats(); st.Discarded != 70 || st.Served != 30 {
		t.Fatalf("after expiry: %+v, want 70 discarded and 30 served", st)
	}
	id := mustNext(t, c)
	if id < 101 {
		t.Fatalf("ID %d after expiry, want one of the second block", id)
	}
}

// TestBlockArrivingExpiredIsRefused: a block whose expiry has passed when it lands (clocks that
// disagree) is refused, not served.
func TestBlockArrivingExpiredIsRefused(t *testing.T) {
	clk := newClock()
	fake := newFakeWith(fakeConfig{
		Now:        func() time.Time { return clk.Now().Add(-time.Hour) }, // the server's clock is an hour behind
		Namespaces: []testNS{{Name: "skew", BlockSize: 100, LeaseTTL: time.Second}}})
	c := newClient(t, FromBackend(fake), "skew", withClock(clk), WithMaxWait(50*time.Millisecond))
	// The first lease starts with the Client; Next waits 50ms at most, which a busy machine can spend
	// before that lease is answered at all.
	eventually(t, "the first lease refused", func() bool { return c.Stats().RefillErrors > 0 })
	_, err := c.Next(context.Background())
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrBadResponse) {
		t.Fatalf("Next = %v, want ErrUnavailable wrapping ErrBadResponse", err)
	}
	if st := c.Stats(); st.Served != 0 || st.RefillErrors == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFailedRefillsBackOff: failures are retried after min, 2×min, 4×min… (jitter pinned to half),
// never sooner.
func TestFailedRefillsBackOff(t *testing.T) {
	clk := newClock()
	fake := newFake(testNS{Name: "down"})
	fake.SetLeaseErr(fmt.Errorf("%w: both ticket servers down", ErrServerUnavailable))
	c := newClient(t, FromBackend(fake), "down", withClock(clk), withJitter(0),
		WithBackoff(100*time.Millisecond, 400*time.Millisecond), WithMaxWait(time.Millisecond))
	eventually(t, "the first failure", func() bool { return c.Stats().RefillErrors == 1 })
	// Callers keep asking; none of them makes the client retry before its backoff has passed.
	for _, step := range []struct {
		advance time.Duration
		calls   int
	}{
		{49 * time.Millisecond, 1}, {time.Millisecond, 2}, // wait 50ms (100ms jittered to half)
		{99 * time.Millisecond, 2}, {time.Millisecond, 3}, // 100ms
		{199 * time.Millisecond, 3}, {time.Millisecond, 4}, // 200ms (400ms, half)
		{199 * time.Millisecond, 4}, {time.Millisecond, 5}, // capped at 400ms
	} {
		for range 3 {
			if _, err := c.Next(context.Background()); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Next = %v, want ErrUnavailable", err)
			}
		}
		clk.Advance(step.advance)
		eventually(t, fmt.Sprintf("failure %d recorded", step.calls), func() bool { return c.Stats().RefillErrors >= int64(step.calls) })
		time.Sleep(5 * time.Millisecond) // room for a wrong early retry to show
		if got := fake.LeaseCalls(); got != int64(step.calls) {
			t.Fatalf("after advancing %s: %d lease calls, want %d", step.advance, got, step.calls)
		}
	}
	if st := c.Stats(); st.RefillErrors != 5 || st.LastError == nil {
		t.Fatalf("stats %+v", st)
	}
}

func TestBackoffJitter(t *testing.T) {
	c := &Client{cfg: config{backoffMin: 100 * time.Millisecond, backoffMax: time.Second}}
	for _, tc := range []struct {
		failures int
		jitter   float64
		want     time.Duration
	}{
		{1, 0, 50 * time.Millisecond}, {1, 0.5, 75 * time.Millisecond}, {1, 0.999999, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond}, {3, 0, 200 * time.Millisecond}, {4, 0, 400 * time.Millisecond},
		{5, 0, 500 * time.Millisecond}, {50, 0.999999, time.Second},
	} {
		c.retrying.failures = tc.failures
		c.cfg.jitter = func() float64 { return tc.jitter }
		if got := c.backoffLocked(); got.Round(time.Millisecond) != tc.want {
			t.Errorf("failures %d jitter %v: wait %s, want %s", tc.failures, tc.jitter, got, tc.want)
		}
	}
}

// TestServesWhatIsLeftThenUnavailable: refills fail, the cached IDs are still served, then Next
// returns ErrUnavailable by the context's deadline.
func TestServesWhatIsLeftThenUnavailable(t *testing.T) {
	fake := newFake(testNS{Name: "rest", BlockSize: 300, MaxBlockSize: 300})
	fake.Gate(1) // the second lease never lands
	c := newClient(t, FromBackend(fake), "rest", WithRequestTimeout(20*time.Millisecond))
	seen := map[int64]bool{}
	for range 300 {
		id := mustNext(t, c)
		if seen[id] {
			t.Fatalf("duplicate %d", id)
		}
		seen[id] = true
	}
	start := time.Now()
	_, err := c.Next(ctxTimeout(t, 150*time.Millisecond))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on an empty cache with failing refills: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("returned after %s, want about the context's 150ms", waited)
	}
	if st := c.Stats(); st.Served != 300 || st.Stalls != 1 || st.RefillErrors == 0 {
		t.Fatalf("stats %+v", st)
	}
	// WithMaxWait bounds a wait whose context has no deadline.
	fake2 := newFake(testNS{Name: "rest", BlockSize: 300, MaxBlockSize: 300})
	fake2.Gate(1)
	c2 := newClient(t, FromBackend(fake2), "rest", WithMaxWait(30*time.Millisecond), WithRequestTimeout(20*time.Millisecond))
	for range 300 {
		mustNext(t, c2)
	}
	if _, err := c2.Next(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Next with WithMaxWait: %v, want ErrUnavailable", err)
	}
}

// TestPermanentErrorsReturnAtOnce: an unknown namespace is not worth waiting for.
func TestPermanentErrorsReturnAtOnce(t *testing.T) {
	fake := newFake()
	c := newClient(t, FromBackend(fake), "missing")
	start := time.Now()
	_, err := c.Next(ctxTimeout(t, 30*time.Second))
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Next = %v, want ErrNotFound", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("waited %s for a permanent error", time.Since(start))
	}
	// Once the namespace exists, the retry (after backoff) succeeds.
	if _, err := fake.CreateNamespace(context.Background(), testNS{Name: "missing"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a refill after the namespace appears", func() bool {
		_, err := c.Next(ctxTimeout(t, time.Second))
		return err == nil
	})
}

// TestAdaptiveBlockSize: the size follows rate × interval within the namespace's bounds, grows with
// demand and shrinks when it drops.
func TestAdaptiveBlockSize(t *testing.T) {
	clk := newClock()
	fake := newFake(testNS{Name: "adapt", BlockSize: 1000, MaxBlockSize: 200_000})
	c := newClient(t, FromBackend(fake), "adapt", withClock(clk), withProcs(1))
	buf := make([]int64, 1)
	take := func(n int) {
		t.Helper()
		for range n {
			if _, err := c.NextN(context.Background(), buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	take(1)
	eventually(t, "settings learnt", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.size.nsMax == 200_000 })
	// 50,000 IDs in one (fake) second.
	for range 50 {
		clk.Advance(20 * time.Millisecond)
		take(1000)
	}
	sizes := fake.Sizes()
	if sizes[0] != 0 {
		t.Fatalf("first lease asked for %d, want 0 (the namespace's block size)", sizes[0])
	}
	peak := int64(0)
	for _, s := range sizes[1:] {
		peak = max(peak, s)
		if s < 1000 || s > 200_000 {
			t.Fatalf("asked for %d, outside [1000, 200000]: %v", s, sizes)
		}
	}
	if peak < 40_000 {
		t.Fatalf("at 50k IDs/s the blocks stayed small: %v", sizes)
	}
}

// TestRequestSizeFollowsDemand: rate × interval within the bounds; a rising rate is followed at once, a
// falling one decays by half per refill; a lease TTL caps the block at half of what it would use.
func TestRequestSizeFollowsDemand(t *testing.T) {
	clk := newClock()
	c := &Client{cfg: config{clock: clk, refillInterval: time.Second},
		size: sizing{nsBlock: 1000, nsMax: 200_000, rateAt: clk.Now()}, count: counters{refills: 1}}
	refill := func(perSecond int64) int64 {
		clk.Advance(time.Second)
		c.count.carvedTotal += perSecond
		return c.requestSizeLocked()
	}
	if got := refill(50_000); got != 50_000 {
		t.Fatalf("at 50k/s: %d, want 50000", got)
	}
	if got := refill(500_000); got != 200_000 {
		t.Fatalf("at 500k/s: %d, want the maximum 200000", got)
	}
	var sizes []int64
	for range 12 {
		sizes = append(sizes, refill(100))
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i] > sizes[i-1] {
			t.Fatalf("sizes grew while demand stayed low: %v", sizes)
		}
	}
	if last := sizes[len(sizes)-1]; last != 1000 {
		t.Fatalf("at 100 IDs/s the blocks did not shrink to the minimum 1000: %v", sizes)
	}
	c.size.latency = 2 * time.Second // a refill slower than the interval: size for 4 latencies
	if got := refill(10_000); got != 80_000 {
		t.Fatalf("with 2s refills at 10k/s: %d, want 80000", got)
	}
	c.size.latency = 0
	c.size.ttl = time.Second
	if got := refill(30_000); got != 15_000 {
		t.Fatalf("at 30k/s with a 1s TTL: %d, want 15000 (half a TTL's worth)", got)
	}
	c.size.ttl, c.size.lastLife = time.Hour, time.Second // a block carved from an older segment had 1s left
	if got := refill(30_000); got != 15_000 {
		t.Fatalf("at 30k/s with blocks that last 1s: %d, want 15000", got)
	}
	c.size.ttl, c.size.lastLife, c.size.rate = 0, 0, 0
	c.cfg.minBlock, c.cfg.maxBlock = 5000, 7000
	if got := refill(1); got != 5000 {
		t.Fatalf("WithMinBlockSize(5000): %d", got)
	}
	if got := refill(1_000_000); got != 7000 {
		t.Fatalf("WithMaxBlockSize(7000): %d", got)
	}
}

// TestDemandIsSampledOverAWindowOrABlock: the rate is measured over at least 10ms, or as soon as a
// block's worth of IDs was taken; leases that start one after another do not each measure almost
// nothing and halve it.
func TestDemandIsSampledOverAWindowOrABlock(t *testing.T) {
	clk := newClock()
	c := &Client{cfg: config{clock: clk}, size: sizing{lastSize: 1000, rateAt: clk.Now()}, count: counters{refills: 1}}
	carve := func(after time.Duration, ids int64) float64 {
		clk.Advance(after)
		c.count.carvedTotal += ids
		c.sampleRateLocked(clk.Now())
		return c.size.rate
	}
	if got := carve(2*time.Millisecond, 500); got != 0 {
		t.Fatalf("half a block in 2ms: rate %v, want none measured yet", got)
	}
	if got := carve(0, 500); got != 500_000 {
		t.Fatalf("a block in 2ms: rate %v, want 500,000/s", got)
	}
	if got := carve(0, 0); got != 500_000 {
		t.Fatalf("sampled again at once: rate %v, want it kept", got)
	}
	if got := carve(time.Millisecond, 10); got != 500_000 {
		t.Fatalf("10 IDs 1ms later: rate %v, want it kept until 10ms have passed", got)
	}
	if got := carve(9*time.Millisecond, 90); got != 255_000 {
		t.Fatalf("100 IDs in 10ms: rate %v, want the falling rate halfway down, 255,000/s", got)
	}
	if want := int64(math.Ceil(500_000 * math.Exp2(-0.01) * 0.01)); c.size.lowWater != want {
		t.Fatalf("low-water %d, want %d: planned for the fastest rate, 10ms ago (see TestMarkPlansForTheFastestRecentDemand)", c.size.lowWater, want)
	}
}

// TestRefusedSizeLowersTheCap: a source that does not tell the namespace's maximum refuses a large
// block with ErrInvalidSize; the client asks for less at once.
func TestRefusedSizeLowersTheCap(t *testing.T) {
	clk := newClock()
	fake := newFake(testNS{Name: "cap", BlockSize: 100, MaxBlockSize: 3000})
	fake.SetNamespaceErr(errors.New("settings are for admins"))
	c := newClient(t, FromBackend(fake), "cap", withClock(clk), withProcs(1))
	buf := make([]int64, 100)
	for range 100 {
		clk.Advance(time.Millisecond) // 100k IDs/s: wants 100k per block
		if _, err := c.NextN(context.Background(), buf); err != nil {
			t.Fatal(err)
		}
	}
	var big int
	for _, b := range fake.Blocks() {
		if b.Size > 3000 {
			t.Fatalf("leased %v above the maximum", b)
		}
		if b.Size > 1000 {
			big++
		}
	}
	if big == 0 {
		t.Fatalf("never grew past 1000: %v", fake.Sizes())
	}
}

func TestLowWaterMark(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		latency  time.Duration
		lastSize int64
		want     int64
	}{
		{0, 0, 1000, 200}, // 20% of the block at least
		{1e6, 50 * time.Millisecond, 100_000, 110_000}, // rate × (2 × latency + 10ms)
		{1e6, time.Millisecond, 100_000, 20_000},
		{1e8, time.Millisecond, 1_000_000, 1_200_000}, // more than a block: refills back to back
		{10, time.Second, 0, 21},
		{0, 0, 0, 1},
	} {
		c := &Client{size: sizing{rate: tc.rate, latency: tc.latency, lastSize: tc.lastSize}}
		c.setLowWaterLocked()
		if c.size.lowWater != tc.want {
			t.Errorf("rate %v latency %s block %d: low-water %d, want %d", tc.rate, tc.latency, tc.lastSize, c.size.lowWater, tc.want)
		}
	}
}

// TestPlannedLatencyRemembersTheSlowest: the mark plans for the slower of the moving average and the
// slowest recent refill, which is forgotten at half per second.
func TestPlannedLatencyRemembersTheSlowest(t *testing.T) {
	clk := newClock()
	c := &Client{cfg: config{clock: clk}}
	step := func(after, took, want time.Duration) {
		t.Helper()
		clk.Advance(after)
		c.size.noteLatency(took, clk.Now(), c.count.refills == 0)
		c.count.refills++
		if got := c.size.refillLatency(); got.Round(time.Microsecond) != want {
			t.Fatalf("after a refill of %s: plans for %s, want %s", took, got, want)
		}
	}
	step(0, 10*time.Millisecond, 10*time.Millisecond)                // the first sets the average
	step(time.Second, 210*time.Millisecond, 210*time.Millisecond)    // slowest: 210ms; average 60ms
	step(time.Second, 10*time.Millisecond, 105*time.Millisecond)     // half of it a second later
	step(2*time.Second, 10*time.Millisecond, 38125*time.Microsecond) // slowest 26.25ms; average 38.125ms
	step(10*time.Second, 400*time.Millisecond, 400*time.Millisecond) // a slower one takes over
	step(0, 10*time.Millisecond, 400*time.Millisecond)               // and is not forgotten at once
}

// TestMarkPlansForTheFastestRecentDemand: the mark plans for the faster of the rate now and the fastest
// recent one, which is forgotten at half per second, as the refill latency it plans for is the slowest
// recent one.
func TestMarkPlansForTheFastestRecentDemand(t *testing.T) {
	clk := newClock()
	c := &Client{cfg: config{clock: clk}, size: sizing{lastSize: 1000, rateAt: clk.Now()}, count: counters{refills: 1}}
	step := func(after time.Duration, ids, want int64) {
		t.Helper()
		clk.Advance(after)
		c.count.carvedTotal += ids
		c.sampleRateLocked(clk.Now())
		if c.size.lowWater != want {
			t.Fatalf("%d IDs in %s (rate %.0f/s): low-water %d, want %d", ids, after, c.size.rate, c.size.lowWater, want)
		}
	}
	step(10*time.Millisecond, 10_000, 10_000) // 1M IDs/s × the 10ms of scheduling slack
	fastest := 1e6
	for range 200 { // then 100k IDs/s for 2s: the rate falls to it within 100ms, the mark by half a second
		fastest *= math.Exp2(-0.01) // half per second
		step(10*time.Millisecond, 1_000, int64(math.Ceil(fastest*0.01)))
	}
}

// TestBurstAfterALullIsServedFromTheCache: a process whose callers took a million IDs a second, then a
// tenth of that while other work held its processors, takes them as fast again once it gets them back.
// The IDs it takes then, before a refill could land, were cached during the lull: no call waits. The
// backend holds every lease until the test lets it land, so the IDs taken in the burst are those
// cached before it; the manual clock sets the rates.
func TestBurstAfterALullIsServedFromTheCache(t *testing.T) {
	clk := newClock()
	fake := newFake(testNS{Name: "burst", BlockSize: 1000, MaxBlockSize: 1000})
	gate := fake.Gate(1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one shard: every cached ID is in Stats().Cached
	c := newClient(t, FromBackend(fake), "burst", withClock(clk), withProcs(1), WithMaxInFlight(64),
		WithMaxWait(time.Millisecond))
	buf := make([]int64, 100)
	take := func(n int) error {
		for ; n > 0; n -= len(buf) {
			if _, err := c.NextN(context.Background(), buf); err != nil {
				return err
			}
		}
		return nil
	}
	settle := func() { // lets the leases in flight land, at once on the clock, until none is needed
		t.Helper()
		for c.Stats().InFlight > 0 {
			landHeld(t, c, gate)
		}
	}
	tick := func(after time.Duration, ids int) { // the leases land as soon as they start
		t.Helper()
		clk.Advance(after)
		for ; ids > 0; ids -= len(buf) {
			if err := take(len(buf)); err != nil {
				t.Fatal(err)
			}
			settle()
		}
	}
	tick(0, 100) // the first block, which the backend lets through
	eventually(t, "settings learnt", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.size.nsMax == 1000 })
	for range 20 { // a million IDs a second for 20ms
		tick(time.Millisecond, 1000)
	}
	for range 20 { // 100,000 a second for 200ms
		tick(10*time.Millisecond, 1000)
	}
	st := c.Stats()
	t.Logf("after the lull: %+v", st)
	for i := range 5 { // a million a second again, and no lease lands
		clk.Advance(time.Millisecond)
		if err := take(1000); err != nil {
			t.Fatalf("burst, %d IDs in: %v (stats before it %+v)", i*1000, err, st)
		}
	}
	if st := c.Stats(); st.Stalls != 0 {
		t.Fatalf("%d calls waited for a refill", st.Stalls)
	}
}

// TestOverlappingBlockIsRefused: a source that hands out the same block twice (a restored ticket
// database) does not make the client serve an ID twice.
func TestOverlappingBlockIsRefused(t *testing.T) {
	fake := newFake(testNS{Name: "dup", BlockSize: 100, MaxBlockSize: 100})
	fake.SetRepeat(true)
	c := newClient(t, FromBackend(fake), "dup", WithMaxWait(200*time.Millisecond), WithBackoff(time.Millisecond, 5*time.Millisecond))
	seen := map[int64]bool{}
	var err error
	for range 200 {
		var id int64
		if id, err = c.Next(context.Background()); err != nil {
			break
		}
		if seen[id] {
			t.Fatalf("ID %d served twice", id)
		}
		seen[id] = true
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrOverlap) || len(seen) != 100 {
		t.Fatalf("after %d IDs: %v, want ErrUnavailable wrapping ErrOverlap after 100", len(seen), err)
	}
}

// TestCloseStopsEverything: Close twice is fine, waiting callers return ErrClosed, later calls too,
// and the lease goroutines are gone (goleak in TestMain checks the whole package).
func TestCloseStopsEverything(t *testing.T) {
	fake := newFake(testNS{Name: "close", BlockSize: 10, MaxBlockSize: 10})
	fake.Gate(1)
	c, err := New(FromBackend(fake), "close")
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		mustNext(t, c)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Next(context.Background())
		waiting <- err
	}()
	eventually(t, "a waiting caller", func() bool { return c.Stats().Stalls == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting caller got %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if n, err := c.NextN(context.Background(), make([]int64, 5)); n != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("NextN after Close: %d, %v", n, err)
	}
}

// TestCloseDropsCachedIDs: IDs cached at Close are not served to anyone after it, also not to a
// goroutine that was in the middle of Next.
func TestCloseDropsCachedIDs(t *testing.T) {
	fake := newFake(testNS{Name: "drop", BlockSize: 1_000_000})
	c, err := New(FromBackend(fake), "drop")
	if err != nil {
		t.Fatal(err)
	}
	mustNext(t, c)
	var wg sync.WaitGroup
	var afterClose atomic.Int64
	var closed atomic.Bool
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				was := closed.Load()
				if _, err := c.Next(context.Background()); err != nil {
					return
				}
				if was {
					afterClose.Add(1)
				}
			}
		}()
	}
	time.Sleep(2 * time.Millisecond)
	c.Close()
	closed.Store(true)
	wg.Wait()
	if n := afterClose.Load(); n != 0 {
		t.Fatalf("%d IDs served by calls that started after Close", n)
	}
}

func TestStatusErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		status    int
		code      string
		is        error
		retryable bool
	}{
		{400, "invalid_namespace", ErrInvalidNamespace, false},
		{400, "invalid_size", ErrInvalidSize, false},
		{400, "invalid_json", ErrBadRequest, false},
		{400, "unknown_field", ErrBadRequest, false},
		{401, "missing_token", ErrUnauthorized, false},
		{401, "invalid_token", ErrUnauthorized, false},
		{403, "forbidden", ErrForbidden, false},
		{404, "namespace_not_found", ErrNotFound, false},
		{404, "route_not_found", ErrBadResponse, true}, // a wrong base URL: try the next one
		{404, "", ErrBadResponse, true},
		{409, "namespace_exists", ErrBadResponse, true}, // no lease can meet it: not one of the codes mapped
		{409, "id_space_exhausted", ErrExhausted, false},
		{413, "body_too_large", ErrBadRequest, false},
		{429, "rate_limited", ErrRateLimited, true},
		{500, "misconfigured", ErrMisconfigured, true},
		{500, "internal", ErrServerUnavailable, true},
		{503, "unavailable", ErrServerUnavailable, true},
		{503, "shutting_down", ErrServerUnavailable, true},
		{502, "", ErrServerUnavailable, true},
		{418, "", ErrBadResponse, true},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Retry-After": {"3"}}}
		body := fmt.Sprintf(`{"error":{"code":%q,"message":"do this"}}`, tc.code)
		err := error(statusError("http://x", resp, []byte(body), time.Now()))
		if !errors.Is(err, tc.is) {
			t.Errorf("%d %s: %v does not match %v", tc.status, tc.code, err, tc.is)
		}
		if retryable(err) != tc.retryable {
			t.Errorf("%d %s: retryable = %v", tc.status, tc.code, !tc.retryable)
		}
		var se *StatusError
		if !errors.As(err, &se) || se.RetryAfter != 3*time.Second || se.Message != "do this" || se.Status != tc.status {
			t.Errorf("%d: %+v", tc.status, se)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "0": 0, "5": 5 * time.Second, "-4": 0, "86400": time.Minute, "soon": 0,
		now.Add(10 * time.Second).Format(http.TimeFormat):  10 * time.Second,
		now.Add(-10 * time.Second).Format(http.TimeFormat): 0,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("Retry-After %q = %s, want %s", v, got, want)
		}
	}
}

func TestClaimNeverPassesTheRun(t *testing.T) {
	r := &run{size: 5, base: 10, step: 3}
	dst := make([]int64, 3)
	if n := claim(r, dst); n != 3 || dst[0] != 10 || dst[2] != 16 {
		t.Fatalf("claim = %d %v", n, dst)
	}
	if n := claim(r, dst); n != 2 || dst[0] != 19 || dst[1] != 22 {
		t.Fatalf("second claim = %d %v", n, dst)
	}
	if n := claim(r, dst); n != 0 {
		t.Fatalf("claim from a used-up run = %d", n)
	}
	if n := claim(nil, dst); n != 0 {
		t.Fatalf("claim(nil) = %d", n)
	}
	big := make([]int64, 1000)
	r2 := &run{size: 2, base: 1, step: 1}
	for range 1000 {
		claim(r2, big)
	}
	if r2.next.Load() > 2+2 {
		t.Fatalf("next grew to %d on a used-up run", r2.next.Load())
	}
}

// TestLeasesInFlightFollowDemand: while demand × refill latency is more than the largest block, the
// client keeps several leases in flight, as many as WithMaxInFlight allows and never more, and caches
// several blocks; when demand falls it goes back to one lease at a time. A manual clock sets the rate
// and the latency, and the backend holds every lease until the test lets it land, so nobody waits.
func TestLeasesInFlightFollowDemand(t *testing.T) {
	clk := newClock()
	fake := newFake(testNS{Name: "pipe", BlockSize: 1000, MaxBlockSize: 1000})
	gate := fake.Gate(1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one shard: every cached ID is in Stats().Cached
	c := newClient(t, FromBackend(fake), "pipe", withClock(clk), withProcs(1), WithMaxInFlight(4))
	buf := make([]int64, 100)
	take := func(n int) {
		t.Helper()
		for ; n > 0; n -= len(buf) {
			if _, err := c.NextN(context.Background(), buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	land := func() { // lets one held lease land, and waits until its block is cached
		t.Helper()
		landHeld(t, c, gate)
	}
	take(100) // the first block, which the backend lets through
	eventually(t, "settings learnt", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.size.nsMax == 1000 })

	// Tens of thousands of IDs a second; the second lease starts below the mark and takes 300ms.
	clk.Advance(10 * time.Millisecond)
	take(900)
	eventually(t, "the second lease", func() bool { return fake.LeaseCalls() == 2 })
	clk.Advance(300 * time.Millisecond)
	land()
	eventually(t, "four leases in flight", func() bool { return fake.LeaseCalls() == 6 })
	st := c.Stats()
	if st.InFlight != 4 || st.PeakInFlight != 4 || st.LowWater <= 4*1000+st.Cached {
		t.Fatalf("stats %+v: want 4 leases in flight (WithMaxInFlight), below a mark they cannot reach", st)
	}
	for range 10 { // what is cached, at 100,000 IDs/s: the leases in flight stay four
		clk.Advance(time.Millisecond)
		take(100)
	}
	time.Sleep(5 * time.Millisecond) // room for a wrong fifth lease to show
	if n, st := fake.LeaseCalls(), c.Stats(); n != 6 || st.InFlight != 4 {
		t.Fatalf("%d lease calls, %d in flight, want 6 and 4", n, st.InFlight)
	}
	// The leases land; others replace them, never more than four in flight, until the IDs cached
	// reach the mark.
	for c.Stats().InFlight > 0 {
		land()
		if st := c.Stats(); st.InFlight > 4 {
			t.Fatalf("%d leases in flight, WithMaxInFlight(4)", st.InFlight)
		}
	}
	st = c.Stats()
	t.Logf("after the burst: %+v", st)
	if st.Blocks < 10 || st.Cached < st.LowWater {
		t.Fatalf("stats %+v: want at least 10 blocks cached, up to the mark", st)
	}

	// Demand falls to 10,000 IDs/s: the mark follows it down, and once the cache has run down to a few
	// blocks, one lease at a time is enough.
	for range 1000 {
		clk.Advance(10 * time.Millisecond)
		take(100)
		st := c.Stats()
		if st.InFlight > 1 && st.Cached < 5000 {
			t.Fatalf("at 10,000 IDs/s, %d cached: %d leases in flight (stats %+v)", st.Cached, st.InFlight, st)
		}
		for range st.InFlight {
			land()
		}
	}
	st = c.Stats()
	t.Logf("after demand fell: %+v", st)
	if st.Blocks > 2 || st.LowWater > 1000 || st.PeakInFlight != 4 || st.Stalls != 0 {
		t.Fatalf("stats %+v: want at most 2 blocks cached, a mark below a block, no stall", st)
	}
}

// landHeld lets one lease that a test's backend holds at gate land, and waits until its block is cached.
func landHeld(t *testing.T, c *Client, gate chan<- struct{}) {
	t.Helper()
	refills := c.Stats().Refills
	select {
	case gate <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no lease waits to land")
	}
	eventually(t, "the block cached", func() bool { return c.Stats().Refills == refills+1 })
}
