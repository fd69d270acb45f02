package allocatortest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Fake is a Memory a test programs: it counts every call, records what each lease asked for and
// returned, and fails, delays, holds or repeats leases on demand. Its servers are those of Memory, so
// it also reports health and leases from a preferred server. It is safe for concurrent use.
type Fake struct {
	*Memory

	mu       sync.Mutex
	leaseErr error // every lease fails with it while set
	nsErr    error // Namespace fails with it while set
	listErr  error // Namespaces fails with it while set
	repeat   bool  // leases return the last block again, as a broken server would
	delay    time.Duration
	gate     chan struct{} // while set, each lease call past the first free takes a value from it
	free     int64
	hangOn   string // while set, leases that prefer this server wait until hangGate is closed
	hangGate chan struct{}
	sizes    []int64  // the size asked of each lease
	prefers  []string // the server each lease preferred ("" for none)
	blocks   []allocator.Block

	leaseCalls atomic.Int64 // every Lease and LeaseFrom call, failed ones included
	leases     atomic.Int64 // leases that moved a counter
	nsReads    atomic.Int64
	writes     atomic.Int64 // creates and updates
	listCalls  atomic.Int64
	badNames   atomic.Int64 // calls that named an invalid namespace
}

var (
	_ allocator.Backend        = (*Fake)(nil)
	_ allocator.HealthReporter = (*Fake)(nil)
)

// NewFake returns a Fake over a NewMemory(cfg).
func NewFake(cfg Config) *Fake { return &Fake{Memory: NewMemory(cfg)} }

// SetLeaseErr makes every lease fail with err while it is not nil.
func (f *Fake) SetLeaseErr(err error) { f.set(func() { f.leaseErr = err }) }

// SetNamespaceErr makes Namespace fail with err while it is not nil.
func (f *Fake) SetNamespaceErr(err error) { f.set(func() { f.nsErr = err }) }

// SetListErr makes Namespaces fail with err while it is not nil.
func (f *Fake) SetListErr(err error) { f.set(func() { f.listErr = err }) }

// SetRepeat makes each lease return the last block again while on, as a server restored from a backup
// would.
func (f *Fake) SetRepeat(on bool) { f.set(func() { f.repeat = on }) }

// SetDelay makes each lease take d (real time) more.
func (f *Fake) SetDelay(d time.Duration) { f.set(func() { f.delay = d }) }

func (f *Fake) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

// Gate makes every lease call after the first free (counted from the Fake's start) take a value from
// the returned channel before it goes on; closing the channel lets every lease through.
func (f *Fake) Gate(free int64) chan struct{} {
	g := make(chan struct{})
	f.set(func() { f.gate, f.free = g, free })
	return g
}

// Hold makes leases wait until the returned release is called.
func (f *Fake) Hold() (release func()) {
	g := f.Gate(f.leaseCalls.Load())
	var once sync.Once
	return func() {
		once.Do(func() {
			f.set(func() {
				if f.gate == g {
					f.gate = nil
				}
			})
			close(g)
		})
	}
}

// Hang makes leases that prefer server wait, as on a server that takes requests and answers none,
// until the returned release is called.
func (f *Fake) Hang(server string) (release func()) {
	g := make(chan struct{})
	f.set(func() { f.hangOn, f.hangGate = server, g })
	var once sync.Once
	return func() {
		once.Do(func() {
			f.set(func() { f.hangOn, f.hangGate = "", nil })
			close(g)
		})
	}
}

// LeaseCalls is the number of Lease and LeaseFrom calls, failed ones included.
func (f *Fake) LeaseCalls() int64 { return f.leaseCalls.Load() }

// Leases is the number of leases that moved a counter.
func (f *Fake) Leases() int64 { return f.leases.Load() }

// Writes is the number of CreateNamespace and UpdateNamespace calls.
func (f *Fake) Writes() int64 { return f.writes.Load() }

