package client

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ticketd/ticketd/allocator"
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
	if c.closed || c.uncarved+f.ids >= c.lowWater || f.n >= c.cfg.maxInFlight {
		return false
	}
	if f.learning || (f.n > 0 && c.refills == 0) {
		return false
	}
	return !c.cfg.clock.Now().Before(c.backoffTo)
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
			ids = max(c.nsBlock, 1)
		}
		f := &c.flight
		f.n++
		f.ids += ids
		f.peak = max(f.peak, f.n)
		r := &refill{size: size, ids: ids, start: c.cfg.clock.Now(), open: 1}
		c.armHedgeLocked(r)
		c.wg.Add(1)
		go c.request(r, false)
	}
}

// request is one request of refill r, its first or its hedge: it takes a block from the source and,
// when the answer settles r, adds the block to the cache and starts the leases needed next. A block
// that comes after the other request settled r is a spare.
func (c *Client) request(r *refill, hedge bool) {
	defer c.wg.Done()
	start := c.cfg.clock.Now()
	blk, err := c.src.lease(c.ctx, r.size, &r.route, hedge)
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
		if err == nil && r.settled {
			c.spareLocked(blk, useBy, now)
		}
		return
	}
	if err == nil {
		// Only the answers used: a late one would teach the delay to wait for a path that hung.
		c.hedge.noteRequest(start, now.Sub(start), &c.cfg)
	}
	c.flight.n--
	c.flight.ids -= r.ids
	if c.closed {
		return // the block is a gap
	}
	leased := err == nil
	if leased {
		err = c.overlapLocked(blk)
	}
	c.finishLocked(blk, useBy, err, r.size, now.Sub(r.start))
	if leased && !c.settingsOK {
		c.settingsOK, c.flight.learning = true, true
		c.mu.Unlock()
		ns, err := c.src.settings(c.ctx)
		c.lockForRefill()
		c.flight.learning = false
		if c.closed {
			return
		}
		c.learnSettingsLocked(ns, err)
	}
	c.startLeasesLocked()
}

