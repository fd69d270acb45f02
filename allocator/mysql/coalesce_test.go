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
	p := openStore(t, dsns[:1], func(c *Config) { c.MaxConns = 1 })
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

// TestCeilingInsideAGroup: when a group's range passes the namespace's ceiling (its max_id, or the end
// of BIGINT), the callers whose leases fit get them, the one the ceiling falls in gets the IDs left
// (a block cut short), the rest ErrExhausted — and no ID above the ceiling, none twice.
func TestCeilingInsideAGroup(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		start, maxID int64
		last         int64 // the highest ID the single server (offset 1, step 2) may issue
	}{
		{name: "max_id", start: 1_000_001, maxID: 1_002_000, last: 1_001_999},
		{name: "end of BIGINT", start: math.MaxInt64 - 2000, last: math.MaxInt64 - 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := openStore(t, testenv.FreshDatabases(t, dsns[:1]), func(c *Config) { c.MaxConns = 1 })
			if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "edge", Start: tc.start - 2, MaxID: tc.maxID}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Lease(ctx, "edge", 1); err != nil { // the connection is up before the leases race
				t.Fatal(err)
			}
			db := p.set.All()[0].db
			before := comCounters(t, db)
			// 1,000 odd IDs are left: three leases of 300 fit, the fourth gets 100, sixteen together do not.
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
			updates := comCounters(t, db)["Com_update"] - before["Com_update"]
			var sizes []int64
			var n int64
			for _, b := range blocks {
				if last, err := b.Last(); err != nil || last < b.Start || last > tc.last {
					t.Fatalf("block %v passes the ceiling %d", b, tc.last)
				}
				sizes = append(sizes, b.Size)
				n += b.Size
			}
			if len(blocks) != 4 || exhausted != 12 || n != 1000 {
				t.Fatalf("blocks of %v (%d IDs) and %d exhausted, want 300, 300, 300, 100 and 12", sizes, n, exhausted)
			}
			if err := allocatortest.CheckDisjoint(blocks); err != nil {
				t.Fatal(err)
			}
			if updates >= 16 {
				t.Fatalf("16 leases took %d UPDATEs: none was grouped", updates)
			}
			t.Logf("16 leases in %d UPDATEs: blocks of %v", updates, sizes)
		})
	}
}
