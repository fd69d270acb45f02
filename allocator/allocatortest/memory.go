package allocatortest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Config describes the ticket servers of a Memory (or a Fake).
type Config struct {
	// Servers names the ticket servers; server i issues IDs ≡ Offsets[i] (mod Step). Default "a"
	// and "b", a Flickr pair.
	Servers []string
	// Step is every server's increment. Default len(Servers).
	Step int64
	// Offsets is each server's offset. Default i+1 for server i; two servers given the same offset
	// make a broken set that issues the same IDs twice.
	Offsets []int64
	// Now stamps each block's expiry. Default time.Now.
	Now func() time.Time
	// Namespaces are created at once.
	Namespaces []allocator.Namespace
}

// Memory is a stateful in-memory allocator.Backend: ticket servers that share a step, each with its
// own counter per namespace, as a MariaDB pair or a Redis set keeps them. It keeps namespaces and
// their settings, leases round-robin over the usable servers (or from the one a caller prefers), and
// reports each server's health. A server may be taken down, fenced or rewound, as a kill or a restore
// from an old backup would. It is safe for concurrent use.
type Memory struct {
	now     func() time.Time
	servers []string
	step    int64
	offsets []int64

	mu       sync.Mutex
	spaces   map[string]*memorySpace
	down     map[string]string // server → why, while it is down
	fenced   map[string]string // server → why
	repl     map[string]string // server → how it replicates
	observer allocator.Observer
	turn     uint64
	leases   int64
}

type memorySpace struct {
	ns   allocator.Namespace
	next map[string]int64 // per server
}

var (
	_ allocator.Backend        = (*Memory)(nil)
	_ allocator.HealthReporter = (*Memory)(nil)
)

// NewMemory returns a Memory with the servers and namespaces of cfg. It panics on a namespace it
// cannot create.
func NewMemory(cfg Config) *Memory {
	if len(cfg.Servers) == 0 {
		cfg.Servers = []string{"a", "b"}
	}
	if cfg.Step == 0 {
		cfg.Step = int64(len(cfg.Servers))
	}
	if cfg.Offsets == nil {
		for i := range cfg.Servers {
			cfg.Offsets = append(cfg.Offsets, int64(i+1))
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Memory{now: cfg.Now, servers: cfg.Servers, step: cfg.Step, offsets: cfg.Offsets,
		spaces: map[string]*memorySpace{}, down: map[string]string{}, fenced: map[string]string{}, repl: map[string]string{}}
	for _, ns := range cfg.Namespaces {
		if _, err := m.CreateNamespace(context.Background(), ns); err != nil {
			panic(err)
		}
	}
	return m
}

// first is the first ID at or above from that server i issues.
func (m *Memory) first(i int, from int64) int64 {
	want := m.offsets[i] % m.step
	return from + ((want-from%m.step)%m.step+m.step)%m.step
}

// SetDown takes a server out: leases skip it, and its health says why.
func (m *Memory) SetDown(server, why string) {
	m.mu.Lock()
	m.down[server] = why
	m.mu.Unlock()
}

// SetUp brings a server taken down back.
func (m *Memory) SetUp(server string) {
	m.mu.Lock()
	delete(m.down, server)
	m.mu.Unlock()
}

// Fence marks a server fenced: it answers but serves nothing, as a server restored from a backup does.
func (m *Memory) Fence(server, why string) {
	m.mu.Lock()
	m.fenced[server] = why
	m.mu.Unlock()
}

// SetReplication sets what a server's health says of how it replicates.
func (m *Memory) SetReplication(server, how string) {
	m.mu.Lock()
	m.repl[server] = how
	m.mu.Unlock()
}

// SetObserver sets the Observer told of every lease that moves a counter.
func (m *Memory) SetObserver(o allocator.Observer) {
	m.mu.Lock()
	m.observer = o
	m.mu.Unlock()
}

// Rewind sets a server's counters back to where they began, as a restore from a backup taken before
// its first lease would.
func (m *Memory) Rewind(server string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, s := range m.servers {
		if s == server {
			for _, sp := range m.spaces {
				sp.next[s] = m.first(i, sp.ns.Start)
			}
		}
	}
}

// Counters returns every server's counter of every namespace, keyed "namespace@server", to compare
// before and after.
func (m *Memory) Counters() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int64{}
	for name, sp := range m.spaces {
		for s, n := range sp.next {
			out[name+"@"+s] = n
		}
	}
	return out
}

// usableLocked reports whether a server may lease.
func (m *Memory) usableLocked(server string) bool {
	_, down := m.down[server]
	return !down && m.fenced[server] == ""
}

// whyLocked is what a server's health says is wrong with it.
func (m *Memory) whyLocked(server string) string {
	if why := m.fenced[server]; why != "" {
		return why
	}
	return m.down[server]
}

// Lease takes a block from the next usable server, round-robin.
func (m *Memory) Lease(ctx context.Context, namespace string, size int64) (allocator.Block, error) {
	return m.LeaseFrom(ctx, namespace, size, "")
}

// LeaseFrom takes a block from prefer when it is usable, else as Lease does.
func (m *Memory) LeaseFrom(_ context.Context, namespace string, size int64, prefer string) (allocator.Block, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.Block{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sp, ok := m.spaces[namespace]
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
	if prefer != "" && m.usableLocked(prefer) {
		server = prefer
	}
	m.turn++
	for i := 0; server == "" && i < len(m.servers); i++ {
		if s := m.servers[(int(m.turn%uint64(len(m.servers)))+i)%len(m.servers)]; m.usableLocked(s) {
			server = s
		}
	}
	if server == "" {
		return allocator.Block{}, fmt.Errorf("%w: every server is down", allocator.ErrUnavailable)
	}
	next := sp.next[server]
	if next > math.MaxInt64-m.step*size {
		return allocator.Block{}, fmt.Errorf("%w: server %s", allocator.ErrExhausted, server)
	}
	sp.next[server] = next + m.step*size
	m.leases++
	if m.observer != nil {
		m.observer.ObserveLease(server, time.Duration(200+m.leases%800)*time.Microsecond, nil)
	}
	return allocator.Block{Namespace: namespace, Server: server, Start: next, Step: m.step, Size: size,
		ExpiresAt: allocator.ExpiryFor(m.now(), sp.ns.LeaseTTL)}, nil
}

// CreateNamespace creates a namespace; each server's counter begins at the first ID of its own at or
// above Start.
func (m *Memory) CreateNamespace(_ context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.spaces[ns.Name]; ok {
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrExists, ns.Name)
	}
	sp := &memorySpace{ns: ns, next: map[string]int64{}}
	for i, s := range m.servers {
		sp.next[s] = m.first(i, ns.Start)
	}
	m.spaces[ns.Name] = sp
	return ns, nil
}

// UpdateNamespace changes the settings of a namespace; a Start advances every counter below it.
func (m *Memory) UpdateNamespace(_ context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	advance := ns.Start
	ns = ns.WithDefaults()
	if err := ns.Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sp, ok := m.spaces[ns.Name]
	if !ok {
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrNotFound, ns.Name)
	}
	ns.Start = sp.ns.Start
	sp.ns = ns
	for i, s := range m.servers {
		sp.next[s] = max(sp.next[s], m.first(i, advance))
	}
	return ns, nil
}

