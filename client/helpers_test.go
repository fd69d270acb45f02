package client

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// fakeBackend is a small in-memory allocator.Backend: one counter per namespace, with switches for
// failures, delays and gated leases.
type fakeBackend struct {
	mu     sync.Mutex
	ns     map[string]allocator.Namespace
	next   map[string]int64
	step   int64
	blocks []allocator.Block
	sizes  []int64 // requested sizes, in order
	calls  int

	err         error         // Lease fails with it when set
	nsErr       error         // Namespace fails with it when set
	repeat      bool          // Lease returns the last block again (a broken server)
	delay       time.Duration // each Lease sleeps this long (real time)
	gate        chan struct{} // when set, each Lease past the free ones takes a token first
	free        int
	now         func() time.Time
	leaseCalled chan struct{} // signalled (without blocking) on each Lease call
}

var _ allocator.Backend = (*fakeBackend)(nil)

func newFake(namespaces ...allocator.Namespace) *fakeBackend {
	f := &fakeBackend{ns: map[string]allocator.Namespace{}, next: map[string]int64{}, step: 1, now: time.Now,
		leaseCalled: make(chan struct{}, 1)}
	for _, ns := range namespaces {
		ns = ns.WithDefaults()
		f.ns[ns.Name] = ns
		f.next[ns.Name] = ns.Start
	}
	return f
}

func (f *fakeBackend) Lease(ctx context.Context, namespace string, size int64) (allocator.Block, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.Block{}, err
	}
	f.mu.Lock()
	f.calls++
	f.sizes = append(f.sizes, size)
	call, gate, delay := f.calls, f.gate, f.delay
	f.mu.Unlock()
	select {
	case f.leaseCalled <- struct{}{}:
	default:
	}
	if gate != nil && call > f.free {
		select {
		case <-gate:
		case <-ctx.Done():
			return allocator.Block{}, ctx.Err()
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return allocator.Block{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return allocator.Block{}, f.err
	}
	if f.repeat && len(f.blocks) > 0 {
		return f.blocks[len(f.blocks)-1], nil
	}
	ns, ok := f.ns[namespace]
	if !ok {
		return allocator.Block{}, fmt.Errorf("%w: %s", allocator.ErrNotFound, namespace)
	}
	if size == 0 {
		size = ns.BlockSize
	}
	if err := allocator.ValidateSize(size, ns.MaxBlockSize); err != nil {
		return allocator.Block{}, err
	}
	blk := allocator.Block{Namespace: namespace, Server: "fake", Start: f.next[namespace], Step: f.step, Size: size,
		ExpiresAt: allocator.ExpiryFor(f.now(), ns.LeaseTTL)}
	f.next[namespace] += size * f.step
	f.blocks = append(f.blocks, blk)
	return blk, nil
}

func (f *fakeBackend) CreateNamespace(_ context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	if _, ok := f.ns[ns.Name]; ok {
		return allocator.Namespace{}, allocator.ErrExists
	}
	f.ns[ns.Name], f.next[ns.Name] = ns, ns.Start
	return ns, nil
}

func (f *fakeBackend) UpdateNamespace(_ context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, ok := f.ns[ns.Name]
	if !ok {
		return allocator.Namespace{}, allocator.ErrNotFound
	}
	ns.Start = old.Start
	ns = ns.WithDefaults()
	f.ns[ns.Name] = ns
	return ns, nil
}

func (f *fakeBackend) Namespace(_ context.Context, name string) (allocator.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nsErr != nil {
		return allocator.Namespace{}, f.nsErr
	}
	ns, ok := f.ns[name]
	if !ok {
		return allocator.Namespace{}, allocator.ErrNotFound
	}
	return ns, nil
}

func (f *fakeBackend) Namespaces(context.Context) ([]allocator.Namespace, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []allocator.Namespace
	for _, ns := range f.ns {
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeBackend) Close() error { return nil }

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeBackend) leaseCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeBackend) leased() []allocator.Block {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]allocator.Block(nil), f.blocks...)
}

func (f *fakeBackend) requested() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.sizes...)
}

// fakeClock is a manual clock: Advance moves it and runs the timers that come due, in the caller's
// goroutine, before it returns.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (k *fakeClock) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

func (k *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := &fakeTimer{at: k.now.Add(d), f: f}
	k.timers = append(k.timers, t)
	return func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

// Advance moves the clock forward by d and fires every timer due by then.
func (k *fakeClock) Advance(d time.Duration) {
	k.mu.Lock()
	k.now = k.now.Add(d)
	var due []*fakeTimer
	for _, t := range k.timers {
		if !t.done && !t.at.After(k.now) {
			t.done = true
			due = append(due, t)
		}
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	k.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

func withClock(k clock) Option    { return func(c *config) { c.clock = k } }
func withJitter(j float64) Option { return func(c *config) { c.jitter = func() float64 { return j } } }
func withProcs(n int) Option      { return func(c *config) { c.procs = n } }

// idSet records IDs from many goroutines at once and counts the ones seen twice: a sparse bitmap in
// chunks of 2^20 IDs, set with atomic OR.
type idSet struct {
	mu     sync.RWMutex
	chunks map[int64]*idChunk
	n      atomic.Int64
	dups   atomic.Int64
	first  atomic.Int64 // the first duplicate seen
}

type idChunk [1 << 14]atomic.Uint64

func newIDSet() *idSet { return &idSet{chunks: map[int64]*idChunk{}} }

func (s *idSet) chunk(key int64) *idChunk {
	s.mu.RLock()
	c := s.chunks[key]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.chunks[key]; c == nil {
		c = new(idChunk)
		s.chunks[key] = c
	}
	return c
}

// idAdder adds to an idSet from one goroutine, remembering the last chunk.
type idAdder struct {
	s   *idSet
	key int64
	c   *idChunk
}

func (s *idSet) adder() *idAdder { return &idAdder{s: s, key: -1} }

// add records id and reports whether it was new.
func (a *idAdder) add(id int64) bool {
	if id < 1 {
		a.s.dups.Add(1)
		a.s.first.CompareAndSwap(0, id)
		return false
	}
	if key := id >> 20; key != a.key {
		a.c, a.key = a.s.chunk(key), key
	}
	bit := uint64(id) & (1<<20 - 1)
	mask := uint64(1) << (bit & 63)
	if a.c[bit>>6].Or(mask)&mask != 0 {
		a.s.dups.Add(1)
		a.s.first.CompareAndSwap(0, id)
		return false
	}
	a.s.n.Add(1)
	return true
}

// check fails the test if any ID was seen twice or the count is not want.
func (s *idSet) check(t testing.TB, want int64) {
	t.Helper()
	if d := s.dups.Load(); d != 0 {
		t.Fatalf("%d duplicate (or non-positive) IDs, the first %d", d, s.first.Load())
	}
	if got := s.n.Load(); got != want {
		t.Fatalf("%d distinct IDs, want %d", got, want)
	}
}

// drain takes IDs from c into set until Next fails, each call waiting at most wait; it returns how
// many it took and the error.
func drain(c *Client, set *idSet, wait time.Duration) (int64, error) {
	add := set.adder()
	for n := int64(0); ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		id, err := c.Next(ctx)
		cancel()
		if err != nil {
			return n, err
		}
		add.add(id)
	}
}

// eventually polls cond every millisecond for up to 10s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
