package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newCache returns a cache on a fake pair with namespace "orders" (block size 10) and the given
// settings; clk may be nil for the real clock.
func newCache(t *testing.T, clk *allocatortest.Clock, ns allocator.Namespace, cfg CacheConfig) (*segmentCache, *allocatortest.Fake) {
	t.Helper()
	now := time.Now
	if clk != nil {
		now = clk.Now
	}
	f := allocatortest.NewFake(allocatortest.Config{Now: now})
	if ns.Name == "" {
		ns.Name = "orders"
	}
	if _, err := f.CreateNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if cfg.HedgeDelay == 0 {
		// These tests count leases and segments: a hedge, which a busy machine would send when a lease
		// of the fake took over 20 ms, would add one. The hedge tests set their own delay.
		cfg.HedgeDelay = -1
	}
	c := newSegmentCache(cfg, f, NewMetrics(), quiet, now)
	t.Cleanup(c.close)
	return c, f
}

// idle waits until the namespace has no backend call in flight.
func idle(t *testing.T, c *segmentCache, name string) {
	t.Helper()
	sp := c.space(name)
	deadline := time.Now().Add(5 * time.Second)
	for sp.busy.Load() {
		if time.Now().After(deadline) {
			t.Fatal("a backend call is still in flight after 5s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestCacheUniqueUnderConcurrency: 64 goroutines lease blocks of mixed sizes, some above the cache;
// no ID is handed out twice and far fewer backend leases than requests are made.
func TestCacheUniqueUnderConcurrency(t *testing.T) {
	c, f := newCache(t, nil, allocator.Namespace{BlockSize: 10, MaxBlockSize: 100_000}, CacheConfig{MinSegment: 1000, MaxSegment: 20_000})
	const goroutines, each = 64, 300
	var mu sync.Mutex
	var blocks []allocator.Block
	cached := 0
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			local := make([]allocator.Block, 0, each)
			n := 0
			for i := 0; i < each; i++ {
				size := int64(1 + r.IntN(40))
				if i%50 == 0 {
					size = 6000 // above a quarter of the largest segment: straight to the backend
				}
				blk, fromCache, err := c.lease(context.Background(), "orders", size, "")
				if err != nil {
					t.Error(err)
					return
				}
				if blk.Size != size {
					t.Errorf("asked %d, got %v", size, blk)
				}
				if fromCache {
					n++
				}
				local = append(local, blk)
			}
			mu.Lock()
			blocks = append(blocks, local...)
			cached += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != goroutines*each {
		t.Fatalf("%d blocks", len(blocks))
	}
	direct := goroutines * each / 50
	if got := len(blocks) - cached; got < direct {
		t.Fatalf("%d blocks from the backend, want at least the %d large ones", got, direct)
	}
	// Every segment lease serves many requests.
	if segs := f.Leases() - int64(len(blocks)-cached); segs <= 0 || segs > int64(cached)/20 {
		t.Fatalf("%d segment leases for %d cached blocks", segs, cached)
	}
	for _, b := range blocks {
		if (b.Server == "a") != (b.Start%2 == 1) {
			t.Fatalf("block %v: parity does not match its server", b)
		}
	}
}

// TestCacheUniqueWithSeveralAhead: while 64 goroutines lease blocks, segments of the largest size are
// leased eight at a time and land in any order; no ID is handed out twice.
func TestCacheUniqueWithSeveralAhead(t *testing.T) {
	c, _ := newCache(t, nil, allocator.Namespace{BlockSize: 10, MaxBlockSize: 100_000}, CacheConfig{MinSegment: 1000, MaxSegment: 1000, MaxAhead: 8})
	ctx := context.Background()
	first, _, err := c.lease(ctx, "orders", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	// As if a segment had been used up at once while a lease took an hour: the depth is MaxAhead.
	sp := c.space("orders")
	sp.mu.Lock()
	sp.retired, sp.lastLifetime, sp.latency = true, 0, time.Hour
	sp.depth = sp.depthLocked(*sp.settings.Load(), 1000)
	sp.hintLocked()
	sp.mu.Unlock()
	const goroutines, each = 64, 300
	var mu sync.Mutex
	blocks := []allocator.Block{first}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 2))
			local := make([]allocator.Block, 0, each)
			for range each {
				size := int64(1 + r.IntN(200))
				blk, _, err := c.lease(ctx, "orders", size, "")
				if err != nil {
					t.Error(err)
					return
				}
				if blk.Size != size {
					t.Errorf("asked %d, got %v", size, blk)
				}
				local = append(local, blk)
			}
			mu.Lock()
			blocks = append(blocks, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != goroutines*each+1 {
		t.Fatalf("%d blocks", len(blocks))
	}
}

// TestCacheOneCallForConcurrentCallers: with the cache empty, 50 callers at once cause one segment
// lease, and all are served from it.
func TestCacheOneCallForConcurrentCallers(t *testing.T) {
	c, f := newCache(t, nil, allocator.Namespace{BlockSize: 10}, CacheConfig{MinSegment: 10_000})
	// Load the settings first, so that only the segment lease is held.
	if _, err := c.space("orders").loadSettings(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	release := f.Hold()
	const callers = 50
	results := make(chan allocator.Block, callers)
	for i := 0; i < callers; i++ {
		go func() {
			blk, _, err := c.lease(context.Background(), "orders", 10, "")
			if err != nil {
				t.Error(err)
			}
			results <- blk
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.LeaseCalls() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // give the others time to (wrongly) call too
	if n := f.LeaseCalls(); n != 1 {
		t.Fatalf("%d backend calls in flight for one namespace, want 1", n)
	}
	release()
	var blocks []allocator.Block
	for i := 0; i < callers; i++ {
		blocks = append(blocks, <-results)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	idle(t, c, "orders")
	if n := f.Leases(); n > 2 { // the segment, and perhaps the prefetch of the next
		t.Fatalf("%d leases", n)
	}
}

// TestCachePrefetchesFromTheOtherServer: the next segment comes from the other server while it is
// healthy, before the current one runs out, and from the same server when the other is down.
func TestCachePrefetchesFromTheOtherServer(t *testing.T) {
	c, f := newCache(t, nil, allocator.Namespace{BlockSize: 10}, CacheConfig{MinSegment: 1000, MaxSegment: 1000, PrefetchAt: 0.5})
	ctx := context.Background()
	take := func(n int) {
		for i := 0; i < n; i++ {
			if _, _, err := c.lease(ctx, "orders", 10, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	take(1)
	idle(t, c, "orders")
	if n := f.Leases(); n != 1 {
		t.Fatalf("%d leases after the first request, want 1 (no prefetch before half is used)", n)
	}
	take(50) // past half of the 100 blocks of the first segment
	idle(t, c, "orders")
	if n := f.Leases(); n != 2 {
		t.Fatalf("%d leases, want the prefetch of the next segment", n)
	}
	prefers := f.Prefers()
	first, second := prefers[0], prefers[1]
	if second == "" || second == first && first != "" {
		t.Fatalf("prefers %q then %q, want the other server", first, second)
	}
	cur := c.space("orders").cur.Load().blk.Server
	sp := c.space("orders")
	sp.mu.Lock()
	next := sp.ahead[0]
	sp.mu.Unlock()
	if next.blk.Server == cur {
		t.Fatalf("next segment from %s, the current one's server", cur)
	}
	// With the other server down, the next segments come from the healthy one.
	other := "a"
	if cur == "a" {
		other = "b"
	}
	f.SetDown(other, "")
	take(200)
	idle(t, c, "orders")
	prefers = f.Prefers()
	last := prefers[len(prefers)-1]
	if last != cur {
		t.Fatalf("with %s down the cache preferred %q", other, last)
	}
}

// TestCacheSegmentSizeAdapts: segments used up quickly double, up to the maximum; segments that last
// long halve, down to the minimum.
func TestCacheSegmentSizeAdapts(t *testing.T) {
	clk := allocatortest.NewClock()
	c, f := newCache(t, clk, allocator.Namespace{BlockSize: 10}, CacheConfig{MinSegment: 1000, MaxSegment: 16_000, Target: 10 * time.Second})
	ctx := context.Background()
	drain := func(ids int64, step time.Duration) {
		for taken := int64(0); taken < ids; taken += 100 {
			if _, _, err := c.lease(ctx, "orders", 100, ""); err != nil {
				t.Fatal(err)
			}
			clk.Advance(step)
			idle(t, c, "orders")
		}
	}
	drain(100_000, 0) // the clock stands still: every segment lasts 0s
	sizes := f.Sizes()
	if sizes[0] != 1000 || sizes[len(sizes)-1] != 16_000 {
		t.Fatalf("segment sizes %v, want 1000 doubling to 16000", sizes)
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i] < sizes[i-1] || sizes[i] > 2*sizes[i-1] {
			t.Fatalf("segment sizes %v do not double step by step", sizes)
		}
	}
	// Now 100 IDs a second: a 16,000 segment lasts 160s, far over twice the target.
	n := len(sizes)
	drain(60_000, time.Second)
	sizes = f.Sizes()[n:]
	if len(sizes) == 0 || sizes[len(sizes)-1] >= 16_000 {
		t.Fatalf("segment sizes at a slow rate %v, want them to shrink", sizes)
	}
	if got := c.space("orders").size.Load(); got < 1000 {
		t.Fatalf("size %d below the minimum", got)
	}
}

// TestCacheLeasesSeveralAheadWhenASegmentDoesNotLastALease: when segments of the largest size are used
// up faster than the backend leases the next, the cache keeps several leased ahead, up to MaxAhead,
// with as many leases in flight, and requests stop waiting; when demand falls, one ahead is enough
// again. A manual clock sets how long segments last and leases take.
func TestCacheLeasesSeveralAheadWhenASegmentDoesNotLastALease(t *testing.T) {
	clk := allocatortest.NewClock()
	c, f := newCache(t, clk, allocator.Namespace{BlockSize: 10}, CacheConfig{MinSegment: 1000, MaxSegment: 1000, MaxAhead: 4})
	ctx := context.Background()
	take := func(n int) {
		t.Helper()
		for range n {
			if _, _, err := c.lease(ctx, "orders", 100, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	view := func() spaceView {
		t.Helper()
		for _, v := range c.views() {
			if v.Namespace == "orders" {
				return v
			}
		}
		t.Fatal("no cache for orders")
		return spaceView{}
	}
	stalls := func() float64 { return counterTotal(t, c.metrics, "ticketd_cache_stalls_total") }
	take(1) // the first segment: no stall, no prefetch could have come before it
	idle(t, c, "orders")

	// The first segment is used up in 10ms, while the lease of the next, started at its threshold,
	// takes 100ms: a request waits for it.
	release := f.Hold()
	take(2)
	clk.Advance(10 * time.Millisecond)
	take(7)
	waited := make(chan error, 1)
	go func() { _, _, err := c.lease(ctx, "orders", 100, ""); waited <- err }()
	deadline := time.Now().Add(5 * time.Second)
	for stalls() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	clk.Advance(90 * time.Millisecond)
	release()
	if err := <-waited; err != nil || stalls() != 1 {
		t.Fatalf("the request that waited: %v; %v stalls, want 1", err, stalls())
	}

	// 100ms leases for segments that last 10ms: at the next threshold four leases start at once.
	release = f.Hold()
	take(1)
	for (view().Fetches != 4 || f.LeaseCalls() != 6) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if v, n := view(), f.LeaseCalls(); v.Fetches != 4 || n != 6 {
		t.Fatalf("%d backend calls in flight, %d lease calls in all: want MaxAhead's 4, and 6", v.Fetches, n)
	}
	release()
	idle(t, c, "orders")
	if v := view(); len(v.Segments) != 5 {
		t.Fatalf("segments %+v: want the current one and 4 ahead", v.Segments)
	}
	// Segment after segment, each used up at once: the cache tops up to four ahead each time, and no
	// request waits.
	for i := range 10 {
		take(10)
		idle(t, c, "orders")
		if n, v := stalls(), view(); n != 1 || len(v.Segments) != 5 {
			t.Fatalf("segment %d: %v stalls (want 1, none since), %d segments (want 5)", i, n, len(v.Segments))
		}
	}

	// Demand falls: a segment lasts seconds, far longer than a lease. Once those ahead are used, one
	// is enough.
	for range 100 {
		clk.Advance(time.Second)
		take(1)
		idle(t, c, "orders")
	}
	if v := view(); len(v.Segments) > 2 || stalls() != 1 {
		t.Fatalf("at a slow rate: %d segments (want the current one and at most one ahead), %v stalls", len(v.Segments), stalls())
	}
}

// TestCacheLargeRequestsGoToTheBackend: a request above a quarter of the largest segment is leased
// for itself, with its exact size.
func TestCacheLargeRequestsGoToTheBackend(t *testing.T) {
	c, f := newCache(t, nil, allocator.Namespace{BlockSize: 10, MaxBlockSize: 1_000_000}, CacheConfig{MinSegment: 1000, MaxSegment: 8000})
	blk, cached, err := c.lease(context.Background(), "orders", 2001, "")
	if err != nil || cached || blk.Size != 2001 {
		t.Fatalf("%v cached=%v %v", blk, cached, err)
	}
	if sizes := f.Sizes(); len(sizes) != 1 || sizes[0] != 2001 {
		t.Fatalf("backend leases %v, want one of 2001", sizes)
	}
}

// TestCacheHonoursTTL: blocks keep their segment's expiry; a segment past half its TTL serves no
// more and is replaced.
func TestCacheHonoursTTL(t *testing.T) {
	clk := allocatortest.NewClock()
	c, f := newCache(t, clk, allocator.Namespace{BlockSize: 10, LeaseTTL: time.Minute}, CacheConfig{MinSegment: 1000, PrefetchAt: 0.9})
	ctx := context.Background()
	first, _, err := c.lease(ctx, "orders", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(time.Minute); !first.ExpiresAt.Equal(want) {
		t.Fatalf("expires %v, want the segment's %v", first.ExpiresAt, want)
	}
	clk.Advance(20 * time.Second)
	second, _, _ := c.lease(ctx, "orders", 10, "")
	if !second.ExpiresAt.Equal(first.ExpiresAt) || f.Leases() != 1 {
		t.Fatalf("a block from the same segment expires %v (first %v); %d leases", second.ExpiresAt, first.ExpiresAt, f.Leases())
	}
	clk.Advance(11 * time.Second) // 31s: past half the TTL
	third, _, err := c.lease(ctx, "orders", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Leases() != 2 || !third.ExpiresAt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("after half the TTL: %d leases, block expires %v", f.Leases(), third.ExpiresAt)
	}
	if third.Server == first.Server && third.Start <= first.Start {
		t.Fatalf("the new segment %v does not follow %v", third, first)
	}
	// A prefetched segment that waits past half its TTL is dropped, not served.
	for i := 0; i < 91; i++ { // past PrefetchAt of the 100 blocks
		if _, _, err := c.lease(ctx, "orders", 10, ""); err != nil {
			t.Fatal(err)
		}
	}
	idle(t, c, "orders")
	sp := c.space("orders")
	sp.mu.Lock()
	ahead := len(sp.ahead)
	sp.mu.Unlock()
	if ahead == 0 {
		t.Fatal("no prefetched segment")
	}
	clk.Advance(40 * time.Second)
	blk, _, err := c.lease(ctx, "orders", 10, "")
	if err != nil || blk.Expired(clk.Now()) || blk.ExpiresAt.Sub(clk.Now()) < 30*time.Second {
		t.Fatalf("block %v (expires %v, now %v): %v", blk, blk.ExpiresAt, clk.Now(), err)
	}
}

// TestCacheKeepsServingWhenAFetchFails: while the backend fails, what is cached is still served;
// once it is used up callers get the backend's error quickly, without a call each; when the backend
// comes back, so does service.
func TestCacheKeepsServingWhenAFetchFails(t *testing.T) {
	c, f := newCache(t, nil, allocator.Namespace{BlockSize: 10}, CacheConfig{MinSegment: 1000, MaxSegment: 1000})
	ctx := context.Background()
	if _, _, err := c.lease(ctx, "orders", 10, ""); err != nil {
		t.Fatal(err)
	}
	idle(t, c, "orders")
	down := fmt.Errorf("%w: both fake servers down", allocator.ErrUnavailable)
	f.SetLeaseErr(down)
	served := 1
	for ; served < 100; served++ {
		if _, _, err := c.lease(ctx, "orders", 10, ""); err != nil {
			t.Fatalf("block %d of the cached segment failed: %v", served, err)
		}
	}
	idle(t, c, "orders")
	calls := f.LeaseCalls()
	for i := 0; i < 200; i++ {
		if _, _, err := c.lease(ctx, "orders", 10, ""); !errors.Is(err, allocator.ErrUnavailable) {
			t.Fatalf("with the cache empty and the backend down: %v", err)
		}
	}
	if extra := f.LeaseCalls() - calls; extra > 20 {
		t.Fatalf("%d backend calls for 200 requests while it was down; want a backoff", extra)
	}
	f.SetLeaseErr(nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, err := c.lease(ctx, "orders", 10, ""); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no service 5s after the backend came back")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCacheOnTheEmbeddedStore runs concurrent leases through the cache on the real embedded store.
func TestCacheOnTheEmbeddedStore(t *testing.T) {
	store := testenv.Embedded(t, allocator.Namespace{Name: "orders", BlockSize: 5})
	ctx := context.Background()
	c := newSegmentCache(CacheConfig{MinSegment: 500}, store, NewMetrics(), quiet, time.Now)
	defer c.close()
	var mu sync.Mutex
	set := allocatortest.NewIDSet(32 * 200 * 5)
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				blk, _, err := c.lease(ctx, "orders", 0, "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for k := int64(0); k < blk.Size; k++ {
					id, _ := blk.ID(k)
					set.Add(id)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(set.Duplicates) != 0 || set.Len() != 32*200*5 {
		t.Fatalf("%d IDs, duplicates %v", set.Len(), set.Duplicates[:min(5, len(set.Duplicates))])
	}
}

func TestCacheClosed(t *testing.T) {
	c, _ := newCache(t, nil, allocator.Namespace{}, CacheConfig{})
	c.close()
	c.close()
	if _, _, err := c.lease(context.Background(), "orders", 1, ""); !errors.Is(err, allocator.ErrClosed) {
		t.Fatalf("lease after close: %v", err)
	}
}

// TestCacheRefusesASegmentStaleOnArrival: a backend whose clock is an hour behind hands out segments
// that expire at once; the cache refuses them with one call instead of leasing in a loop.
func TestCacheRefusesASegmentStaleOnArrival(t *testing.T) {
	clk := allocatortest.NewClock()
	f := allocatortest.NewFake(allocatortest.Config{Now: func() time.Time { return clk.Now().Add(-time.Hour) }})
	if _, err := f.CreateNamespace(context.Background(), allocator.Namespace{Name: "orders", LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	c := newSegmentCache(CacheConfig{}, f, NewMetrics(), quiet, clk.Now)
	defer c.close()
	_, _, err := c.lease(context.Background(), "orders", 10, "")
	if !errors.Is(err, allocator.ErrUnavailable) || f.LeaseCalls() != 1 {
		t.Fatalf("%v after %d backend calls", err, f.LeaseCalls())
	}
}

// TestCacheViewShowsWhenASegmentGoesStale: the status page's view of a segment says when it stops
// serving, half its lease's TTL before the block expires.
func TestCacheViewShowsWhenASegmentGoesStale(t *testing.T) {
	clk := allocatortest.NewClock()
	c, _ := newCache(t, clk, allocator.Namespace{BlockSize: 10, LeaseTTL: time.Minute}, CacheConfig{MinSegment: 1000, PrefetchAt: 0.9})
	blk, _, err := c.lease(context.Background(), "orders", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	views := c.views()
	if len(views) != 1 || len(views[0].Segments) == 0 {
		t.Fatalf("views %+v, want the namespace's segment", views)
	}
	if got, want := views[0].Segments[0].StaleAt, blk.ExpiresAt.Add(-30*time.Second); !got.Equal(want) {
		t.Fatalf("the segment is shown stale from %v, want %v", got, want)
	}
}
