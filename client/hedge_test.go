package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/internal/hedge"
)

// hangingServer is a contract server that, while hang is set, takes requests and answers none of them
// until release is closed (or the request ends); slow delays every answer instead.
type hangingServer struct {
	*contractServer
	srv     *httptest.Server
	hang    atomic.Bool
	slow    atomic.Int64 // nanoseconds
	release chan struct{}
	once    sync.Once
	waiting atomic.Int32 // requests held now
}

func startHanging(t *testing.T, be Backend) *hangingServer {
	t.Helper()
	s := &hangingServer{contractServer: &contractServer{be: be}, release: make(chan struct{})}
	h := s.handler()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hang.Load() {
			s.waiting.Add(1)
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
			s.waiting.Add(-1)
		}
		if d := time.Duration(s.slow.Load()); d > 0 {
			time.Sleep(d)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	t.Cleanup(s.answer) // before Close, which waits for the requests held
	return s
}

// answer lets the requests held, and those to come, through.
func (s *hangingServer) answer() {
	s.once.Do(func() { close(s.release) })
	s.hang.Store(false)
}

// TestHedgeDelay: the delay is WithHedgeDelay, or the 95th percentile of the answers used (see package
// hedge), at least 20ms and at most half the request timeout, 1s before the first answer.
func TestHedgeDelay(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name    string
		fixed   time.Duration
		timeout time.Duration
		samples []time.Duration
		want    time.Duration
	}{
		{name: "before any answer", want: firstHedgeDelay},
		{name: "before any answer, short timeout", timeout: ms(1000), want: ms(500)},
		{name: "the 95th percentile", samples: []time.Duration{ms(40), ms(30), ms(50)}, want: ms(50)},
		{name: "floor", samples: []time.Duration{ms(1), ms(2), ms(3)}, want: hedgeFloor},
		{name: "half the request timeout at most", timeout: ms(200), samples: []time.Duration{ms(150)}, want: ms(100)},
		{name: "fixed", fixed: ms(7), samples: []time.Duration{ms(100)}, want: ms(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config{hedgeDelay: tc.fixed, requestTimeout: tc.timeout}.withDefaults()
			var h hedging
			h.delay = h.derive(&cfg)
			for _, d := range tc.samples {
				h.noteRequest(time.Time{}, d, &cfg)
			}
			if h.delay != tc.want {
				t.Fatalf("delay %s, want %s", h.delay, tc.want)
			}
		})
	}
}

// TestHedgeDelayAfterAFailure: the answers of the refills begun within hedge.Recovery of a failed
// request, or of one that failed over from a URL that failed, leave the delay as it was: at the end of
// an outage they wait for the servers to recover, and would hold the delay near its ceiling for the
// next 64 refills.
func TestHedgeDelayAfterAFailure(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cfg := config{}.withDefaults()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var h hedging
	for i := range 10 {
		h.noteRequest(t0.Add(time.Duration(i)*time.Millisecond), ms(30), &cfg)
	}
	h.noteFailure(t0.Add(time.Second))
	for i := range 10 {
		h.noteRequest(t0.Add(time.Second+time.Duration(i)*400*time.Millisecond), ms(700), &cfg)
	}
	if h.delay != ms(30) {
		t.Fatalf("delay %s after slow answers begun within %s of a failure; want the 30ms of before", h.delay, hedge.Recovery)
	}
	h.noteRequest(t0.Add(time.Second+hedge.Recovery), ms(700), &cfg)
	if h.delay != ms(700) {
		t.Fatalf("delay %s after a slow answer begun %s after the failure; want 700ms", h.delay, hedge.Recovery)
	}
}

func TestWithHedgeDelayIsClamped(t *testing.T) {
	for _, tc := range []struct{ in, timeout, want time.Duration }{
		{0, 0, 0}, // derived
		{-time.Second, 0, 0},
		{time.Microsecond, 0, time.Millisecond},
		{time.Hour, 0, DefaultRequestTimeout / 2},
		{time.Second, 10 * time.Second, time.Second},
	} {
		cfg := config{hedgeDelay: tc.in, requestTimeout: tc.timeout}.withDefaults()
		if cfg.hedgeDelay != tc.want {
			t.Errorf("WithHedgeDelay(%s), request timeout %s: %s, want %s", tc.in, tc.timeout, cfg.hedgeDelay, tc.want)
		}
	}
}

