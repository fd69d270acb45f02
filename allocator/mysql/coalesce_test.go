package mysql

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestConcurrentLeasesShareUpdates: 64 goroutines leasing from one server take far fewer UPDATEs than
// leases (the server's Com_update says so), and every block is still disjoint from every other.
func TestConcurrentLeasesShareUpdates(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	p := openPair(t, dsns[:1], func(c *Config) { c.MaxConns = 1 })
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "grouped"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lease(ctx, "grouped", 1); err != nil {
		t.Fatal(err)
	}
	db := p.set.All()[0].db
	before := comCounters(t, db)
	const goroutines, each = 64, 20
	var mu sync.Mutex
	var blocks []allocator.Block
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				b, err := p.Lease(ctx, "grouped", int64(1+(g+i)%7))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				blocks = append(blocks, b)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := comCounters(t, db)
	updates := after["Com_update"] - before["Com_update"]
	if len(blocks) != goroutines*each {
		t.Fatalf("%d blocks", len(blocks))
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	if updates >= goroutines*each || updates < 1 {
		t.Fatalf("%d leases took %d UPDATEs: concurrent leases did not share any", goroutines*each, updates)
	}
	t.Logf("%d leases in %d UPDATEs", goroutines*each, updates)
}

// TestGroupThatDoesNotFitIsLeasedOneByOne: near MaxInt64 a group's total may not fit where its members
// do; each caller then gets its own lease or ErrExhausted, never a wrapped block.
func TestGroupThatDoesNotFitIsLeasedOneByOne(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	p := openPair(t, dsns[:1], func(c *Config) { c.MaxConns = 1 })
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "edge", Start: math.MaxInt64 - 2000}); err != nil {
		t.Fatal(err)
	}
	// About 1,000 odd IDs are left: three leases of 300 fit, sixteen together do not.
	var mu sync.Mutex
	var blocks []allocator.Block
	var exhausted int
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.Lease(ctx, "edge", 300)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				blocks = append(blocks, b)
			case errors.Is(err, allocator.ErrExhausted):
				exhausted++
			default:
				t.Errorf("lease: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(blocks) != 3 || exhausted != 13 {
		t.Fatalf("%d leases and %d exhausted, want 3 and 13", len(blocks), exhausted)
	}
	for _, b := range blocks {
		if last, err := b.Last(); err != nil || last < b.Start {
			t.Fatalf("wrapped block %v", b)
		}
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
}
