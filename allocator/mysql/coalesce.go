package mysql

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ticketd/ticketd/allocator"
)

// coalescer groups the leases of one namespace on one server that arrive while an UPDATE for it is in
// flight, and takes them all with the next UPDATE: one statement, one round trip and one commit for the
// whole group, each caller getting its own slice of the range. Callers of one namespace would otherwise
// queue on the row's lock, each waiting for the commit (and fsync) of the one before; grouped, a
// server's lease rate is no longer bounded by one commit per lease. It is the ticket server's group
// commit, done one level up.
//
// Every block still comes from the range of the statement that took it, never from a second read, and
// a group runs only under the settings its first caller found checked, on a server still in rotation.
// A caller that gives up while its group is in flight leaves its slice unused: a gap.
type coalescer struct {
	mu       sync.Mutex
	inflight map[string]bool
	pending  map[string]*leaseGroup
}

// errChangedWhileQueued means a lease group's server went out of rotation, or was checked again with
// other settings, while the group waited: it does not run there.
var errChangedWhileQueued = errors.New("mysql: ticket server went down or was checked again with other settings while leases waited for it")

// leaseGroup is the leases waiting for the next UPDATE of a namespace.
type leaseGroup struct {
	ns     allocator.Namespace
	view   *serverVars // the settings checked when the group formed
	sizes  []int64
	done   chan struct{}
	blocks []allocator.Block
	errs   []error // per caller; nil entries where blocks holds its block
}

// lease takes a block of size IDs of ns on s, alone when no UPDATE of ns is in flight, or with the
// group that waits for the next one.
func (s *server) lease(ctx context.Context, ns allocator.Namespace, size int64) (allocator.Block, error) {
	v := s.view()
	if v == nil {
		return allocator.Block{}, fmt.Errorf("%s: %w", s.Name(), errNotChecked)
	}
	c := &s.co
	c.mu.Lock()
	if c.inflight == nil {
		c.inflight, c.pending = map[string]bool{}, map[string]*leaseGroup{}
	}
	if !c.inflight[ns.Name] {
		c.inflight[ns.Name] = true
		c.mu.Unlock()
		blocks, err := s.leaseUpdate(ctx, v, ns, []int64{size})
		s.next(ns.Name)
		if err != nil {
			return allocator.Block{}, err
		}
		return blocks[0], nil
	}
	g := c.pending[ns.Name]
	if g == nil {
		g = &leaseGroup{ns: ns, view: v, done: make(chan struct{})}
		c.pending[ns.Name] = g
	}
	i := len(g.sizes)
	g.sizes = append(g.sizes, size)
	c.mu.Unlock()
	select {
	case <-g.done:
		return g.blocks[i], g.errs[i]
	case <-ctx.Done():
		return allocator.Block{}, ctx.Err()
	}
}

// next starts the UPDATE of the group waiting on a namespace, if any; otherwise no UPDATE of it is in
// flight any more.
func (s *server) next(name string) {
	c := &s.co
	c.mu.Lock()
	g := c.pending[name]
	delete(c.pending, name)
	if g == nil {
		delete(c.inflight, name) // not set to false: the map would keep every namespace ever leased
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go s.runGroup(g)
}

// runGroup takes the group's leases with one UPDATE, under an attempt timeout of its own (the callers
// wait under theirs) — unless the server went out of rotation or was checked again with other settings
// while the group waited.
func (s *server) runGroup(g *leaseGroup) {
	ctx, cancel := s.pair.cfg.Runtime.Timeout(context.Background(), s.pair.cfg.AttemptTimeout)
	var blocks []allocator.Block
	var err error
	if !s.Usable() || s.view() != g.view {
		err = fmt.Errorf("%s: %w", s.Name(), errChangedWhileQueued)
	} else {
		blocks, err = s.leaseUpdate(ctx, g.view, g.ns, g.sizes)
	}
	g.blocks, g.errs = make([]allocator.Block, len(g.sizes)), make([]error, len(g.sizes))
	switch {
	case err == nil:
		copy(g.blocks, blocks)
		// The namespace's ceiling fell inside the group's range: the callers after it get nothing here.
		for i := len(blocks); i < len(g.sizes); i++ {
			g.errs[i] = fmt.Errorf("%w: namespace %q reached its max_id %d on %s", allocator.ErrExhausted, g.ns.Name, g.ns.MaxID, s.Name())
		}
	case errors.Is(err, allocator.ErrExhausted) && len(g.sizes) > 1:
		// Together they do not fit below MaxInt64; some may alone. Each caller gets its own answer.
		for i, n := range g.sizes {
			b, err := s.leaseUpdate(ctx, g.view, g.ns, []int64{n})
			if err == nil {
				g.blocks[i] = b[0]
			}
			g.errs[i] = err
		}
	default:
		for i := range g.errs {
			g.errs[i] = err
		}
	}
	cancel()
	close(g.done)
	s.next(g.ns.Name)
}