// learnSettingsLocked takes the namespace's block size bounds and lease TTL, read once after the first
// block. When the source cannot tell (an older server, a token that may not read settings), the
// defaults stand and a refused size lowers the cap instead.
func (c *Client) learnSettingsLocked(ns allocator.Namespace, err error) {
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

// rateWindow is the shortest time the demand is measured over, unless a whole block was taken sooner:
// carves and leases within it keep the rate measured before, so that leases starting one after another
// do not each measure almost nothing.
const rateWindow = 10 * time.Millisecond

// sampleRateLocked measures the demand since the last sample, once rateWindow has passed or a block's
// worth of IDs was carved, and moves the low-water mark with it. Callers sample as they carve runs,
// and leases as they start.
func (c *Client) sampleRateLocked(now time.Time) {
	dt := now.Sub(c.rateAt)
	carved := c.carvedTotal - c.rateCarved
	if dt <= 0 || dt < rateWindow && carved < max(c.lastSize, 1) {
		return
	}
	sample := float64(carved) / max(dt, time.Millisecond).Seconds()
	// Follow a rising rate at once (a stall costs more than a large block); let a falling one decay.
	c.rate = max(sample, (c.rate+sample)/2)
	c.rateAt, c.rateCarved = now, c.carvedTotal
	if c.refills > 0 {
		c.setLowWaterLocked()
	}
}

// requestSizeLocked samples the demand and returns the size of the next block: enough for the refill
// interval at the observed rate, and for several refill latencies, within the bounds and short enough
// to be used up before its lease expires. 0 asks for the namespace's block size.
func (c *Client) requestSizeLocked() int64 {
	c.sampleRateLocked(c.cfg.clock.Now())
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

// refillLatency is what the low-water mark plans for: the larger of the moving average and the slowest
// recent refill.
func (c *Client) refillLatency() time.Duration { return max(c.latency, c.slowest) }

// slowestHalfLife is how fast a slow refill is forgotten: a busy process or server is slow in bursts,
// and the next burst is likely while the last is recent.
const slowestHalfLife = time.Second

// noteLatencyLocked records how long a successful refill took.
func (c *Client) noteLatencyLocked(took time.Duration, now time.Time) {
	if c.refills == 0 {
		c.latency = took
	} else {
		c.latency = (3*c.latency + took) / 4
	}
	if dt := now.Sub(c.slowestAt); dt > 0 {
		c.slowest = time.Duration(float64(c.slowest) * math.Exp2(-dt.Seconds()/slowestHalfLife.Seconds()))
	}
	c.slowest, c.slowestAt = max(c.slowest, took), now
}

// schedulingSlack is the time a refill may wait for a processor before it starts: the Go scheduler
// preempts a busy goroutine after 10ms.
const schedulingSlack = 10 * time.Millisecond

// setLowWaterLocked sets the mark so that a refill started at it lands before the cache runs out at the
// observed rate: room for two refill latencies plus the scheduling slack, plus the hedge delay when the
// source can hedge (so that a refill whose first request hangs still lands, through its hedge), and
// never below 20% of the last block. The mark counts the IDs cached and those asked for by the leases
// in flight; when it is more than a block, several leases are in flight and the cache holds several
// blocks. Blocks that expire hold no more than half their life's worth: IDs beyond it would expire
// unserved.
func (c *Client) setLowWaterLocked() {
	runway := 2*c.refillLatency() + schedulingSlack
	if c.hedge.paths > 1 {
		runway += c.hedge.delay
	}
	if life := c.blockLife(); life > 0 {
		runway = min(runway, life/2)
	}
	c.lowWater = max(c.lastSize/5, int64(math.Ceil(c.rate*runway.Seconds())), 1)
}

// finishLocked records the outcome of a lease and adds its block, to be served until useBy (zero:
// no expiry), to the cache.
func (c *Client) finishLocked(blk allocator.Block, useBy time.Time, err error, size int64, took time.Duration) {
	now := c.cfg.clock.Now()
	if err != nil {
		c.refillErrors++
		c.lastErr = err
		if errors.Is(err, allocator.ErrInvalidSize) && size > 1 && !errors.Is(err, ErrBadResponse) {
			// The namespace's maximum is below what we asked; ask for less, at once.
			c.sizeCap = size / 2
			return
		}
		c.failures++
		wait := c.backoffLocked()
		var se *StatusError
		if errors.As(err, &se) && se.RetryAfter > wait {
			wait = se.RetryAfter
		}
		c.backoffTo = now.Add(wait)
		if c.stopRetry != nil {
			c.stopRetry()
		}
		c.stopRetry = c.cfg.clock.AfterFunc(wait, c.retry)
		if permanent(err) {
			c.permErr = fmt.Errorf("client: namespace %s: %w", c.ns, err)
			c.broadcastLocked()
		}
		return
	}

	c.failures, c.permErr, c.lastErr, c.backoffTo = 0, nil, nil, time.Time{}
	c.noteLatencyLocked(took, now)
	c.refills++
	c.lastSize = blk.Size
	c.lastLife = 0
	if !useBy.IsZero() {
		c.lastLife = useBy.Sub(now)
	}
	if c.nsBlock == 0 {
		c.nsBlock = blk.Size // the first lease asks for the namespace's block size
	}
	c.setLowWaterLocked()
	c.cacheLocked(blk, useBy, now)
}

// cacheLocked adds a block, to be served until useBy (zero: no expiry), to the cache, and wakes the
// callers waiting.
func (c *Client) cacheLocked(blk allocator.Block, useBy, now time.Time) {
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
	if c.waiting.Load() > 1 {
		c.fillShardsLocked() // a caller alone carves its own run, from the front of the block
	}
	c.broadcastLocked()
}

// checkBlock refuses a block that is malformed, of another namespace, or (nearly) expired; it returns
// when to stop serving the block.
func (c *Client) checkBlock(blk allocator.Block, now time.Time) (time.Time, error) {
	if err := blk.Validate(); err != nil {
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

// overlapLocked refuses a block that shares IDs with one of the last blocks received.
func (c *Client) overlapLocked(blk allocator.Block) error {
	for i := range min(c.recentN, len(c.recent)) {
		if overlaps(c.recent[i], blk) {
			return fmt.Errorf("%w: %v and %v", ErrOverlap, c.recent[i], blk)
		}
	}
	return nil
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
func (c *Client) backoffLocked() time.Duration { return c.cfg.retryPolicy().Wait(c.failures) }

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
