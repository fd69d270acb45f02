package client

import (
	"errors"
	"fmt"
	"time"
)

// retry starts the leases needed once a backoff has passed (from a timer).
func (c *Client) retry() {
	c.mu.Lock()
	c.startLeasesLocked()
	c.mu.Unlock()
}

// needLeaseLocked reports whether to start a lease now: the IDs cached and asked for by the leases in
// flight are below the low-water mark (which is at least 1, so waiting callers, who find none, always
// qualify), fewer leases than WithMaxInFlight are in flight, and no backoff is running. Until the first
// block has landed, one lease at a time, and none while the namespace's settings are read after it.
func (c *Client) needLeaseLocked() bool {
	f := &c.flight
	if c.life.closed || c.ledger.uncarved+f.ids >= c.size.lowWater || f.n >= c.cfg.maxInFlight {
		return false
	}
	if f.learning || (f.n > 0 && c.count.refills == 0) {
		return false
	}
	return !c.cfg.clock.Now().Before(c.retrying.backoffTo)
}

// startLeasesLocked starts leases while one is needed, each in a goroutine of its own. Whoever sees the
// need starts them (New, a caller carving a run, a lease that lands, a backoff timer): on a busy process
// every hop from one goroutine to another may wait for a processor, so there is no refill goroutine
// to wake.
func (c *Client) startLeasesLocked() {
	for c.needLeaseLocked() {
		size := c.requestSizeLocked()
		ids := size
		if ids == 0 {
			ids = max(c.size.nsBlock, 1)
		}
		c.flight.start(ids)
		r := &refill{size: size, ids: ids, start: c.cfg.clock.Now(), open: 1}
		c.armHedgeLocked(r)
		c.life.wg.Add(1)
		go c.request(r, false)
	}
}

// request is one request of refill r, its first or its hedge: it takes a block from the source and,
// when the answer settles r, adds the block to the cache and starts the leases needed next. A block
// that comes after the other request settled r is a spare.
func (c *Client) request(r *refill, hedge bool) {
	defer c.life.wg.Done()
	start := c.cfg.clock.Now()
	blk, err := c.src.lease(c.life.ctx, r.size, &r.route, hedge)
	now := c.cfg.clock.Now()
	var useBy time.Time
	if err == nil {
		useBy, err = c.checkBlock(blk, now) // before the lock: callers carving runs share it
	}

	c.lockForRefill()
	defer c.mu.Unlock()
	if err != nil || r.route.failedOver.Load() {
		c.hedge.noteFailure(now)
	}
	if !c.settleLocked(r, hedge, err) {
		switch {
		case err == nil && r.settled:
			c.spareLocked(blk, useBy, now, now.Sub(start))
		case err != nil && hedge:
			c.rehedgeLocked(r)
		}
		return
	}
	if err == nil {
		// Only the answers used: a late one would teach the delay to wait for a path that hung.
		c.hedge.noteRequest(start, now.Sub(start), &c.cfg)
	}
	c.flight.end(r.ids)
	if c.life.closed {
		return // the block is a gap
	}
	leased := err == nil
	if leased {
		err = c.ledger.overlap(blk)
	}
	c.finishLocked(blk, useBy, err, r.size, now.Sub(r.start))
	if leased && !c.size.settingsOK {
		c.size.settingsOK, c.flight.learning = true, true
		c.mu.Unlock()
		ns, err := c.src.settings(c.life.ctx)
		c.lockForRefill()
		c.flight.learning = false
		if c.life.closed {
			return
		}
		c.size.learnSettings(ns, err)
	}
	c.startLeasesLocked()
}

