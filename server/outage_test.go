package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/internal/testenv"
)

// leasesAlone leaves the background checks for later than any test: the servers come back from an
// outage only through leases, so that a lease is what asks a server first.
var leasesAlone = allocator.Failover{ProbeInterval: time.Hour, WatermarkInterval: time.Hour}

// gatedPair opens the harness's MariaDB pair (a fresh database) with the production timeouts (2 s per
// attempt, 5 s per lease), each server behind a gate of its own, and creates namespace ns.
func gatedPair(t *testing.T, ns allocator.Namespace) (allocator.Backend, []*testenv.Gate) {
	t.Helper()
	var gates []*testenv.Gate
	dsns := pairBehind(t, func(_ int, addr string) string {
		g := testenv.StartGate(t, addr)
		gates = append(gates, g)
		return g.Addr()
	})
	mysql.RouteDriverLogs(quiet) // the gates cut connections: the driver's lines about them are noise here
	p, err := mysql.Open(context.Background(), mysql.Config{DSNs: dsns, Names: []string{"a", "b"}, Logger: quiet, Failover: leasesAlone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if _, err := p.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return p, gates
}

// gatedRedis opens two throwaway Redis instances with the production timeouts, each behind a gate of
// its own, and creates namespace ns.
func gatedRedis(t *testing.T, ns allocator.Namespace) (allocator.Backend, []*testenv.Gate) {
	t.Helper()
	gates, addrs := testenv.GatedRedis(t, 2)
	s, err := redis.Open(context.Background(), redis.Config{Addrs: addrs, Logger: quiet, Failover: leasesAlone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return s, gates
}

// outageRun is what drawThroughAnOutage saw.
type outageRun struct {
	longest time.Duration     // the longest request begun after the servers came back
	served  int               // requests served after the servers came back
	blocks  []allocator.Block // every block served
	slow    *testenv.Gate     // the gate asked first after the outage
	lastErr error             // of the last request refused
}

// drawThroughAnOutage leases blocks of size IDs from the cache in workers goroutines, pause apart: a
// second of warm-up; then every gate refuses until no server is in rotation, and 300 ms more; then
// the servers come back, the one asked first holding its first hold connections, or every one with
// hold 0 (see testenv.RecoverSlowFirst), for 3 s. The callers ask throughout: a request refused during
// the outage (or after it, while the cache backs off from its failed leases) is asked again after the
// pause. The servers come back between two backend calls, none in flight.
func drawThroughAnOutage(t *testing.T, c *segmentCache, health allocator.HealthReporter, gates []*testenv.Gate, hold int,
	name string, size int64, workers int, pause time.Duration) outageRun {
	t.Helper()
	var (
		mu       sync.Mutex
		run      outageRun
		back     time.Time // when the servers came back; zero before
		requests sync.RWMutex
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		sp       = c.space(name)
	)
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				requests.RLock()
				begin := time.Now()
				blk, _, err := c.lease(context.Background(), name, size, "")
				took := time.Since(begin)
				requests.RUnlock()
				mu.Lock()
				if err == nil {
					run.blocks = append(run.blocks, blk)
				} else {
					run.lastErr = err
				}
				if !back.IsZero() && begin.After(back) {
					run.longest = max(run.longest, took)
					if err == nil {
						run.served++
					}
				}
				mu.Unlock()
				time.Sleep(pause)
			}
		})
	}
	time.Sleep(time.Second) // warm-up
	for _, g := range gates {
		g.Set(testenv.Refuse)
	}
	deadline := time.Now().Add(10 * time.Second)
	for inRotation(health) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("servers still in rotation 10s into the outage: %+v", health.Health())
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	// Between two backend calls: no request runs, and none of the cache's calls is in flight.
	requests.Lock()
	for sp.busy.Load() {
		time.Sleep(100 * time.Microsecond)
	}
	first := testenv.RecoverSlowFirst(hold, gates...)
	mu.Lock()
	back = time.Now()
	mu.Unlock()
	requests.Unlock()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	for _, g := range gates {
		g.Set(testenv.Pass) // the held connections end: what waits on them ends too
	}
	if run.slow = first(); run.slow == nil {
		t.Fatal("no server was asked after the outage")
	}
	return run
}

func inRotation(h allocator.HealthReporter) (n int) {
	for _, s := range h.Health() {
		if s.Healthy {
			n++
		}
	}
	return n
}