// TestLowWaterMarkCoversTheHedgeDelay: with somewhere to hedge to, the mark leaves room for the hedge
// delay on top of two refill latencies and the scheduling slack; with one URL it does not.
func TestLowWaterMarkCoversTheHedgeDelay(t *testing.T) {
	for _, tc := range []struct {
		paths int
		want  int64
	}{
		{1, 30_000}, // 1 M/s × (2 × 10ms + 10ms)
		{2, 70_000}, // and 40ms of hedge delay
	} {
		c := &Client{size: sizing{rate: 1e6, latency: 10 * time.Millisecond, lastSize: 1000},
			hedge: hedging{paths: tc.paths, delay: 40 * time.Millisecond}}
		c.setLowWaterLocked()
		if c.size.lowWater != tc.want {
			t.Errorf("%d URLs: low-water %d, want %d", tc.paths, c.size.lowWater, tc.want)
		}
	}
}

// TestHedgeAroundAHungURL: one of two URLs starts taking requests and answering none. Every refill
// that goes there is hedged to the other within the hedge delay, so no Next waits anywhere near the
// request timeout; the hung URL is skipped with backoff once a hedge outpaced it; when it answers at
// last, its blocks are spares, kept or dropped, and no ID comes twice.
func TestHedgeAroundAHungURL(t *testing.T) {
	fake := newFake(testNS{Name: "h", BlockSize: 50, MaxBlockSize: 50})
	hung, ok := startHanging(t, fake), startHanging(t, fake)
	var rec hookRecord
	c := newClient(t, HTTP(hung.srv.URL, ok.srv.URL), "h", WithRequestTimeout(time.Minute),
		WithHedgeDelay(10*time.Millisecond), WithBackoff(time.Millisecond, 20*time.Millisecond), WithHooks(rec.hooks()))
	set := newIDSet()
	add := set.adder()
	var n int64
	for ; n < 500; n++ { // warm-up: the settings are read, both URLs answer
		add.add(mustNext(t, c))
	}
	// No request may still be on its way to the URL that hangs: answered late, it would count as the
	// URL's success after a hedge outpaced it.
	eventually(t, "the warm-up's leases answered", func() bool { return c.Stats().InFlight == 0 })
	hung.hang.Store(true)
	won := c.Stats().HedgesWon
	for hung.waiting.Load() < 3 || c.Stats().HedgesWon < won+3 {
		begin := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		id, err := c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Next after %d IDs: %v", n, err)
		}
		if took := time.Since(begin); took > 5*time.Second {
			t.Fatalf("a Next waited %s with a hedge delay of 10ms", took)
		}
		add.add(id)
		n++
	}
	st := c.Stats()
	if st.SlowRefills < st.Hedges || st.Hedges < st.HedgesWon || st.HedgeDelay != 10*time.Millisecond {
		t.Fatalf("slow refills %d, hedges %d, won %d, delay %s", st.SlowRefills, st.Hedges, st.HedgesWon, st.HedgeDelay)
	}
	if st.Endpoints[0].Failures == 0 || !strings.Contains(st.Endpoints[0].LastError, "hedge") {
		t.Fatalf("the hung URL is not backed off after a hedge outpaced it: %+v", st.Endpoints[0])
	}
	held := hung.waiting.Load()
	if held == 0 {
		t.Fatalf("no request waits on the hung URL")
	}

	// The hung URL answers: every request it held brings a block, kept or dropped as a gap.
	before := st
	answered := hung.leases.Load() // before the hang
	hung.answer()
	eventually(t, "the held requests answered", func() bool { return hung.leases.Load() >= answered+int64(held) })
	eventually(t, "their blocks kept or dropped", func() bool {
		st = c.Stats()
		return st.Refills+st.Discarded/50 == ok.leases.Load()+hung.leases.Load()
	})
	if st.Refills+st.Discarded/50 == before.Refills {
		t.Fatalf("no late block arrived")
	}
	for range 10 * 50 { // through the cache, spares included
		add.add(mustNext(t, c))
		n++
	}
	set.check(t, n)
	// The hooks were told of every hedge, win, refill and spare dropped.
	eventually(t, "the hooks told what Stats counts", func() bool { return rec.matches(c.Stats()) })
	if rec.mu.Lock(); rec.hedges == 0 || rec.hedgesWon == 0 {
		t.Fatalf("the hooks saw %d hedges, %d won", rec.hedges, rec.hedgesWon)
	}
	rec.mu.Unlock()
	t.Logf("%d IDs; %d refills, %d slow, %d hedges, %d won, %d IDs dropped; endpoints %+v", n, st.Refills,
		st.SlowRefills, st.Hedges, st.HedgesWon, st.Discarded, st.Endpoints)
}