// finishLocked records the outcome of a lease and adds its block, to be served until useBy (zero:
// no expiry), to the cache.
func (c *Client) finishLocked(blk Block, useBy time.Time, err error, size int64, took time.Duration) {
	now := c.cfg.clock.Now()
	if err != nil {
		c.count.refillErrors++
		c.cfg.hooks.refill(0, took, err)
		c.retrying.lastErr = err
		if errors.Is(err, ErrInvalidSize) && size > 1 && !errors.Is(err, ErrBadResponse) {
			// The namespace's maximum is below what we asked; ask for less, at once.
			c.size.sizeCap = size / 2
			return
		}
		var se *StatusError
		if errors.As(err, &se) && se.Held > 0 && se.RetryAfter == 0 && took >= se.Held/2 {
			// The server held the lease while no ticket server was in rotation, as asked, and answers
			// as soon as one is back: that was the wait. A backoff begun now could outlast the outage,
			// so the lease is asked again at once, and the next failure that is not held backs off
			// from the start.
			c.retrying.failures = 0
			c.retrying.backoffTo = time.Time{}
			c.retrying.stop()
			return
		}
		c.retrying.failures++
		wait := c.backoffLocked()
		if se != nil && se.RetryAfter > wait {
			wait = se.RetryAfter
		}
		c.retrying.backoffTo = now.Add(wait)
		c.retrying.stop()
		c.retrying.stopRetry = c.cfg.clock.AfterFunc(wait, c.retry)
		if permanent(err) {
			c.retrying.permErr = fmt.Errorf("client: namespace %s: %w", c.ns, err)
			c.waiters.broadcast()
		}
		return
	}

	c.retrying.succeeded()
	c.size.noteLatency(took, now, c.count.refills == 0)
	c.count.refills++
	c.cfg.hooks.refill(blk.Size, took, nil)
	c.size.noteBlock(blk.Size, useBy, now)
	c.setLowWaterLocked()
	c.cacheLocked(blk, useBy, now)
}

// cacheLocked adds a block, to be served until useBy (zero: no expiry), to the cache, and wakes the
// callers waiting.
func (c *Client) cacheLocked(blk Block, useBy, now time.Time) {
	l := c.ledger.add(blk, useBy)
	if !useBy.IsZero() {
		l.stop = c.cfg.clock.AfterFunc(useBy.Sub(now), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.life.closed {
				c.revokeLocked(l)
			}
		})
	}
	if c.waiters.callers.Load() > 1 {
		c.fillShardsLocked() // a caller alone carves its own run, from the front of the block
	}
	c.waiters.broadcast()
}

// checkBlock refuses a block that is malformed, of another namespace, or (nearly) expired; it returns
// when to stop serving the block.
func (c *Client) checkBlock(blk Block, now time.Time) (time.Time, error) {
	if err := blk.validate(); err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if blk.Namespace != "" && blk.Namespace != c.ns {
		return time.Time{}, fmt.Errorf("%w: asked for a block of %s, got one of %s", ErrBadResponse, c.ns, blk.Namespace)
	}
	if blk.ExpiresAt.IsZero() {
		return time.Time{}, nil
	}
	// Stop a little before the expiry, for the time a claimed ID takes to reach its caller and for
	// clocks that disagree a little.
	left := blk.ExpiresAt.Sub(now)
	useBy := blk.ExpiresAt.Add(-min(left/20, time.Second))
	if !now.Before(useBy) {
		return time.Time{}, fmt.Errorf("%w: block %v expired at %s, before it arrived at %s (do the clocks agree?)",
			ErrBadResponse, blk, blk.ExpiresAt.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	return useBy, nil
}

// overlaps reports whether two blocks of the same step and residue share an ID. Blocks of different
// steps come from differently configured servers and are not compared.
func overlaps(a, b Block) bool {
	if a.Step != b.Step || a.Step < 1 || (a.Start-b.Start)%a.Step != 0 {
		return false
	}
	aLast, _ := a.last()
	bLast, _ := b.last()
	return a.Start <= bLast && b.Start <= aLast
}

// backoffLocked is the wait after the current run of failures: exponential, jittered to between half
// and all of it.
func (c *Client) backoffLocked() time.Duration { return c.backoffFor(c.retrying.failures) }

// backoffFor is the wait after n failures in a row (see WithBackoff).
func (c *Client) backoffFor(n int) time.Duration { return c.cfg.retryPolicy().Wait(n) }

// permanent reports whether waiting will not cure a refill error, so waiting callers get it at once.
// The refill is still retried with backoff: a namespace can be created, a token fixed.
func permanent(err error) bool {
	if errors.Is(err, ErrBadResponse) || errors.Is(err, ErrOverlap) {
		return false // the server misbehaved; another answer may be fine
	}
	for _, e := range []error{ErrNotFound, ErrInvalidNamespace, ErrInvalidSize,
		ErrExhausted, ErrClosed, ErrUnauthorized, ErrForbidden, ErrBadRequest} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
