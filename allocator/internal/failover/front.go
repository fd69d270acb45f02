package failover

import (
	"context"
	"errors"

	"github.com/ticketd/ticketd/allocator"
)

// Front is what a backend of several servers serves from its Set alone: leases with failover,
// namespace reads, the servers' names and health. A backend's Store embeds it and gives it its own
// lease attempt, the way to give a server a namespace it lacks, and its read of the servers' counters.
type Front[S Server[R], R Record[R]] struct {
	set     *Set[S, R]
	attempt func(ctx context.Context, s S, rec R, size int64) (allocator.Block, error)
	ensure  func(ctx context.Context, s S, rec R) error
	missing error
	states  States
}

// NewFront returns the Front of set. attempt is one lease on one server; a server whose attempt fails
// with missing (it was away when the namespace was created, and nothing says it ever issued from it)
// is given the namespace with ensure, then asked again. states reads the servers' counters.
func NewFront[S Server[R], R Record[R]](set *Set[S, R], attempt func(ctx context.Context, s S, rec R, size int64) (allocator.Block, error),
	ensure func(ctx context.Context, s S, rec R) error, missing error, states States) Front[S, R] {
	return Front[S, R]{set: set, attempt: attempt, ensure: ensure, missing: missing, states: states}
}

// Servers returns the server names in configuration order.
func (f Front[S, R]) Servers() []string { return f.set.Names() }

// Health reports each server's state in configuration order.
func (f Front[S, R]) Health() []allocator.ServerHealth { return f.set.Health() }

// Lease takes a block of size IDs (0 means the namespace's block size) from the next usable server,
// failing over to the others. An attempt whose outcome is unknown is abandoned and the retry takes a
// new range (the lost one is a gap, never reissued).
func (f Front[S, R]) Lease(ctx context.Context, namespace string, size int64) (allocator.Block, error) {
	return f.LeaseFrom(ctx, namespace, size, "")
}

// LeaseFrom is Lease with a preferred server (a name from Servers): it is tried first, also while it is
// out of rotation (it is then checked again first). An empty prefer means round-robin.
func (f Front[S, R]) LeaseFrom(ctx context.Context, namespace string, size int64, prefer string) (allocator.Block, error) {
	return f.set.Lease(ctx, namespace, size, prefer, f.leaseOn)
}

// leaseOn is one attempt on one server, under the attempt's timeout.
func (f Front[S, R]) leaseOn(ctx context.Context, s S, rec R, size int64) (allocator.Block, error) {
	blk, err := f.attempt(ctx, s, rec, size)
	if errors.Is(err, f.missing) {
		if err = f.ensure(ctx, s, rec); err == nil {
			blk, err = f.attempt(ctx, s, rec, size)
		}
	}
	return blk, err
}

// Namespace returns the namespace's settings and each server's counter.
func (f Front[S, R]) Namespace(ctx context.Context, name string) (allocator.Namespace, error) {
	return f.set.Namespace(ctx, name, f.states)
}

// Settings returns the namespace's settings without reading any server's counter.
func (f Front[S, R]) Settings(ctx context.Context, name string) (allocator.Namespace, error) {
	return f.set.ReadSettings(ctx, name)
}

// SharedSettings returns the namespace's settings as leases use them, refreshed with every other
// namespace's (see Set.SharedSettings).
func (f Front[S, R]) SharedSettings(ctx context.Context, name string) (allocator.Namespace, error) {
	return f.set.SharedSettings(ctx, name)
}

// Namespaces lists the namespaces known to any usable server, sorted by name, each with every
// server's counter.
func (f Front[S, R]) Namespaces(ctx context.Context) ([]allocator.Namespace, error) {
	return f.set.Namespaces(ctx, f.states)
}