// TestSpares: the second block of a hedged refill is cached while the cache holds less than refills
// top it up to, dropped (a gap) when it is full, refused when it overlaps one received, and a gap
// after Close.
func TestSpares(t *testing.T) {
	blk := func(start int64) Block {
		return Block{Namespace: "s", Start: start, Step: 1, Size: 100}
	}
	for _, tc := range []struct {
		name                string
		cached, lowWater    int64
		rate                float64
		spare               Block
		closed              bool
		kept, dropped, errs int64
	}{
		{name: "room", cached: 100, lowWater: 50, spare: blk(1000), kept: 100},
		{name: "full: the mark and a block", cached: 150, lowWater: 50, spare: blk(1000), dropped: 100},
		{name: "room for the refill interval's worth", cached: 150, lowWater: 50, rate: 1000, spare: blk(1000), kept: 100},
		{name: "overlap", cached: 100, lowWater: 50, spare: blk(150), errs: 1},
		{name: "closed", cached: 100, lowWater: 50, spare: blk(1000), closed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{cfg: config{clock: newClock()}.withDefaults(), waiters: waiters{avail: make(chan struct{})},
				size: sizing{lowWater: tc.lowWater, lastSize: 100, rate: tc.rate}, life: lifecycle{closed: tc.closed}}
			c.cacheLocked(blk(101), time.Time{}, c.cfg.clock.Now())
			c.ledger.uncarved = tc.cached
			c.spareLocked(tc.spare, time.Time{}, c.cfg.clock.Now(), 0)
			if got := c.ledger.uncarved - tc.cached; got != tc.kept || c.count.discarded != tc.dropped || c.count.refillErrors != tc.errs {
				t.Fatalf("kept %d, dropped %d, errors %d; want %d, %d, %d", got, c.count.discarded, c.count.refillErrors, tc.kept, tc.dropped, tc.errs)
			}
		})
	}
}

// TestOneURLOnlyCountsSlowRefills: with nowhere to hedge to, a refill past the hedge delay is counted
// and nothing else changes: no second lease, and the mark does not cover the delay.
func TestOneURLOnlyCountsSlowRefills(t *testing.T) {
	for name, src := range map[string]func(*fake) Source{
		"FromBackend": func(f *fake) Source { return FromBackend(f) },
		"one URL": func(f *fake) Source {
			_, srv := startContract(t, f, "")
			return HTTP(srv.URL)
		},
	} {
		t.Run(name, func(t *testing.T) {
			fake := newFake(testNS{Name: "one", BlockSize: 100, MaxBlockSize: 100})
			fake.SetDelay(100 * time.Millisecond)
			c := newClient(t, src(fake), "one", WithHedgeDelay(5*time.Millisecond))
			for range 5 * 100 {
				mustNext(t, c)
			}
			eventually(t, "slow refills counted", func() bool { return c.Stats().SlowRefills >= 3 })
			calls := fake.LeaseCalls() // each belongs to a lease that is, a moment later, cached or in flight
			st := c.Stats()
			if st.Hedges != 0 || st.HedgesWon != 0 || calls > st.Refills+int64(st.InFlight) {
				t.Fatalf("slow refills %d, hedges %d, won %d; %d leases for %d refills and %d in flight",
					st.SlowRefills, st.Hedges, st.HedgesWon, calls, st.Refills, st.InFlight)
			}
		})
	}
}

