package allocatortest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Options tunes the conformance suite to a backend's speed.
type Options struct {
	// Goroutines lease concurrently in the uniqueness test. Default 64.
	Goroutines int
	// LeasesPerGoroutine is how many leases each goroutine takes. Default 50.
	LeasesPerGoroutine int
	// Another, when set, opens a second backend on the ticket servers that open gave last, as another
	// ticketd process would: the ceiling tests lease through both at once.
	Another func(t *testing.T) allocator.Backend
}

// Run runs the conformance suite, each property a subtest of its name. open must return a fresh,
// empty backend for each call; the suite closes it.
func Run(t *testing.T, open func(t *testing.T) allocator.Backend, opts Options) {
	if opts.Goroutines == 0 {
		opts.Goroutines = 64
	}
	if opts.LeasesPerGoroutine == 0 {
		opts.LeasesPerGoroutine = 50
	}
	s := &suite{open: open, opts: opts, ctx: context.Background()}
	t.Run("CeilingCutsTheLastBlock", s.ceilingCutsTheLastBlock)
	t.Run("CeilingUnderConcurrentLeases", s.ceilingUnderConcurrentLeases)
	t.Run("CeilingLoweredDownToTheHighestIssued", s.ceilingLoweredDownToTheHighestIssued)
	t.Run("NamespaceLifecycle", s.namespaceLifecycle)
	t.Run("UpdateStartOnlyMovesForward", s.updateStartOnlyMovesForward)
	t.Run("Sizes", s.sizes)
	t.Run("InvalidNames", s.invalidNames)
	t.Run("InvalidSettings", s.invalidSettings)
	t.Run("NotFound", s.notFound)
	t.Run("Exhausted", s.exhausted)
	t.Run("ConcurrentLeasesAreDisjoint", s.concurrentLeasesAreDisjoint)
	t.Run("CloseTwice", s.closeTwice)
	t.Run("ContextCancelled", s.contextCancelled)
}

// suite is what every property of the conformance suite is run with.
type suite struct {
	open func(t *testing.T) allocator.Backend
	opts Options
	ctx  context.Context
}

// fresh opens a backend that t closes.
func (s *suite) fresh(t *testing.T) allocator.Backend {
	b := s.open(t)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// create creates ns on b, failing t on an error.
func (s *suite) create(t *testing.T, b allocator.Backend, ns allocator.Namespace) allocator.Namespace {
	t.Helper()
	got, err := b.CreateNamespace(s.ctx, ns)
	if err != nil {
		t.Fatalf("CreateNamespace(%q): %v", ns.Name, err)
	}
	return got
}

// namespaceLifecycle creates a namespace with every setting and one with the defaults, refuses a second
// create, lists them sorted, updates one, and leases at its new block size and TTL above its start.
func (s *suite) namespaceLifecycle(t *testing.T) {
	b := s.fresh(t)
	got := s.create(t, b, allocator.Namespace{Name: "orders", BlockSize: 50, MaxBlockSize: 5000, LeaseTTL: time.Minute, Start: 1000})
	if got.Name != "orders" || got.BlockSize != 50 || got.MaxBlockSize != 5000 || got.LeaseTTL != time.Minute || got.Start != 1000 {
		t.Fatalf("created %+v", got)
	}
	if _, err := b.CreateNamespace(s.ctx, allocator.Namespace{Name: "orders"}); !errors.Is(err, allocator.ErrExists) {
		t.Fatalf("second create: err = %v, want ErrExists", err)
	}
	s.create(t, b, allocator.Namespace{Name: "links"})
	ns, err := b.Namespace(s.ctx, "links")
	if err != nil {
		t.Fatal(err)
	}
	if ns.BlockSize != allocator.DefaultBlockSize || ns.MaxBlockSize != allocator.DefaultMaxBlockSize || ns.LeaseTTL != 0 || ns.Start != 1 ||
		ns.MaxID != allocator.DefaultMaxID {
		t.Fatalf("defaults not applied: %+v", ns)
	}
	if len(ns.Servers) == 0 {
		t.Fatalf("Namespace shows no ticket server")
	}
	for _, s := range ns.Servers {
		if s.Healthy && (s.Next < 1 || s.Step < 1) {
			t.Fatalf("server state %+v", s)
		}
	}
	list, err := b.Namespaces(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "links" || list[1].Name != "orders" {
		t.Fatalf("Namespaces = %+v, want links and orders sorted", list)
	}
	up, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "orders", BlockSize: 70, MaxBlockSize: 7000, LeaseTTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if up.BlockSize != 70 || up.MaxBlockSize != 7000 || up.LeaseTTL != 2*time.Minute {
		t.Fatalf("updated %+v", up)
	}
	if _, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "nosuch"}); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("update missing: %v, want ErrNotFound", err)
	}
	blk, err := b.Lease(s.ctx, "orders", 0)
	if err != nil {
		t.Fatal(err)
	}
	if blk.Size != 70 {
		t.Fatalf("size 0 should lease the namespace's block size 70, got %d", blk.Size)
	}
	if blk.Start < 1000 {
		t.Fatalf("block %v starts below the namespace start 1000", blk)
	}
	if blk.ExpiresAt.IsZero() || time.Until(blk.ExpiresAt) > 2*time.Minute+time.Second || time.Until(blk.ExpiresAt) < time.Minute {
		t.Fatalf("ExpiresAt %v, want about 2m from now", blk.ExpiresAt)
	}
}

