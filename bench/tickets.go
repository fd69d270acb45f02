package bench

import (
	"context"
	"sync"

	"github.com/ticketd/ticketd/allocator"
)

// idSource hands out ticket IDs one at a time; safe for concurrent use.
type idSource interface {
	Next(ctx context.Context) (int64, error)
}

// blockSource serves IDs from blocks it leases itself, one block at a time: the plain way of using a
// ticket backend, without the SDK's prefetch.
type blockSource struct {
	b    allocator.Backend
	ns   string
	size int64

	mu  sync.Mutex
	cur allocator.Block
	i   int64
}

func (s *blockSource) Next(ctx context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.i >= s.cur.Size {
		blk, err := s.b.Lease(ctx, s.ns, s.size)
		if err != nil {
			return 0, err
		}
		s.cur, s.i = blk, 0
	}
	id, err := s.cur.ID(s.i)
	s.i++
	return id, err
}