// TestSettledHedgesTakeNoTurn: a hedge that finds its refill settled sends nothing, and leaves the
// round-robin as it was: every URL still gets its share of first requests, however many such hedges
// come between them (once, each took a turn, and with two URLs one of them could get none).
func TestSettledHedgesTakeNoTurn(t *testing.T) {
	fake := newFake(testNS{Name: "r", BlockSize: 10})
	a, b := startHanging(t, fake), startHanging(t, fake)
	cfg := config{}.withDefaults()
	l, err := HTTP(a.srv.URL, b.srv.URL).open("r", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	for range 10 {
		var r route
		if _, err := l.lease(context.Background(), 0, &r, false); err != nil {
			t.Fatal(err)
		}
		r.settled.Store(true)
		if _, err := l.lease(context.Background(), 0, &r, true); !errors.Is(err, errSettled) {
			t.Fatalf("a hedge of a settled refill: %v, want errSettled", err)
		}
	}
	if a.leases.Load() != 5 || b.leases.Load() != 5 {
		t.Fatalf("first requests: %d to one URL, %d to the other; want 5 each", a.leases.Load(), b.leases.Load())
	}
}

// TestLoserDoesNotFailOver: once the other request settled the refill, a request whose URL fails ends
// there instead of leasing another block elsewhere; and a hedge asks the other URL first.
func TestLoserDoesNotFailOver(t *testing.T) {
	fake := newFake(testNS{Name: "l", BlockSize: 10})
	hung, ok := startHanging(t, fake), startHanging(t, fake)
	hung.hang.Store(true)
	cfg := config{requestTimeout: 200 * time.Millisecond}.withDefaults()
	l, err := HTTP(hung.srv.URL, ok.srv.URL).open("l", &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	h := l.(*httpLeaser)
	for {
		var r route
		done := make(chan error, 1)
		go func() {
			_, err := l.lease(context.Background(), 0, &r, false)
			done <- err
		}()
		eventually(t, "the first request sent", func() bool { return r.first.Load() != nil })
		if r.first.Load() != h.eps[0] {
			<-done // round-robin sent it to the URL that answers; the next goes to the hung one
			continue
		}
		okBefore := ok.leases.Load()
		if _, err := l.lease(context.Background(), 0, &r, true); err != nil {
			t.Fatalf("hedge: %v", err)
		}
		if ok.leases.Load() != okBefore+1 {
			t.Fatalf("the hedge did not go to the URL that answers")
		}
		r.settled.Store(true)
		if err := <-done; !errors.Is(err, errSettled) {
			t.Fatalf("the first request after its URL timed out: %v, want errSettled", err)
		}
		if ok.leases.Load() != okBefore+1 {
			t.Fatalf("the first request failed over after the refill was settled")
		}
		return
	}
}

// TestHedgesLeaveNoDuplicate: two URLs, one of which answers some requests late, many goroutines and
// a short hedge delay: many refills are hedged, their spares kept or dropped, and no ID comes twice.
func TestHedgesLeaveNoDuplicate(t *testing.T) {
	fake := newFake(testNS{Name: "d", BlockSize: 100, MaxBlockSize: 2000})
	flaky, ok := startHanging(t, fake), startHanging(t, fake)
	c := newClient(t, HTTP(flaky.srv.URL, ok.srv.URL), "d", WithHedgeDelay(2*time.Millisecond),
		WithRefillInterval(10*time.Millisecond))
	stop := make(chan struct{})
	go func() { // a late answer now and then
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			flaky.slow.Store(int64(time.Duration(rand.IntN(2)) * 15 * time.Millisecond))
		}
	}()
	const goroutines, perG = 8, 50_000
	set := newIDSet()
	err := takeConcurrently(c, set, goroutines, perG)
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	set.check(t, goroutines*perG)
	st := c.Stats()
	if st.Hedges == 0 {
		t.Fatalf("no refill was hedged: %+v", st)
	}
	t.Logf("%d refills, %d hedges, %d won, %d IDs dropped", st.Refills, st.Hedges, st.HedgesWon, st.Discarded)
}