// updateStartOnlyMovesForward advances a namespace's start, which every later block respects, and checks
// that a lower start moves no counter back.
func (s *suite) updateStartOnlyMovesForward(t *testing.T) {
	b := s.fresh(t)
	s.create(t, b, allocator.Namespace{Name: "fwd"})
	first, err := b.Lease(s.ctx, "fwd", 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "fwd", Start: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		blk, err := b.Lease(s.ctx, "fwd", 10)
		if err != nil {
			t.Fatal(err)
		}
		if blk.Start < 1_000_000 {
			t.Fatalf("after advancing to 1e6, leased %v", blk)
		}
	}
	if _, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: "fwd", Start: 1}); err != nil {
		t.Fatal(err)
	}
	blk, err := b.Lease(s.ctx, "fwd", 10)
	if err != nil {
		t.Fatal(err)
	}
	if blk.Start < 1_000_000 || blk.Start <= first.Start {
		t.Fatalf("a lower start moved a counter back: %v", blk)
	}
}

// sizes leases blocks of sizes from 1 to the namespace's largest, well formed and disjoint, and refuses
// sizes below 1 and above the largest.
func (s *suite) sizes(t *testing.T) {
	b := s.fresh(t)
	s.create(t, b, allocator.Namespace{Name: "sizes", MaxBlockSize: 100_000})
	var blocks []allocator.Block
	for _, size := range []int64{1, 2, 3, 7, 1000, 99_999, 100_000} {
		blk, err := b.Lease(s.ctx, "sizes", size)
		if err != nil {
			t.Fatalf("Lease(%d): %v", size, err)
		}
		if blk.Size != size || blk.Namespace != "sizes" || blk.Server == "" {
			t.Fatalf("Lease(%d) = %+v", size, blk)
		}
		if err := blk.Validate(); err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, blk)
	}
	if err := CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{-1, -1000, 100_001, math.MaxInt64, math.MinInt64} {
		if _, err := b.Lease(s.ctx, "sizes", size); !errors.Is(err, allocator.ErrInvalidSize) {
			t.Errorf("Lease(%d): err = %v, want ErrInvalidSize", size, err)
		}
	}
}

// invalidNames refuses names outside the allowed form in every call, creating nothing, and takes the longest
// valid name.
func (s *suite) invalidNames(t *testing.T) {
	b := s.fresh(t)
	for _, name := range []string{"", "A", "Orders", "-x", "_x", ".x", "a b", "x'; DROP TABLE ticketd_namespaces; --",
		"a/b", "ä", strings.Repeat("a", 65), "x\x00", "a`b", "a\"b"} {
		if _, err := b.Lease(s.ctx, name, 1); !errors.Is(err, allocator.ErrInvalidNamespace) {
			t.Errorf("Lease(%q): %v, want ErrInvalidNamespace", name, err)
		}
		if _, err := b.CreateNamespace(s.ctx, allocator.Namespace{Name: name}); !errors.Is(err, allocator.ErrInvalidNamespace) {
			t.Errorf("CreateNamespace(%q): %v, want ErrInvalidNamespace", name, err)
		}
		if _, err := b.Namespace(s.ctx, name); !errors.Is(err, allocator.ErrInvalidNamespace) {
			t.Errorf("Namespace(%q): %v, want ErrInvalidNamespace", name, err)
		}
		if _, err := b.UpdateNamespace(s.ctx, allocator.Namespace{Name: name}); !errors.Is(err, allocator.ErrInvalidNamespace) {
			t.Errorf("UpdateNamespace(%q): %v, want ErrInvalidNamespace", name, err)
		}
	}
	list, err := b.Namespaces(s.ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("after refused creates: %v, %v", list, err)
	}
	// The longest valid name works.
	s.create(t, b, allocator.Namespace{Name: strings.Repeat("z", 64)})
}

