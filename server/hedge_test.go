package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/hedge"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// proxiedPair opens the harness's MariaDB pair (a fresh database) with the production defaults (2 s
// per attempt, 5 s per lease), each server reached through a toxiproxy of its own, and creates
// namespace ns. hang(i) makes server i's proxy take connections and requests and answer nothing.
func proxiedPair(t *testing.T, ns allocator.Namespace) (p *mysql.Store, hang func(i int)) {
	t.Helper()
	toxi := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	var proxies []*toxiproxy.Proxy
	dsns := pairBehind(t, func(i int, addr string) string {
		port, err := testservers.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		proxy := toxiproxy.NewProxy(toxi, fmt.Sprintf("server-%d", i), fmt.Sprintf("127.0.0.1:%d", port), addr)
		if err := proxy.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proxy.Stop)
		proxies = append(proxies, proxy)
		return proxy.Listen
	})
	p, err := mysql.Open(context.Background(), mysql.Config{DSNs: dsns, Names: []string{"a", "b"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if _, err := p.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return p, func(i int) {
		js := `{"name":"hang","type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`
		if _, err := proxies[i].Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			t.Fatal(err)
		}
	}
}

// pairBehind creates a fresh database on each server of the harness's pair, with ticketd's schema, and
// returns DSNs that reach server i at the address front(i, addr) returns for its own address.
func pairBehind(t *testing.T, front func(i int, addr string) string) []string {
	t.Helper()
	dsns := testenv.Pair(t)
	for i, dsn := range dsns {
		if _, err := mysql.MigrateDSN(context.Background(), dsn); err != nil {
			t.Fatal(err)
		}
		mc, err := gomysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		mc.Addr = front(i, mc.Addr)
		dsns[i] = mc.FormatDSN()
	}
	return dsns
}

// hangCase is one run of a hang test: the cache's HedgeDelay (0: derived, negative: never) and the
// check of the longest wait after the warm-up.
type hangCase struct {
	name    string
	hedge   time.Duration
	longest func(time.Duration) error
}

// hangCases: failing over alone, one request waits about the pair's attempt timeout (2 s); hedged
// after hedge, none waits for the hung server: every wait stays under half that timeout. What is
// tested is the mechanism, not the machine's speed: on a quiet machine the hedged waits are tens of
// milliseconds (the chaos run measures them), on a loaded one a little more, and the line between
// the two cases is the attempt timeout a request would otherwise wait out.
func hangCases(hedge time.Duration) []hangCase {
	return []hangCase{
		{"failover alone", -1, func(d time.Duration) error {
			if d < time.Second {
				return fmt.Errorf("the longest wait was %s: failover alone should have made one wait about 2s", d)
			}
			return nil
		}},
		{"hedged", hedge, func(d time.Duration) error {
			if d >= time.Second {
				return fmt.Errorf("a request waited %s, want under a second: it waited for the hung server", d)
			}
			return nil
		}},
	}
}

// drawWhileAHangs leases blocks of size IDs from the cache in workers goroutines, pause apart: a
// second of warm-up, 300 ms more, then server a stops answering for 3 s. check, when set, vets where
// each block came from. It returns the longest wait after the warm-up and the blocks drawn.
func drawWhileAHangs(t *testing.T, c *segmentCache, hang func(int), name string, size int64, workers int,
	pause time.Duration, check func(cached bool) error) (time.Duration, []allocator.Block) {
	t.Helper()
	var (
		mu      sync.Mutex
		longest time.Duration
		blocks  []allocator.Block
		measure = make(chan struct{})
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			var mine time.Duration
			var got []allocator.Block
			defer func() {
				mu.Lock()
				longest = max(longest, mine)
				blocks = append(blocks, got...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				begin := time.Now()
				blk, cached, err := c.lease(context.Background(), name, size, "")
				if err == nil && check != nil {
					err = check(cached)
				}
				if err != nil {
					errs <- err
					return
				}
				got = append(got, blk)
				select {
				case <-measure:
					mine = max(mine, time.Since(begin))
				default:
				}
				time.Sleep(pause)
			}
		})
	}
	time.Sleep(time.Second) // warm-up
	close(measure)
	time.Sleep(300 * time.Millisecond)
	hang(0)
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return longest, blocks
}