// outageCase is one run of TestCacheAfterAnOutage: the backend, the connections its server asked first
// after the outage holds (0: every one), requests of size IDs from workers goroutines pause apart, the
// cache's HedgeDelay (negative: never) and the check of what the run saw.
type outageCase struct {
	name    string
	open    func(*testing.T, allocator.Namespace) (allocator.Backend, []*testenv.Gate)
	hold    int
	size    int64
	workers int
	pause   time.Duration
	hedge   time.Duration
	check   func(outageRun) error
}

// failoverAlone: the lease that asks the slow server first waits the attempt timeout (2 s), and the
// requests with it.
func failoverAlone(run outageRun) error {
	if run.longest < time.Second {
		return fmt.Errorf("the longest wait after the outage was %s: failover alone should have made one wait about 2s", run.longest)
	}
	return nil
}

// hedgedAfterTheOutage: no request waits for the slow server, and requests are served.
func hedgedAfterTheOutage(run outageRun) error {
	if run.longest >= time.Second {
		return fmt.Errorf("a request begun after the outage waited %s, want under a second: it waited for the slow server", run.longest)
	}
	if run.served == 0 {
		return fmt.Errorf("no request was served in the 3s after the servers came back; the last error: %v", run.lastErr)
	}
	return nil
}

// TestCacheAfterAnOutage: requests lease blocks from a ticketd's segment cache at a steady rate while
// both ticket servers go away (connections refused) until neither is in rotation, then come back; the
// server that a lease asks first after the outage is slow: it takes connections and answers nothing.
// Every lease begun then is begun while no server is known healthy. Segments of 2000 IDs last 50 ms at
// the segment cases' rate; the direct cases' blocks of 1000 are too big for them.
//
// Failover alone, the lease that asks the slow server first waits the backend's attempt timeout (2 s)
// before it tries the other, and the requests wait with it. Hedged, a lease begun while no server is
// known healthy asks one server first and, after the hedge delay (20 ms here: the derived delay has
// tests of its own), the other: no request begun after the outage waits a second. No ID comes twice.
//
// The MariaDB server asked first hangs from then on. The Redis instance asked first answers nothing
// on its first connection only: an instance comes back only once it has read the water marks that its
// peers keep for it, from every peer that answers within the attempt timeout, so while one peer hangs
// the other comes back after that timeout, hedged or not.
func TestCacheAfterAnOutage(t *testing.T) {
	const hedge = 20 * time.Millisecond
	for _, tc := range []outageCase{
		{"MariaDB/segments/failover alone", gatedPair, 0, 10, 4, time.Millisecond, -1, failoverAlone},
		{"MariaDB/segments/hedged", gatedPair, 0, 10, 4, time.Millisecond, hedge, hedgedAfterTheOutage},
		{"MariaDB/direct/hedged", gatedPair, 0, 1000, 2, 5 * time.Millisecond, hedge, hedgedAfterTheOutage},
		{"Redis/segments/failover alone", gatedRedis, 1, 10, 4, time.Millisecond, -1, failoverAlone},
		{"Redis/segments/hedged", gatedRedis, 1, 10, 4, time.Millisecond, hedge, hedgedAfterTheOutage},
		{"Redis/direct/hedged", gatedRedis, 1, 1000, 2, 5 * time.Millisecond, hedge, hedgedAfterTheOutage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := allocator.Namespace{Name: "outage", BlockSize: 10, MaxBlockSize: 2000}
			b, gates := tc.open(t, ns)
			c := newSegmentCache(CacheConfig{MinSegment: 2000, MaxSegment: 2000, HedgeDelay: tc.hedge}, b, NewMetrics(), quiet, time.Now)
			t.Cleanup(c.close)
			run := drawThroughAnOutage(t, c, b.(allocator.HealthReporter), gates, tc.hold, ns.Name, tc.size, tc.workers, tc.pause)
			seen := map[int64]bool{}
			for _, blk := range run.blocks {
				for i := range blk.Size {
					id, _ := blk.ID(i)
					if seen[id] {
						t.Fatalf("ID %d twice", id)
					}
					seen[id] = true
				}
			}
			sent, won := c.space(ns.Name).hedges()
			t.Logf("longest wait after the outage: %s; %d requests served after it; %d hedges sent, %d won; the server behind %s asked first",
				run.longest, run.served, sent, won, run.slow.Addr())
			if err := tc.check(run); err != nil {
				t.Fatal(err)
			}
		})
	}
}