// invalidSettings refuses settings out of range or in contradiction, and creates nothing.
func (s *suite) invalidSettings(t *testing.T) {
	b := s.fresh(t)
	for _, ns := range []allocator.Namespace{
		{Name: "s", BlockSize: -1},
		{Name: "s", BlockSize: 10, MaxBlockSize: 5},
		{Name: "s", MaxBlockSize: allocator.MaxBlockSizeLimit + 1},
		{Name: "s", LeaseTTL: -time.Second},
		{Name: "s", LeaseTTL: time.Millisecond},
		{Name: "s", Start: -5},
		{Name: "s", MaxID: -1},
		{Name: "s", Start: 100, MaxID: 99},
	} {
		if _, err := b.CreateNamespace(s.ctx, ns); !errors.Is(err, allocator.ErrInvalidSettings) {
			t.Errorf("CreateNamespace(%+v): %v, want ErrInvalidSettings", ns, err)
		}
	}
	if _, err := b.Namespace(s.ctx, "s"); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("a refused create left a namespace: %v", err)
	}
}

// notFound reports an unknown namespace as ErrNotFound, to Lease and to Namespace.
func (s *suite) notFound(t *testing.T) {
	b := s.fresh(t)
	if _, err := b.Lease(s.ctx, "nosuch", 1); !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("Lease: %v, want ErrNotFound", err)
	}
	if _, err := b.Namespace(s.ctx, "nosuch"); !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("Namespace: %v, want ErrNotFound", err)
	}
}

// exhausted leases near the top of the int64 range: blocks never wrap, and the namespace ends with
// ErrExhausted, for good.
func (s *suite) exhausted(t *testing.T) {
	b := s.fresh(t)
	s.create(t, b, allocator.Namespace{Name: "edge", Start: math.MaxInt64 - 1000})
	var blocks []allocator.Block
	var err error
	for i := 0; i < 1000; i++ {
		var blk allocator.Block
		blk, err = b.Lease(s.ctx, "edge", 100)
		if err != nil {
			break
		}
		if last, lerr := blk.Last(); lerr != nil || last < blk.Start {
			t.Fatalf("leased a wrapped block %+v (%v)", blk, lerr)
		}
		blocks = append(blocks, blk)
	}
	if !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("near MaxInt64: err = %v after %d blocks, want ErrExhausted", err, len(blocks))
	}
	if err := CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	// Still exhausted, never wrapped.
	if _, err := b.Lease(s.ctx, "edge", 100); !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("second exhausted lease: %v", err)
	}
}

// concurrentLeasesAreDisjoint has many goroutines lease from two namespaces at once: no ID of one namespace
// is issued twice.
func (s *suite) concurrentLeasesAreDisjoint(t *testing.T) {
	b := s.fresh(t)
	s.create(t, b, allocator.Namespace{Name: "race"})
	s.create(t, b, allocator.Namespace{Name: "other"})
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
			local := make([]allocator.Block, 0, s.opts.LeasesPerGoroutine)
			for i := range s.opts.LeasesPerGoroutine {
				ns := "race"
				if (g+i)%5 == 0 {
					ns = "other" // a second namespace in the mix must not disturb the first
				}
				blk, err := b.Lease(s.ctx, ns, int64(1+(g*7+i*13)%500))
				if err != nil {
					errs <- fmt.Errorf("goroutine %d lease %d: %w", g, i, err)
					return
				}
				if ns == "race" {
					local = append(local, blk)
				}
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
	if err := CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d blocks leased by %d goroutines, no ID shared", len(blocks), s.opts.Goroutines)
}

// closeTwice closes a backend twice without error; a lease after Close is ErrClosed.
func (s *suite) closeTwice(t *testing.T) {
	b := s.open(t)
	if _, err := b.CreateNamespace(s.ctx, allocator.Namespace{Name: "c"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := b.Lease(s.ctx, "c", 1); !errors.Is(err, allocator.ErrClosed) {
		t.Fatalf("Lease after Close: %v, want ErrClosed", err)
	}
}

// contextCancelled refuses a lease whose context is already cancelled.
func (s *suite) contextCancelled(t *testing.T) {
	b := s.fresh(t)
	s.create(t, b, allocator.Namespace{Name: "ctx"})
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if _, err := b.Lease(cctx, "ctx", 1); err == nil {
		t.Fatal("Lease with a cancelled context succeeded")
	}
}
