package client

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newFake is a one-server fake backend (step 1) with the namespaces.
func newFake(namespaces ...testNS) *fake {
	return newFakeWith(fakeConfig{Namespaces: namespaces})
}

// testNS is a namespace of a fake: zero settings take ticketd's defaults (block size 1000, maximum
// 1,000,000 or the block size, IDs from 1).
type testNS struct {
	Name                    string
	BlockSize, MaxBlockSize int64
	LeaseTTL                time.Duration
	Start                   int64
}

// fakeConfig configures a fake: the step of its IDs (default 1) and its clock (default time.Now).
type fakeConfig struct {
	Step       int64
	Now        func() time.Time
	Namespaces []testNS
}

// fake is a Backend a test programs, as one ticket server would lease: it counts and records every
// lease, and fails, delays, holds or repeats leases on demand. It is safe for concurrent use.
type fake struct {
	cfg        fakeConfig
	leaseCalls atomic.Int64

	mu       sync.Mutex
	spaces   map[string]*testNS
	next     map[string]int64
	leaseErr error
	nsErr    error
	repeat   bool
	delay    time.Duration
	gate     chan struct{}
	free     int64
	sizes    []int64
	blocks   []Block
}

var _ Backend = (*fake)(nil)

func newFakeWith(cfg fakeConfig) *fake {
	if cfg.Step == 0 {
		cfg.Step = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &fake{cfg: cfg, spaces: map[string]*testNS{}, next: map[string]int64{}}
	for _, ns := range cfg.Namespaces {
		if _, err := f.CreateNamespace(context.Background(), ns); err != nil {
			panic(err)
		}
	}
	return f
}

// CreateNamespace adds a namespace, with the defaults of the settings it leaves zero.
func (f *fake) CreateNamespace(_ context.Context, ns testNS) (testNS, error) {
	if err := validateName(ns.Name); err != nil {
		return testNS{}, err
	}
	if ns.BlockSize == 0 {
		ns.BlockSize = 1000
	}
	if ns.MaxBlockSize == 0 {
		ns.MaxBlockSize = max(defaultMaxBlockSize, ns.BlockSize)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.spaces[ns.Name]; ok {
		return testNS{}, fmt.Errorf("namespace %q exists", ns.Name)
	}
	f.spaces[ns.Name] = &ns
	f.next[ns.Name] = max(ns.Start, 1)
	return ns, nil
}

// SetLeaseErr makes every lease fail with err while it is not nil.
func (f *fake) SetLeaseErr(err error) { f.set(func() { f.leaseErr = err }) }

// SetNamespaceErr makes Settings fail with err while it is not nil.
func (f *fake) SetNamespaceErr(err error) { f.set(func() { f.nsErr = err }) }

// SetRepeat makes each lease return the last block again while on, as a server restored from a backup
// would.
func (f *fake) SetRepeat(on bool) { f.set(func() { f.repeat = on }) }

// SetDelay makes each lease take d (real time) more.
func (f *fake) SetDelay(d time.Duration) { f.set(func() { f.delay = d }) }

func (f *fake) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// Gate makes every lease call after the first free take a value from the returned channel before it
// goes on; closing the channel lets every lease through.
func (f *fake) Gate(free int64) chan struct{} {
	g := make(chan struct{})
	f.set(func() { f.gate, f.free = g, free })
	return g
}

// LeaseCalls is the number of Lease calls, failed ones included.
func (f *fake) LeaseCalls() int64 { return f.leaseCalls.Load() }

// Sizes returns the size each lease asked for, in order (0: the namespace's block size).
func (f *fake) Sizes() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.sizes...)
}

// Blocks returns every block leased, in order.
func (f *fake) Blocks() []Block {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Block(nil), f.blocks...)
}

