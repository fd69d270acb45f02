package embedded

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// TestConcurrentLeasesShareCommits: leases that arrive while one commits are written together, every
// block distinct; a lone lease commits at once, alone.
func TestConcurrentLeasesShareCommits(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	before := s.commits.written.Load()
	if _, err := s.Lease(ctx, "orders", 10); err != nil || s.commits.written.Load() != before+1 {
		t.Fatalf("a lone lease: %v, %d commits", err, s.commits.written.Load()-before)
	}
	const goroutines, each = 32, 40
	before = s.commits.written.Load()
	var mu sync.Mutex
	var blocks []allocator.Block
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				b, err := s.Lease(ctx, "orders", 7)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				blocks = append(blocks, b)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	n := s.commits.written.Load() - before
	if len(blocks) != goroutines*each || n >= int64(len(blocks))/2 {
		t.Fatalf("%d leases took %d commits; want them grouped (fewer than half as many)", len(blocks), n)
	}
	t.Logf("%d leases in %d commits", len(blocks), n)
}

// TestOneRequestErrorLeavesItsGroupAlone: a group with a missing namespace, a size above the maximum and
// valid leases writes the valid ones and answers the others with their own errors.
func TestOneRequestErrorLeavesItsGroupAlone(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100}); err != nil {
		t.Fatal(err)
	}
	group := []*leaseCall{
		{req: leaseRequest{"orders", 10}, done: make(chan struct{})},
		{req: leaseRequest{"nosuch", 10}, done: make(chan struct{})},
		{req: leaseRequest{"orders", 101}, done: make(chan struct{})},
		{req: leaseRequest{"orders", 5}, done: make(chan struct{})},
	}
	s.commit(group)
	if group[0].err != nil || group[0].blk.Start != 1 || group[3].err != nil || group[3].blk.Start != 11 {
		t.Fatalf("valid leases: %+v %v, %+v %v", group[0].blk, group[0].err, group[3].blk, group[3].err)
	}
	if !errors.Is(group[1].err, allocator.ErrNotFound) || !errors.Is(group[2].err, allocator.ErrInvalidSize) {
		t.Fatalf("refused leases: %v, %v", group[1].err, group[2].err)
	}
	if b, err := s.Lease(ctx, "orders", 1); err != nil || b.Start != 16 {
		t.Fatalf("next lease %v, %v; want 16: the refused ones moved nothing", b, err)
	}
}

// TestCeilingInsideACommitGroup: 16 leases of 300 race for the last 1,000 IDs below max_id: three get
// 300, one gets the 100 left, twelve ErrExhausted, whether they share commits or not; none above max_id.
func TestCeilingInsideACommitGroup(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "edge", Start: 1_000_000, MaxID: 1_001_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(ctx, "edge", 1); err != nil {
		t.Fatal(err)
	}
	before := s.commits.written.Load()
	var mu sync.Mutex
	var blocks []allocator.Block
	var sizes []int64
	exhausted := 0
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			b, err := s.Lease(ctx, "edge", 300)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				blocks, sizes = append(blocks, b), append(sizes, b.Size)
			case errors.Is(err, allocator.ErrExhausted):
				exhausted++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var n int64
	for _, b := range blocks {
		if last, _ := b.Last(); last > 1_001_000 {
			t.Fatalf("block %v passes max_id", b)
		}
		n += b.Size
	}
	if len(blocks) != 4 || exhausted != 12 || n != 1000 {
		t.Fatalf("blocks of %v and %d exhausted, want 300, 300, 300, 100 and 12", sizes, exhausted)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	commits := s.commits.written.Load() - before
	if commits >= 16 {
		t.Fatalf("16 leases took %d commits: none was grouped", commits)
	}
	t.Logf("16 leases in %d commits: blocks of %v", commits, sizes)
}