// BadNames is the number of calls that named an invalid namespace: a server must refuse those before
// they reach the backend.
func (f *Fake) BadNames() int64 { return f.badNames.Load() }

// Calls is the number of calls of every kind that reached the backend.
func (f *Fake) Calls() int64 {
	return f.leaseCalls.Load() + f.nsReads.Load() + f.writes.Load() + f.listCalls.Load()
}

// Sizes returns the size each lease with a valid name asked for, in order (0: the namespace's block
// size).
func (f *Fake) Sizes() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.sizes...)
}

// Prefers returns the server each lease with a valid name preferred, in order ("" for none).
func (f *Fake) Prefers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.prefers...)
}

// Blocks returns every block a lease moved a counter for, in order.
func (f *Fake) Blocks() []allocator.Block {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]allocator.Block(nil), f.blocks...)
}

func (f *Fake) checkName(name string) {
	if allocator.ValidateName(name) != nil {
		f.badNames.Add(1)
	}
}

// Lease leases as LeaseFrom with no preference.
func (f *Fake) Lease(ctx context.Context, namespace string, size int64) (allocator.Block, error) {
	return f.LeaseFrom(ctx, namespace, size, "")
}

// LeaseFrom counts and records the call, waits for a gate, a hang or a delay that is set, fails with
// the lease error when one is set, and otherwise leases from the Memory.
func (f *Fake) LeaseFrom(ctx context.Context, namespace string, size int64, prefer string) (allocator.Block, error) {
	call := f.leaseCalls.Add(1)
	f.checkName(namespace)
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.Block{}, err
	}
	f.mu.Lock()
	f.sizes = append(f.sizes, size)
	f.prefers = append(f.prefers, prefer)
	var gate chan struct{}
	if f.gate != nil && call > f.free {
		gate = f.gate
	}
	if prefer != "" && prefer == f.hangOn {
		gate = f.hangGate
	}
	delay := f.delay
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return allocator.Block{}, fmt.Errorf("%w: %w", allocator.ErrUnavailable, ctx.Err())
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return allocator.Block{}, fmt.Errorf("%w: %w", allocator.ErrUnavailable, ctx.Err())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaseErr != nil {
		return allocator.Block{}, f.leaseErr
	}
	if f.repeat && len(f.blocks) > 0 {
		return f.blocks[len(f.blocks)-1], nil
	}
	blk, err := f.Memory.LeaseFrom(ctx, namespace, size, prefer)
	if err != nil {
		return allocator.Block{}, err
	}
	f.leases.Add(1)
	f.blocks = append(f.blocks, blk)
	return blk, nil
}

// CreateNamespace counts the write and creates the namespace in the Memory.
func (f *Fake) CreateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	f.checkName(ns.Name)
	return f.wrote(f.Memory.CreateNamespace(ctx, ns))
}

// UpdateNamespace counts the write and updates the namespace in the Memory.
func (f *Fake) UpdateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	f.checkName(ns.Name)
	return f.wrote(f.Memory.UpdateNamespace(ctx, ns))
}

// wrote counts a write that succeeded.
func (f *Fake) wrote(ns allocator.Namespace, err error) (allocator.Namespace, error) {
	if err == nil {
		f.writes.Add(1)
	}
	return ns, err
}

// Namespace counts the read and fails with the namespace error when one is set.
func (f *Fake) Namespace(ctx context.Context, name string) (allocator.Namespace, error) {
	f.nsReads.Add(1)
	f.checkName(name)
	f.mu.Lock()
	err := f.nsErr
	f.mu.Unlock()
	if err != nil {
		return allocator.Namespace{}, err
	}
	return f.Memory.Namespace(ctx, name)
}

// Namespaces counts the call and fails with the list error when one is set.
func (f *Fake) Namespaces(ctx context.Context) ([]allocator.Namespace, error) {
	f.listCalls.Add(1)
	f.mu.Lock()
	err := f.listErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return f.Memory.Namespaces(ctx)
}