// Lease counts and records the call, waits for a gate or a delay that is set, fails with the lease
// error when one is set, and otherwise leases the next size IDs of the namespace.
func (f *fake) Lease(ctx context.Context, namespace string, size int64) (Block, error) {
	call := f.leaseCalls.Add(1)
	f.mu.Lock()
	f.sizes = append(f.sizes, size)
	var gate chan struct{}
	if f.gate != nil && call > f.free {
		gate = f.gate
	}
	delay := f.delay
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return Block{}, fmt.Errorf("%w: %w", ErrServerUnavailable, ctx.Err())
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return Block{}, fmt.Errorf("%w: %w", ErrServerUnavailable, ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaseErr != nil {
		return Block{}, f.leaseErr
	}
	if f.repeat && len(f.blocks) > 0 {
		return f.blocks[len(f.blocks)-1], nil
	}
	ns, ok := f.spaces[namespace]
	if !ok {
		return Block{}, fmt.Errorf("%w: %q", ErrNotFound, namespace)
	}
	if size == 0 {
		size = ns.BlockSize
	}
	if size < 1 || size > ns.MaxBlockSize {
		return Block{}, fmt.Errorf("%w: %d must be between 1 and %d", ErrInvalidSize, size, ns.MaxBlockSize)
	}
	blk := Block{Namespace: namespace, Server: "fake", Start: f.next[namespace], Step: f.cfg.Step, Size: size}
	if ns.LeaseTTL > 0 {
		blk.ExpiresAt = f.cfg.Now().Add(ns.LeaseTTL)
	}
	f.next[namespace] += size * f.cfg.Step
	f.blocks = append(f.blocks, blk)
	return blk, nil
}

// Settings returns the namespace's settings, or the namespace error when one is set.
func (f *fake) Settings(_ context.Context, namespace string) (Settings, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nsErr != nil {
		return Settings{}, f.nsErr
	}
	ns, ok := f.spaces[namespace]
	if !ok {
		return Settings{}, fmt.Errorf("%w: %q", ErrNotFound, namespace)
	}
	return Settings{BlockSize: ns.BlockSize, MaxBlockSize: ns.MaxBlockSize, LeaseTTL: ns.LeaseTTL}, nil
}

// contains reports whether id is one of blk's IDs.
func contains(blk Block, id int64) bool {
	last, ok := blk.last()
	return ok && id >= blk.Start && id <= last && (id-blk.Start)%blk.Step == 0
}

// manualClock stands still until Advance moves it; Advance runs the timers that come due, in the
// caller's goroutine, before it returns. It is safe for concurrent use.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	at   time.Time
	f    func()
	done bool
}

func newClock() *manualClock { return &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

// Advance moves the clock forward by d and fires every timer due by then, the earliest first.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due, live []*manualTimer
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(c.now):
			t.done = true
			due = append(due, t)
		default:
			live = append(live, t)
		}
	}
	c.timers = live
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
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

// e2eLoad runs goroutines that take IDs from c until stop is closed or each has taken perG; every ID
// goes into set. Even goroutines use Next, odd ones NextN with batches of 1 to 64.
type e2eLoad struct {
	served    atomic.Int64
	odd, even atomic.Int64
	wg        sync.WaitGroup
	errs      chan error
	stop      chan struct{}
	stopOnce  sync.Once
	set       *idSet
	c         *Client
	perG      int64 // 0: until stopped
}

func startLoad(c *Client, set *idSet, goroutines int, perG int64) *e2eLoad {
	l := &e2eLoad{errs: make(chan error, goroutines), stop: make(chan struct{}), set: set, c: c, perG: perG}
	for g := range goroutines {
		l.wg.Add(1)
		go l.run(g)
	}
	return l
}

func (l *e2eLoad) run(g int) {
	defer l.wg.Done()
	add := l.set.adder()
	ctx := context.Background()
	buf := make([]int64, 1+g%64)
	var odd, even int64
	defer func() { l.odd.Add(odd); l.even.Add(even) }()
	record := func(id int64) {
		add.add(id)
		if id%2 == 1 {
			odd++
		} else {
			even++
		}
	}
	for taken := int64(0); l.perG == 0 || taken < l.perG; {
		if taken%4096 == 0 {
			select {
			case <-l.stop:
				return
			default:
			}
		}
		if g%2 == 0 {
			id, err := l.c.Next(ctx)
			if err != nil {
				l.errs <- fmt.Errorf("goroutine %d after %d IDs: %w", g, taken, err)
				return
			}
			record(id)
			taken++
			l.served.Add(1)
			continue
		}
		want := buf
		if l.perG > 0 {
			want = buf[:min(int64(len(buf)), l.perG-taken)]
		}
		n, err := l.c.NextN(ctx, want)
		for _, id := range want[:n] {
			record(id)
		}
		taken += int64(n)
		l.served.Add(int64(n))
		if err != nil {
			l.errs <- fmt.Errorf("goroutine %d after %d IDs: %w", g, taken, err)
			return
		}
	}
}

// halt tells the goroutines to stop.
func (l *e2eLoad) halt() { l.stopOnce.Do(func() { close(l.stop) }) }

// wait waits for the goroutines and fails the test on any caller's error.
func (l *e2eLoad) wait(t *testing.T) {
	t.Helper()
	l.wg.Wait()
	close(l.errs)
	for err := range l.errs {
		t.Fatal(err)
	}
}

// takeConcurrently has goroutines take perG IDs each from c with Next, into set; it returns the first
// error a caller met.
func takeConcurrently(c *Client, set *idSet, goroutines, perG int) error {
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			add := set.adder()
			for range perG {
				id, err := c.Next(context.Background())
				if err != nil {
					errs <- err
					return
				}
				add.add(id)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
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
