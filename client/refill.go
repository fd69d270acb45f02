package client

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// refillLoop is the Client's one background goroutine: every lease goes through it, so at most one is
// in flight however many callers cross a block boundary together.
func (c *Client) refillLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		}
		for c.refillOnce() {
		}
	}
}

// poke wakes the refill goroutine (from timers).
func (c *Client) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// needRefillLocked reports whether a block should be leased now: the uncarved IDs are below the
// low-water mark (which is at least 1, so waiting callers, who find none, always qualify).
func (c *Client) needRefillLocked() bool {
	return !c.closed && c.uncarved < c.lowWater
}

// refillOnce leases one block if one is needed and no backoff is running; it reports whether to look
// again at once.
func (c *Client) refillOnce() bool {
	c.lockForRefill()
	if !c.needRefillLocked() || c.cfg.clock.Now().Before(c.backoffTo) {
		c.mu.Unlock()
		return false
	}
	size := c.requestSizeLocked()
	c.mu.Unlock()

	start := c.cfg.clock.Now()
	blk, err := c.src.lease(c.ctx, size)
	took := c.cfg.clock.Now().Sub(start)

	c.lockForRefill()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	again := c.finishLocked(blk, err, size, took)
	if err == nil && !c.settingsOK {
		c.settingsOK = true
		c.mu.Unlock()
		c.learnSettings()
		c.lockForRefill()
	}
	return again
}

// learnSettings asks the source for the namespace's block size bounds and lease TTL, once. When the
// source cannot tell (an older server, a token that may not read settings), the defaults stand and a
// refused size lowers the cap instead.
func (c *Client) learnSettings() {
	ns, err := c.src.settings(c.ctx)
	c.lockForRefill()
	defer c.mu.Unlock()
	if err != nil {
		return
	}
	if ns.MaxBlockSize > 0 {
		c.nsMax = ns.MaxBlockSize
	}
	if ns.BlockSize > 0 && c.nsBlock == 0 {
		c.nsBlock = ns.BlockSize
	}
	c.ttl = ns.LeaseTTL
}

// bounds returns the smallest and largest block size to ask for.
func (c *Client) bounds() (lo, hi int64) {
	hi = int64(allocator.DefaultMaxBlockSize)
	if c.nsMax > 0 {
		hi = c.nsMax
	}
	if c.cfg.maxBlock > 0 {
		hi = min(hi, c.cfg.maxBlock)
	}
	if c.sizeCap > 0 {
		hi = min(hi, c.sizeCap)
	}
	lo = max(c.nsBlock, 1)
	if c.cfg.minBlock > 0 {
		lo = c.cfg.minBlock
	}
	return min(lo, hi), hi
}

// requestSizeLocked samples the demand and returns the size of the next block: enough for the refill
// interval at the observed rate, and for several refill latencies, within the bounds and short enough
// to be used up before its lease expires. 0 asks for the namespace's block size.
func (c *Client) requestSizeLocked() int64 {
	now := c.cfg.clock.Now()
	if dt := now.Sub(c.rateAt); dt > 0 {
		sample := float64(c.carvedTotal-c.rateCarved) / max(dt, time.Millisecond).Seconds()
		// Follow a rising rate at once (a stall costs more than a large block); let a falling one decay.
		c.rate = max(sample, (c.rate+sample)/2)
		c.rateAt, c.rateCarved = now, c.carvedTotal
	}
	if c.refills == 0 && c.cfg.minBlock == 0 && c.cfg.maxBlock == 0 {
		return 0
	}
	want := c.rate * c.cfg.refillInterval.Seconds()
	want = max(want, c.rate*4*c.refillLatency().Seconds())
	if life := c.blockLife(); life > 0 {
		want = min(want, c.rate*life.Seconds()/2)
	}
	lo, hi := c.bounds()
	if want >= float64(hi) {
		return hi
	}
	return max(lo, min(hi, int64(math.Ceil(want))))
}

// blockLife is how long a block can be used: the namespace's lease TTL, or less when the last block
// came with less time left (a server that carves blocks from an older segment); 0 means unbounded.
func (c *Client) blockLife() time.Duration {
	switch {
	case c.lastLife > 0 && (c.ttl <= 0 || c.lastLife < c.ttl):
		return c.lastLife
	default:
		return max(c.ttl, 0)
	}
}

// refillLatency is what the low-water mark plans for: the larger of the moving average and the last.
func (c *Client) refillLatency() time.Duration { return max(c.latency, c.lastTook) }

// schedulingSlack is the time a refill may wait for a processor before it starts: the Go scheduler
// preempts a busy goroutine after 10ms.
const schedulingSlack = 10 * time.Millisecond

