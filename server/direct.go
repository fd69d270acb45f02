package server

import (
	"context"
	"errors"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// directAnswer is what one lease of a direct request brought.
type directAnswer struct {
	blk   allocator.Block
	err   error
	ask   string // the server it asked first
	hedge bool
	start time.Time
	took  time.Duration
}

// leaseDirect leases a block too big for the segments from the backend. Like a segment lease it is
// hedged: when the backend can choose a server and no answer has come within the hedge delay, a second
// lease of the same size goes to another server (see preferFor: also while none is known healthy), and
// the first block to arrive is used. The other, if it comes, is never handed out: a gap. The leases
// run on the cache's context, so that one that waits for a server that hangs ends at the backend's
// attempt timeout and takes that server out of rotation, whatever became of the request.
func (c *segmentCache) leaseDirect(ctx context.Context, sp *space, size int64) (allocator.Block, error) {
	if !c.hedging() {
		return c.backend.Lease(ctx, sp.name, size)
	}
	sp.mu.Lock()
	first := c.preferFor(sp.lastDirect) // the servers in turn
	delay := sp.hedgeDelayLocked()
	sp.mu.Unlock()
	if first == "" {
		return c.backend.Lease(ctx, sp.name, size)
	}
	answers := make(chan directAnswer, 2) // room for both: a late answer is dropped, not waited for
	if err := c.sendDirect(sp, size, first, false, answers); err != nil {
		return allocator.Block{}, err
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	open := 1
	var errs []error
	for {
		select {
		case a := <-answers:
			open--
			sp.mu.Lock()
			sp.noteOutcomeLocked(a.ask, a.blk, a.err)
			if a.err == nil {
				sp.lastDirect = a.blk.Server
				sp.answers.Observe(a.start, a.took)
				if a.hedge {
					c.metrics.observeHedge(sp.name, true)
				}
			}
			sp.mu.Unlock()
			if a.err == nil {
				return a.blk, nil
			}
			errs = append(errs, a.err)
			if open == 0 {
				// The backend fails over by itself: a lease that failed had no server left to ask.
				return allocator.Block{}, errors.Join(errs...)
			}
		case <-timer.C:
			sp.mu.Lock()
			other := c.preferFor(first)
			sp.mu.Unlock()
			if other == "" || other == first {
				continue // no other server to ask
			}
			if err := c.sendDirect(sp, size, other, true, answers); err != nil {
				continue
			}
			open++
			c.metrics.observeHedge(sp.name, false)
		case <-ctx.Done():
			return allocator.Block{}, ctx.Err()
		}
	}
}

// sendDirect starts one lease of a direct request, asking the server named prefer first; its answer
// goes to answers.
func (c *segmentCache) sendDirect(sp *space, size int64, prefer string, hedge bool, answers chan<- directAnswer) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return allocator.ErrClosed
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.FetchTimeout)
		defer cancel()
		start := c.now()
		blk, err := c.prefer.LeaseFrom(ctx, sp.name, size, prefer)
		c.metrics.observeFetch(err)
		answers <- directAnswer{blk: blk, err: err, ask: prefer, hedge: hedge, start: start, took: c.now().Sub(start)}
	}()
	return nil
}
