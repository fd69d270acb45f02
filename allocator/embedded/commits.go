package embedded

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/ticketd/ticketd/allocator"
)

// commits groups the leases that arrive while one commit is being written, and writes them all with
// the next: one transaction and one fsync for the group, each caller getting its own block (or its
// own error, which leaves the others alone). A lease that finds nothing in flight commits at once, so
// grouping costs a lone caller nothing; under load the store's lease rate is no longer one fsync per
// lease. A caller that gives up while its group is written leaves its block unused: a gap.
type commits struct {
	mu      sync.Mutex
	running bool
	pending []*leaseCall
	written atomic.Int64 // transactions written, for tests
}

type leaseRequest struct {
	namespace string
	size      int64
}

type leaseCall struct {
	req  leaseRequest
	blk  allocator.Block
	err  error
	done chan struct{}
}

func (c *commits) lease(ctx context.Context, s *Store, req leaseRequest) (allocator.Block, error) {
	call := &leaseCall{req: req, done: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, call)
	if !c.running {
		c.running = true
		group := c.pending
		c.pending = nil
		c.mu.Unlock()
		s.commit(group)
		c.next(s)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-call.done:
		return call.blk, call.err
	case <-ctx.Done():
		return allocator.Block{}, ctx.Err()
	}
}

// next writes the group that gathered meanwhile, in the background, or notes that no commit runs.
func (c *commits) next(s *Store) {
	c.mu.Lock()
	group := c.pending
	c.pending = nil
	if len(group) == 0 {
		c.running = false
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go func() {
		s.commit(group)
		c.next(s)
	}()
}

// commit writes one group's leases in one transaction, in the order they came.
func (s *Store) commit(group []*leaseCall) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, call := range group {
			call.blk, call.err = s.take(b, call.req)
			if call.err != nil && !isRequestError(call.err) {
				return call.err
			}
		}
		return nil
	})
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		err = allocator.ErrClosed
	}
	s.commits.written.Add(1)
	for _, call := range group {
		if err != nil {
			call.blk, call.err = allocator.Block{}, err // nothing of the group was written
		}
		close(call.done)
	}
}

// isRequestError reports whether a lease failed for its own request (a missing namespace, a bad size,
// the end of the ID space) rather than for the storage.
func isRequestError(err error) bool {
	return errors.Is(err, allocator.ErrNotFound) || errors.Is(err, allocator.ErrInvalidSize) || errors.Is(err, allocator.ErrExhausted)
}