// TestCacheWhileATicketServerHangs: requests lease small blocks from a ticketd's segment cache at a
// steady rate; its segments last 50 ms, so the cache fetches one about every 50 ms from the pair, from
// the two servers in turn. Mid-run server a stops answering (connections accepted, nothing replied).
//
// Failover alone bounds the wait at the pair's attempt timeout (2 s by default): the fetch that meets
// the hung server waits that long before it tries b, the segments cached run out long before, and the
// requests wait with it. Hedged, a fetch not answered within the hedge delay sends a second lease to
// the other server, and no request waits for the hung one.
func TestCacheWhileATicketServerHangs(t *testing.T) {
	for _, tc := range hangCases(0) {
		t.Run(tc.name, func(t *testing.T) {
			ns := allocator.Namespace{Name: "hang", BlockSize: 10, MaxBlockSize: 2000}
			p, hang := proxiedPair(t, ns)
			c := newSegmentCache(CacheConfig{MinSegment: 2000, MaxSegment: 2000, HedgeDelay: tc.hedge}, p, NewMetrics(), quiet, time.Now)
			t.Cleanup(c.close)
			// 4 × 10 IDs a millisecond: a segment of 2000 lasts 50 ms.
			longest, _ := drawWhileAHangs(t, c, hang, "hang", 10, 4, time.Millisecond, nil)
			sent, won := c.space("hang").hedges()
			t.Logf("longest wait after the warm-up: %s; %d hedges sent, %d won", longest, sent, won)
			if err := tc.longest(longest); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCacheDirectLeasesWhileATicketServerHangs: requests too big for the segments (1000 IDs, segments
// of at most 2000) lease straight from the pair. Mid-run server a stops answering. Failover alone makes
// the lease that meets a wait the pair's attempt timeout (2 s); hedged, one not answered within the
// hedge delay (20 ms here: the derived delay has tests of its own) sends a second lease to b, and no
// request waits for a. No ID comes twice.
func TestCacheDirectLeasesWhileATicketServerHangs(t *testing.T) {
	for _, tc := range hangCases(20 * time.Millisecond) {
		t.Run(tc.name, func(t *testing.T) {
			ns := allocator.Namespace{Name: "direct", BlockSize: 10, MaxBlockSize: 2000}
			p, hang := proxiedPair(t, ns)
			c := newSegmentCache(CacheConfig{MinSegment: 2000, MaxSegment: 2000, HedgeDelay: tc.hedge}, p, NewMetrics(), quiet, time.Now)
			t.Cleanup(c.close)
			longest, blocks := drawWhileAHangs(t, c, hang, "direct", 1000, 2, 5*time.Millisecond, func(cached bool) error {
				if cached {
					return fmt.Errorf("a block of 1000 came from a segment of at most 2000")
				}
				return nil
			})
			seen := map[int64]bool{}
			for _, blk := range blocks {
				for i := range blk.Size {
					id, _ := blk.ID(i)
					if seen[id] {
						t.Fatalf("ID %d twice", id)
					}
					seen[id] = true
				}
			}
			sent, won := c.space("direct").hedges()
			t.Logf("longest wait after the warm-up: %s; %d blocks, %d hedges sent, %d won", longest, len(blocks), sent, won)
			if err := tc.longest(longest); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCacheHedgesAroundAHungServer: on the fake pair, segment leases that prefer server a stop being
// answered. Each is hedged to b after the hedge delay, so no request waits for a (the fetch timeout is
// 30 s); when a answers at last, its segments are served after the others, and no ID comes twice.
func TestCacheHedgesAroundAHungServer(t *testing.T) {
	c, f := newCache(t, nil, allocator.Namespace{BlockSize: 10, MaxBlockSize: 1000},
		CacheConfig{MinSegment: 1000, MaxSegment: 1000, HedgeDelay: 10 * time.Millisecond})
	ctx := context.Background()
	seen := map[int64]bool{}
	take := func(n int) (longest time.Duration) {
		t.Helper()
		for range n {
			begin := time.Now()
			blk, _, err := c.lease(ctx, "orders", 10, "")
			if err != nil {
				t.Fatal(err)
			}
			longest = max(longest, time.Since(begin))
			for i := range blk.Size {
				id, _ := blk.ID(i)
				if seen[id] {
					t.Fatalf("ID %d twice", id)
				}
				seen[id] = true
			}
		}
		return longest
	}
	take(300) // three segments, from a and b in turn
	release := f.Hang("a")
	defer release()
	if longest := take(2000); longest > 5*time.Second {
		t.Fatalf("a request waited %s with a hedge delay of 10ms", longest)
	}
	sp := c.space("orders")
	sent, won := sp.hedges()
	if sent == 0 || won == 0 {
		t.Fatalf("%d hedges sent, %d won: the hung server was not hedged around", sent, won)
	}
	before := f.Leases()
	release() // the held leases answer: their segments are spares, served in turn
	idle(t, c, "orders")
	if f.Leases() == before {
		t.Fatalf("no held lease answered")
	}
	take(int(f.Leases()) * 100) // every segment leased, spares included, and more
	t.Logf("%d hedges sent, %d won; %d segments leased; %d IDs", sent, won, f.Leases(), len(seen))
}

// TestCacheHedgeDelayAfterAFailure: a segment lease begun within hedge.Recovery of a failed one waits
// for what recovers, not for a slow path: its latency leaves the hedge delay as it was. One begun after
// it counts.
func TestCacheHedgeDelayAfterAFailure(t *testing.T) {
	clk := allocatortest.NewClock()
	c, f := newCache(t, clk, allocator.Namespace{BlockSize: 10, MaxBlockSize: 1000},
		CacheConfig{MinSegment: 1000, MaxSegment: 1000})
	ctx := context.Background()
	sp := c.space("orders")
	take := func() {
		t.Helper()
		if _, _, err := c.lease(ctx, "orders", 10, ""); err != nil {
			t.Fatal(err)
		}
	}
	// nextLease takes blocks until a segment lease starts, and makes it take slow on the cache's clock.
	nextLease := func(slow time.Duration) {
		t.Helper()
		release := f.Hold()
		before := f.LeaseCalls()
		for i := 0; f.LeaseCalls() == before; i++ {
			if i == 200 {
				t.Fatal("no segment lease started")
			}
			take()
			eventuallyOrIdle(sp, func() bool { return f.LeaseCalls() > before })
		}
		clk.Advance(slow)
		release()
		idle(t, c, "orders")
	}
	delay := func() time.Duration {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		return sp.hedgeDelayLocked()
	}

	take() // the first segment, answered at once
	idle(t, c, "orders")
	f.SetLeaseErr(errors.New("connection refused"))
	for range 30 { // past the prefetch threshold: the next lease fails
		take()
	}
	idle(t, c, "orders")
	f.SetLeaseErr(nil)
	clk.Advance(2 * time.Second) // past the backoff, within hedge.Recovery of the failure
	nextLease(700 * time.Millisecond)
	if d := delay(); d != hedgeFloor {
		t.Fatalf("hedge delay %s after a 700ms lease begun 2s after a failure; want the floor, %s", d, hedgeFloor)
	}
	clk.Advance(hedge.Recovery)
	nextLease(700 * time.Millisecond)
	if d := delay(); d != 700*time.Millisecond {
		t.Fatalf("hedge delay %s after a 700ms lease begun %s after the failure; want 700ms", d, hedge.Recovery+2*time.Second)
	}
}

// eventuallyOrIdle waits a little for cond while the space has a backend call in flight.
func eventuallyOrIdle(sp *space, cond func() bool) {
	for deadline := time.Now().Add(time.Second); !cond() && sp.busy.Load() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
}
