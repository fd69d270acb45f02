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

// runCeiling checks a namespace's max_id: no ID above it on any server, the last block before it cut
// short, every ID below it issued once when leased to the end (alone, and by many goroutines through
// one or two backends, whose concurrent leases the backends group), ErrExhausted after, the ceiling
// lowered only down to the highest ID issued, and the headroom each server's counter gives.
func runCeiling(t *testing.T, fresh func(*testing.T) allocator.Backend,
	create func(*testing.T, allocator.Backend, allocator.Namespace) allocator.Namespace, opts Options) {
	ctx := context.Background()

	t.Run("CeilingCutsTheLastBlock", func(t *testing.T) {
		b := fresh(t)
		const maxID = 1050
		got := create(t, b, allocator.Namespace{Name: "ceil", BlockSize: 100, MaxID: maxID})
		if got.MaxID != maxID {
			t.Fatalf("created with MaxID %d, want %d", got.MaxID, maxID)
		}
		ns, err := b.Namespace(ctx, "ceil")
		if err != nil {
			t.Fatal(err)
		}
		if left, ok := ns.IDsRemaining(); ns.MaxID != maxID || !ok || left != maxID {
			t.Fatalf("a fresh namespace of max_id %d: MaxID %d, %d IDs remaining (%v), want every one", maxID, ns.MaxID, left, ok)
		}
		blocks, err := leaseToEnd(ctx, b, "ceil", 100)
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
		if _, err := b.Lease(ctx, "ceil", 1); !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("a lease past the ceiling: %v, want ErrExhausted", err)
		}
		ns, err = b.Namespace(ctx, "ceil")
		if err != nil {
			t.Fatal(err)
		}
		if left, ok := ns.IDsRemaining(); !ok || left != 0 {
			t.Fatalf("after the ceiling: %d IDs remaining (%v), want 0", left, ok)
		}
		// Raised, the namespace serves again, above what it issued.
		if _, err := b.UpdateNamespace(ctx, allocator.Namespace{Name: "ceil", BlockSize: 100, MaxID: 2 * maxID}); err != nil {
			t.Fatal(err)
		}
		more, err := leaseToEnd(ctx, b, "ceil", 100)
		if !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("leasing to the raised ceiling ended with %v, want ErrExhausted", err)
		}
		checkBelow(t, append(blocks, more...), 1, 2*maxID)
	})

	t.Run("CeilingUnderConcurrentLeases", func(t *testing.T) {
		b := fresh(t)
		const start, maxID = 1000, 60_000
		create(t, b, allocator.Namespace{Name: "ceil", Start: start, MaxID: maxID})
		backends := []allocator.Backend{b}
		if opts.Another != nil {
			other := opts.Another(t)
			t.Cleanup(func() { _ = other.Close() })
			backends = append(backends, other)
		}
		var (
			mu     sync.Mutex
			blocks []allocator.Block
			wg     sync.WaitGroup
			errs   = make(chan error, opts.Goroutines)
		)
		for g := range opts.Goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				be := backends[g%len(backends)]
				var local []allocator.Block
				for i := 0; ; i++ {
					blk, err := be.Lease(ctx, "ceil", int64(1+(g*7+i*13)%300))
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
		t.Logf("%d blocks by %d goroutines through %d backends, every ID of [%d, %d] once", len(blocks), opts.Goroutines, len(backends), start, maxID)
	})

	t.Run("CeilingLoweredDownToTheHighestIssued", func(t *testing.T) {
		b := fresh(t)
		create(t, b, allocator.Namespace{Name: "low", BlockSize: 100})
		var blocks []allocator.Block
		var highest int64
		for range 3 {
			blk, err := b.Lease(ctx, "low", 100)
			if err != nil {
				t.Fatal(err)
			}
			last, _ := blk.Last()
			highest = max(highest, last)
			blocks = append(blocks, blk)
		}
		_, err := b.UpdateNamespace(ctx, allocator.Namespace{Name: "low", BlockSize: 100, MaxID: highest - 1})
		if !errors.Is(err, allocator.ErrInvalidSettings) || !strings.Contains(err.Error(), strconv.FormatInt(highest, 10)) {
			t.Fatalf("max_id below the highest ID issued (%d): %v, want ErrInvalidSettings naming it", highest, err)
		}
		if ns, err := b.Namespace(ctx, "low"); err != nil || ns.MaxID != allocator.DefaultMaxID {
			t.Fatalf("a refused max_id changed the namespace: %+v, %v", ns, err)
		}
		up, err := b.UpdateNamespace(ctx, allocator.Namespace{Name: "low", BlockSize: 100, MaxID: highest})
		if err != nil || up.MaxID != highest {
			t.Fatalf("max_id at the highest ID issued: %+v, %v", up, err)
		}
		more, err := leaseToEnd(ctx, b, "low", 100)
		if !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("leasing below the lowered ceiling ended with %v, want ErrExhausted", err)
		}
		checkBelow(t, append(blocks, more...), 1, highest)
	})
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
