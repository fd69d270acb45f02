package server

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// fakeBackend is an in-memory ticket pair for handler and cache tests: servers "a" (odd) and "b"
// (even), step 2, like the Flickr pair. It counts every call and can fail, or hold, leases on demand.
type fakeBackend struct {
	now func() time.Time

	mu       sync.Mutex
	spaces   map[string]*fakeSpace
	healthy  map[string]bool
	fenced   map[string]string  // server → why, like a restored backup
	repl     map[string]string  // server → how it replicates
	leaseErr error              // returned by every lease while set
	listErr  error              // returned by Namespaces while set
	observer allocator.Observer // told of every lease that reached a counter, when set
	gate     chan struct{}      // while set, leases wait until it is closed
	hangOn   string             // while set, leases that prefer this server wait until hangGate is closed
	hangGate chan struct{}
	prefers  []string // the prefer argument of each LeaseFrom
	sizes    []int64  // the size of each lease that reached a counter

	leases     atomic.Int64 // leases that moved a counter
	nsReads    atomic.Int64
	writes     atomic.Int64 // creates and updates
	rr         atomic.Uint64
	leaseCalls atomic.Int64 // every Lease/LeaseFrom call, failed ones included
	listCalls  atomic.Int64
	badNames   atomic.Int64 // calls that named an invalid namespace: the server must refuse those first
}

type fakeSpace struct {
	ns   allocator.Namespace
	next map[string]int64 // per server
}

var (
	_ allocator.Backend        = (*fakeBackend)(nil)
	_ allocator.HealthReporter = (*fakeBackend)(nil)
	_ PreferLeaser             = (*fakeBackend)(nil)
)

var fakeServers = []string{"a", "b"}

func newFake(now func() time.Time) *fakeBackend {
	if now == nil {
		now = time.Now
	}
	return &fakeBackend{now: now, spaces: map[string]*fakeSpace{}, healthy: map[string]bool{"a": true, "b": true},
		fenced: map[string]string{}, repl: map[string]string{}}
}

// calls is every call that reached the backend.
func (f *fakeBackend) calls() int64 {
	return f.leaseCalls.Load() + f.nsReads.Load() + f.writes.Load() + f.listCalls.Load()
}

// checkName counts a call that names an invalid namespace.
func (f *fakeBackend) checkName(name string) {
	if allocator.ValidateName(name) != nil {
		f.badNames.Add(1)
	}
}

// fence marks a server fenced: it answers but serves nothing, as the pair does with a restored backup.
func (f *fakeBackend) fence(server, why string) {
	f.mu.Lock()
	f.fenced[server] = why
	f.mu.Unlock()
}

// usableLocked reports whether a server may lease.
func (f *fakeBackend) usableLocked(server string) bool {
	return f.healthy[server] && f.fenced[server] == ""
}

func (f *fakeBackend) setHealthy(server string, up bool) {
	f.mu.Lock()
	f.healthy[server] = up
	f.mu.Unlock()
}

func (f *fakeBackend) failList(err error) {
	f.mu.Lock()
	f.listErr = err
	f.mu.Unlock()
}

func (f *fakeBackend) setLeaseErr(err error) {
	f.mu.Lock()
	f.leaseErr = err
	f.mu.Unlock()
}

// hold makes leases wait until the returned release is called.
func (f *fakeBackend) hold() (release func()) {
	g := make(chan struct{})
	f.mu.Lock()
	f.gate = g
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.gate = nil
			f.mu.Unlock()
			close(g)
		})
	}
}

// hang makes leases that prefer server wait, as on a server that takes requests and answers none,
// until the returned release is called.
func (f *fakeBackend) hang(server string) (release func()) {
	g := make(chan struct{})
	f.mu.Lock()
	f.hangOn, f.hangGate = server, g
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.hangOn, f.hangGate = "", nil
			f.mu.Unlock()
			close(g)
		})
	}
}

// counters returns every server's counter of every namespace, to compare before and after.
func (f *fakeBackend) counters() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for name, sp := range f.spaces {
		for s, n := range sp.next {
			out[name+"@"+s] = n
		}
	}
	return out
}

func (f *fakeBackend) Lease(ctx context.Context, namespace string, size int64) (allocator.Block, error) {
	return f.LeaseFrom(ctx, namespace, size, "")
}