// setLowWaterLocked sets the mark so that a refill started at it lands before the cache runs out at the
// observed rate: room for two refill latencies plus the scheduling slack, and never below 20% of the
// last block. When that is more than a block, refills follow each other and the cache holds two.
func (c *Client) setLowWaterLocked() {
	runway := 2*c.refillLatency() + schedulingSlack
	c.lowWater = max(c.lastSize/5, int64(math.Ceil(c.rate*runway.Seconds())), 1)
}

// finishLocked records the outcome of a lease; it reports whether to look again at once.
func (c *Client) finishLocked(blk allocator.Block, err error, size int64, took time.Duration) bool {
	now := c.cfg.clock.Now()
	var useBy time.Time
	if err == nil {
		useBy, err = c.checkBlockLocked(blk, now)
	}
	if err != nil {
		c.refillErrors++
		c.lastErr = err
		if errors.Is(err, allocator.ErrInvalidSize) && size > 1 && !errors.Is(err, ErrBadResponse) {
			// The namespace's maximum is below what we asked; ask for less, at once.
			c.sizeCap = size / 2
			return true
		}
		c.failures++
		wait := c.backoffLocked()
		var se *StatusError
		if errors.As(err, &se) && se.RetryAfter > wait {
			wait = se.RetryAfter
		}
		c.backoffTo = now.Add(wait)
		if c.stopPoke != nil {
			c.stopPoke()
		}
		c.stopPoke = c.cfg.clock.AfterFunc(wait, c.poke)
		if permanent(err) {
			c.permErr = fmt.Errorf("client: namespace %s: %w", c.ns, err)
			c.broadcastLocked()
		}
		return false
	}

	c.failures, c.permErr, c.lastErr, c.backoffTo = 0, nil, nil, time.Time{}
	if c.refills == 0 {
		c.latency = took
	} else {
		c.latency = (3*c.latency + took) / 4
	}
	c.lastTook = took
	c.refills++
	c.lastSize = blk.Size
	c.lastLife = 0
	if !useBy.IsZero() {
		c.lastLife = useBy.Sub(now)
	}
	if c.nsBlock == 0 {
		c.nsBlock = blk.Size // the first lease asks for the namespace's block size
	}
	c.recent[c.recentN%len(c.recent)] = blk
	c.recentN++
	l := &lease{blk: blk, useBy: useBy}
	c.leases = append(c.leases, l)
	c.uncarved += blk.Size
	if !useBy.IsZero() {
		c.expiring = append(c.expiring, l)
		l.stop = c.cfg.clock.AfterFunc(useBy.Sub(now), func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.closed {
				c.revokeLocked(l)
			}
		})
	}
	c.setLowWaterLocked()
	c.broadcastLocked()
	return true
}

// checkBlockLocked refuses a block that is malformed, of another namespace, overlapping one already
// received, or (nearly) expired; it returns when to stop serving the block.
func (c *Client) checkBlockLocked(blk allocator.Block, now time.Time) (time.Time, error) {
	if err := blk.Validate(); err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	if blk.Namespace != "" && blk.Namespace != c.ns {
		return time.Time{}, fmt.Errorf("%w: asked for a block of %s, got one of %s", ErrBadResponse, c.ns, blk.Namespace)
	}
	for i := range min(c.recentN, len(c.recent)) {
		if overlaps(c.recent[i], blk) {
			return time.Time{}, fmt.Errorf("%w: %v and %v", ErrOverlap, c.recent[i], blk)
		}
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
func overlaps(a, b allocator.Block) bool {
	if a.Step != b.Step || a.Step < 1 || (a.Start-b.Start)%a.Step != 0 {
		return false
	}
	aLast, _ := a.Last()
	bLast, _ := b.Last()
	return a.Start <= bLast && b.Start <= aLast
}

// backoffLocked is the wait after the current run of failures: exponential, jittered to between half
// and all of it.
func (c *Client) backoffLocked() time.Duration {
	d := c.cfg.backoffMin
	for i := 1; i < c.failures && d < c.cfg.backoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.backoffMax)
	return d/2 + time.Duration(c.cfg.jitter()*float64(d/2))
}

// permanent reports whether waiting will not cure a refill error, so waiting callers get it at once.
// The refill is still retried with backoff: a namespace can be created, a token fixed.
func permanent(err error) bool {
	if errors.Is(err, ErrBadResponse) || errors.Is(err, ErrOverlap) {
		return false // the server misbehaved; another answer may be fine
	}
	for _, e := range []error{allocator.ErrNotFound, allocator.ErrInvalidNamespace, allocator.ErrInvalidSize,
		allocator.ErrExhausted, allocator.ErrClosed, ErrUnauthorized, ErrForbidden, ErrBadRequest} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
