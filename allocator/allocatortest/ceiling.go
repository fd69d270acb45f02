package allocatortest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ticketd/ticketd/allocator"
)

// ceilingCutsTheLastBlock leases a namespace to its max_id: no ID above it, the last block before it cut
// short, every ID below it issued once, the IDs remaining counted down to none, ErrExhausted after; raised,
// the namespace serves again up to the new ceiling.
func (s *suite) ceilingCutsTheLastBlock(t *testing.T) {
	b := s.fresh(t)
	const maxID = 1050
	got := s.create(t, b, allocator.Namespace{Name: "ceil", BlockSize: 100, MaxID: maxID})
	if got.MaxID != maxID {
		t.Fatalf("created with MaxID %d, want %d", got.MaxID, maxID)
	}
	ns, err := b.Namespace(s.ctx, "ceil")
	if err != nil {
		t.Fatal(err)
	}
	if left, ok := ns.IDsRemaining(); ns.MaxID != maxID || !ok || left != maxID {
		t.Fatalf("a fresh namespace of max_id %d: MaxID %d, %d IDs remaining (%v), want every one", maxID, ns.MaxID, left, ok)
	}
	blocks, err := leaseToEnd(s.ctx, b, "ceil", 100)
	if !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("leasing to the ceiling ended with %v, want ErrExhausted", err)
	}
	short := 0
	for _, blk := range blocks {
		if blk.Size < 100 {
			short++
		}
	}
	if short == 0 {
		t.Fatalf("no block before the ceiling was cut short: %v", blocks)
	}
	checkBelow(t, blocks, 1, maxID)
	if _, err := b.Lease(s.ctx, "ceil", 1); !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("a lease past the ceiling: %v, want ErrExhausted", err)
	}
	ns, err = b.Namespace(s.ctx, "ceil")
	if err != nil {
		t.Fatal(err)
	}
	if left, ok := ns.IDsRemaining(); !ok || left != 0 {
		t.Fatalf("after the ceiling: %d IDs remaining (%v), want 0", left, ok)
	}
	// Raised, the namespace serves again, above what it issued.
	if _, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "ceil", BlockSize: 100, MaxID: 2 * maxID}); err != nil {
		t.Fatal(err)
	}
	more, err := leaseToEnd(s.ctx, b, "ceil", 100)
	if !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("leasing to the raised ceiling ended with %v, want ErrExhausted", err)
	}
	checkBelow(t, append(blocks, more...), 1, 2*maxID)
}

// ceilingUnderConcurrentLeases leases a namespace to its max_id from many goroutines through one backend or
// two (opts.Another), whose concurrent leases the backends group: every ID of the range once, none above it.
func (s *suite) ceilingUnderConcurrentLeases(t *testing.T) {
	b := s.fresh(t)
	const start, maxID = 1000, 60_000
	s.create(t, b, allocator.Namespace{Name: "ceil", Start: start, MaxID: maxID})
	backends := []allocator.Backend{b}
	if s.opts.Another != nil {
		other := s.opts.Another(t)
		t.Cleanup(func() { _ = other.Close() })
		backends = append(backends, other)
	}
	var (
		mu     sync.Mutex
		blocks []allocator.Block
		wg     sync.WaitGroup
		errs   = make(chan error, s.opts.Goroutines)
	)
	for g := range s.opts.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			be := backends[g%len(backends)]
			var local []allocator.Block
			for i := 0; ; i++ {
				blk, err := be.Lease(s.ctx, "ceil", int64(1+(g*7+i*13)%300))
				if errors.Is(err, allocator.ErrExhausted) {
					break
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d lease %d: %w", g, i, err)
					return
				}
				local = append(local, blk)
			}
			mu.Lock()
			blocks = append(blocks, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkBelow(t, blocks, start, maxID)
	t.Logf("%d blocks by %d goroutines through %d backends, every ID of [%d, %d] once", len(blocks), s.opts.Goroutines, len(backends), start, maxID)
}

// ceilingLoweredDownToTheHighestIssued lowers a namespace's max_id: below the highest ID issued it is
// refused, naming that ID; at it, the namespace serves every ID left below it and then ErrExhausted.
func (s *suite) ceilingLoweredDownToTheHighestIssued(t *testing.T) {
	b := s.fresh(t)
	s.create(t, b, allocator.Namespace{Name: "low", BlockSize: 100})
	var blocks []allocator.Block
	var highest int64
	for range 3 {
		blk, err := b.Lease(s.ctx, "low", 100)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := blk.Last()
		highest = max(highest, last)
		blocks = append(blocks, blk)
	}
	_, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "low", BlockSize: 100, MaxID: highest - 1})
	if !errors.Is(err, allocator.ErrInvalidSettings) || !strings.Contains(err.Error(), strconv.FormatInt(highest, 10)) {
		t.Fatalf("max_id below the highest ID issued (%d): %v, want ErrInvalidSettings naming it", highest, err)
	}
	if ns, err := b.Namespace(s.ctx, "low"); err != nil || ns.MaxID != allocator.DefaultMaxID {
		t.Fatalf("a refused max_id changed the namespace: %+v, %v", ns, err)
	}
	up, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "low", BlockSize: 100, MaxID: highest})
	if err != nil || up.MaxID != highest {
		t.Fatalf("max_id at the highest ID issued: %+v, %v", up, err)
	}
	more, err := leaseToEnd(s.ctx, b, "low", 100)
	if !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("leasing below the lowered ceiling ended with %v, want ErrExhausted", err)
	}
	checkBelow(t, append(blocks, more...), 1, highest)
}

// leaseToEnd leases blocks of size until a lease fails, and returns the blocks and that error.
func leaseToEnd(ctx context.Context, b allocator.Backend, namespace string, size int64) ([]allocator.Block, error) {
	var blocks []allocator.Block
	for i := 0; i < 1_000_000; i++ {
		blk, err := b.Lease(ctx, namespace, size)
		if err != nil {
			return blocks, err
		}
		blocks = append(blocks, blk)
	}
	return blocks, errors.New("a million leases and no end")
}

// checkBelow fails unless the blocks are disjoint, well formed, and hold every ID of [lo, hi] and no
// other: nothing above the ceiling, nothing below it left unissued.
func checkBelow(t testing.TB, blocks []allocator.Block, lo, hi int64) {
	t.Helper()
	if err := CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, blk := range blocks {
		last, err := blk.Last()
		if err != nil || blk.Start < lo || last > hi {
			t.Fatalf("block %v (%v) leaves [%d, %d]", blk, err, lo, hi)
		}
		n += blk.Size
	}
	if n != hi-lo+1 {
		t.Fatalf("%d IDs issued in [%d, %d], want all %d of them", n, lo, hi, hi-lo+1)
	}
}
