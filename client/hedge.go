package client

import (
	"sync/atomic"
	"time"

	"github.com/ticketd/ticketd/internal/hedge"
)

// Hedged refills: a refill whose request has not been answered after the hedge delay sends a second
// lease for it to another URL. The first block to arrive is the refill's; the other, if it comes, is a
// spare, kept while the cache has room and otherwise dropped (a gap: it is never reused).

const (
	// hedgeFloor is the least derived delay: an answer later than usual by less is the scheduler's or
	// the network's noise, and a hedge would only double the load.
	hedgeFloor = 20 * time.Millisecond
	// firstHedgeDelay is the delay until a first request has been answered: the first also dials, and
	// may meet a server that has just started.
	firstHedgeDelay = time.Second
)

// refill is one lease in flight: its first request and, once the hedge delay has passed, maybe a hedge.
// Its fields but route are guarded by Client.mu.
type refill struct {
	size, ids int64 // asked for (0: the namespace's block size), and counted in flight
	start     time.Time
	route     route
	open      int  // requests not yet answered
	settled   bool // the first block, or the last failure, has been taken
	hedged    bool // a hedge was sent
	hedgeErrs int  // hedges that failed while the first request waited
	stopHedge func() bool
}

// route is what the requests of one refill share with the source: the URL the first request waits on,
// which its hedge avoids, whether the refill is settled, after which neither fails over, and whether a
// request failed over from a URL that failed.
type route struct {
	settled    atomic.Bool
	failedOver atomic.Bool
	first      atomic.Pointer[endpoint] // HTTP sources only
}

// hedging is a Client's state of hedged refills, guarded by Client.mu.
type hedging struct {
	paths   int           // URLs of the source: a hedge needs two
	delay   time.Duration // the current hedge delay
	answers hedge.Delay   // the latencies of the requests whose answers settled a refill

	slow, sent, won int64 // Stats.SlowRefills, Hedges and HedgesWon
}

// noteRequest records how long the request, begun at start, whose answer settled a refill took, and
// derives the delay. Answers to requests begun soon after a failure are not counted (see
// hedge.Recovery): they wait for what recovers, not for a path that is slow.
func (h *hedging) noteRequest(start time.Time, took time.Duration, cfg *config) {
	h.answers.Observe(start, took)
	h.delay = h.derive(cfg)
}

// noteFailure records that a request failed, or failed over from a URL that failed, at now.
func (h *hedging) noteFailure(now time.Time) { h.answers.Fail(now) }

// derive is the hedge delay: WithHedgeDelay, or the 95th percentile of the latencies of the recent
// requests whose answers were used, at least hedgeFloor and at most half the request timeout.
func (h *hedging) derive(cfg *config) time.Duration {
	if cfg.hedgeDelay > 0 {
		return cfg.hedgeDelay
	}
	return h.answers.Get(hedgeFloor, cfg.requestTimeout/2, firstHedgeDelay)
}

// runway is the time the low-water mark leaves for a hedge: the hedge delay when there is another URL
// to hedge to, else none.
func (h *hedging) runway() time.Duration {
	if h.paths > 1 {
		return h.delay
	}
	return 0
}

// armHedgeLocked starts r's hedge timer.
func (c *Client) armHedgeLocked(r *refill) {
	r.stopHedge = c.cfg.clock.AfterFunc(c.hedge.delay, func() { c.hedgeRefill(r) })
}

// hedgeRefill runs once r's hedge delay has passed: unless r is settled, it counts a slow refill and,
// when the source has another URL, sends the hedge. It runs again after a hedge that failed (see
// rehedgeLocked), and sends the hedge again.
func (c *Client) hedgeRefill(r *refill) {
	c.lockForRefill()
	defer c.mu.Unlock()
	if r.settled || c.life.closed {
		return
	}
	if !r.hedged {
		c.hedge.slow++
		if c.hedge.paths < 2 {
			return // nowhere else to ask: the refill is only counted
		}
		c.hedge.sent++
		r.hedged = true
		c.cfg.hooks.hedge(false)
	}
	r.open++
	c.life.wg.Add(1)
	go c.request(r, true)
}

// rehedgeLocked sends r's hedge again, after a backoff, once it failed while the first request still
// waits: at the end of an outage the other URLs may answer again a moment later, while the URL the
// first request waits on hangs, and the refill would wait for it to the request timeout. The backoff
// is WithBackoff's, counted over the refill's failed hedges, and at least the hedge delay.
func (c *Client) rehedgeLocked(r *refill) {
	if r.settled || c.life.closed {
		return
	}
	r.hedgeErrs++
	wait := max(c.hedge.delay, c.backoffFor(r.hedgeErrs))
	r.stopHedge = c.cfg.clock.AfterFunc(wait, func() { c.hedgeRefill(r) })
}

// settleLocked reports whether the answer of one of r's requests settles r: a block, or the failure of
// the last request still open. A failure while the other request is open settles nothing.
func (c *Client) settleLocked(r *refill, hedge bool, err error) bool {
	r.open--
	if r.settled || err != nil && r.open > 0 {
		return false
	}
	r.settled = true
	r.route.settled.Store(true)
	r.stopHedge()
	if hedge && err == nil {
		c.hedge.won++
		c.cfg.hooks.hedge(true)
	}
	return true
}

// spareLocked takes the block of a request whose refill the other request settled. The cache keeps it
// while it holds, with the leases in flight, less than refills top it up to: the low-water mark and a
// block, or the mark and WithRefillInterval's worth of IDs at the current rate when blocks are capped
// below that. Otherwise, or when it overlaps a block already received, it is dropped: a gap, never
// served.
func (c *Client) spareLocked(blk Block, useBy time.Time, now time.Time, took time.Duration) {
	if c.life.closed {
		return
	}
	if err := c.ledger.overlap(blk); err != nil {
		c.count.refillErrors++
		c.cfg.hooks.refill(0, took, err)
		return
	}
	if c.ledger.uncarved+c.flight.ids >= c.size.full(c.cfg.refillInterval) {
		c.count.discarded += blk.Size
		c.cfg.hooks.discard(blk.Size, DiscardSpare)
		return
	}
	c.count.refills++
	c.cfg.hooks.refill(blk.Size, took, nil)
	c.cacheLocked(blk, useBy, now)
}