func (f *fakeBackend) LeaseFrom(ctx context.Context, namespace string, size int64, prefer string) (allocator.Block, error) {
	f.leaseCalls.Add(1)
	f.checkName(namespace)
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.Block{}, err
	}
	f.mu.Lock()
	gate := f.gate
	if prefer != "" && prefer == f.hangOn {
		gate = f.hangGate
	}
	f.prefers = append(f.prefers, prefer)
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return allocator.Block{}, fmt.Errorf("%w: %w", allocator.ErrUnavailable, ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaseErr != nil {
		return allocator.Block{}, f.leaseErr
	}
	sp, ok := f.spaces[namespace]
	if !ok {
		return allocator.Block{}, fmt.Errorf("%w: %q", allocator.ErrNotFound, namespace)
	}
	if size == 0 {
		size = sp.ns.BlockSize
	}
	if err := allocator.ValidateSize(size, sp.ns.MaxBlockSize); err != nil {
		return allocator.Block{}, err
	}
	server := ""
	if prefer != "" && f.usableLocked(prefer) {
		server = prefer
	}
	for i := 0; server == "" && i < len(fakeServers); i++ {
		if s := fakeServers[(int(f.rr.Add(1))+i)%len(fakeServers)]; f.usableLocked(s) {
			server = s
		}
	}
	if server == "" {
		return allocator.Block{}, fmt.Errorf("%w: every fake server is down", allocator.ErrUnavailable)
	}
	next := sp.next[server]
	if next > math.MaxInt64-2*size {
		return allocator.Block{}, fmt.Errorf("%w: fake %s", allocator.ErrExhausted, server)
	}
	end := next + 2*size
	blk, err := allocator.BlockEnding(namespace, server, end, 2, size, allocator.ExpiryFor(f.now(), sp.ns.LeaseTTL))
	if err != nil {
		return allocator.Block{}, err
	}
	sp.next[server] = end
	f.sizes = append(f.sizes, size)
	f.leases.Add(1)
	if f.observer != nil {
		f.observer.ObserveLease(server, time.Duration(200+f.leases.Load()%800)*time.Microsecond, nil)
	}
	return blk, nil
}

func (f *fakeBackend) CreateNamespace(_ context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	f.checkName(ns.Name)
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.spaces[ns.Name]; ok {
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrExists, ns.Name)
	}
	f.writes.Add(1)
	// Server a issues odd IDs, b even ones, each from the first of its parity at or above Start.
	first := func(offset int64) int64 {
		if ns.Start%2 == offset%2 {
			return ns.Start
		}
		return ns.Start + 1
	}
	f.spaces[ns.Name] = &fakeSpace{ns: ns, next: map[string]int64{"a": first(1), "b": first(2)}}
	return ns, nil
}

func (f *fakeBackend) UpdateNamespace(_ context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	f.checkName(ns.Name)
	advance := ns.Start
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sp, ok := f.spaces[ns.Name]
	if !ok {
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrNotFound, ns.Name)
	}
	f.writes.Add(1)
	ns.Start = sp.ns.Start
	sp.ns = ns
	for s, n := range sp.next {
		sp.next[s] = max(n, advance)
	}
	return ns, nil
}

func (f *fakeBackend) Namespace(_ context.Context, name string) (allocator.Namespace, error) {
	f.nsReads.Add(1)
	f.checkName(name)
	if err := allocator.ValidateName(name); err != nil {
		return allocator.Namespace{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sp, ok := f.spaces[name]
	if !ok {
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrNotFound, name)
	}
	ns := sp.ns
	for i, s := range fakeServers {
		ns.Servers = append(ns.Servers, allocator.ServerState{Server: s, Next: sp.next[s], Step: 2, Offset: int64(i + 1),
			Healthy: f.usableLocked(s), Error: f.fenced[s]})
	}
	return ns, nil
}

func (f *fakeBackend) Namespaces(ctx context.Context) ([]allocator.Namespace, error) {
	f.listCalls.Add(1)
	f.mu.Lock()
	if f.listErr != nil {
		defer f.mu.Unlock()
		return nil, f.listErr
	}
	names := make([]string, 0, len(f.spaces))
	for n := range f.spaces {
		names = append(names, n)
	}
	f.mu.Unlock()
	sort.Strings(names)
	out := make([]allocator.Namespace, 0, len(names))
	for _, n := range names {
		ns, err := f.Namespace(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, nil
}

func (f *fakeBackend) Health() []allocator.ServerHealth {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]allocator.ServerHealth, len(fakeServers))
	for i, s := range fakeServers {
		out[i] = allocator.ServerHealth{Name: s, Healthy: f.usableLocked(s), Step: 2, Offset: int64(i + 1),
			Fenced: f.fenced[s] != "", Error: f.fenced[s], Replication: f.repl[s]}
	}
	return out
}

func (f *fakeBackend) Close() error { return nil }

// fakeClock is a settable clock for the cache's staleness and sizing decisions.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