// Namespace returns a namespace with each server's counter.
func (m *Memory) Namespace(_ context.Context, name string) (allocator.Namespace, error) {
	if err := allocator.ValidateName(name); err != nil {
		return allocator.Namespace{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.namespaceLocked(name)
}

func (m *Memory) namespaceLocked(name string) (allocator.Namespace, error) {
	sp, ok := m.spaces[name]
	if !ok {
		return allocator.Namespace{}, fmt.Errorf("%w: %q", allocator.ErrNotFound, name)
	}
	ns := sp.ns
	for i, s := range m.servers {
		ns.Servers = append(ns.Servers, allocator.ServerState{Server: s, Next: sp.next[s], Step: m.step, Offset: m.offsets[i],
			Healthy: m.usableLocked(s), Error: m.whyLocked(s), Replication: m.repl[s]})
	}
	return ns, nil
}

// Namespaces lists every namespace, sorted by name.
func (m *Memory) Namespaces(context.Context) ([]allocator.Namespace, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.spaces))
	for n := range m.spaces {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]allocator.Namespace, 0, len(names))
	for _, n := range names {
		ns, err := m.namespaceLocked(n)
		if err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, nil
}

// Health reports each server: usable unless down or fenced, and why not.
func (m *Memory) Health() []allocator.ServerHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]allocator.ServerHealth, len(m.servers))
	for i, s := range m.servers {
		out[i] = allocator.ServerHealth{Name: s, Healthy: m.usableLocked(s), Step: m.step, Offset: m.offsets[i],
			Fenced: m.fenced[s] != "", Error: m.whyLocked(s), Replication: m.repl[s]}
	}
	return out
}

// Close does nothing.
func (m *Memory) Close() error { return nil }
