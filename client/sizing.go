package client

import (
	"math"
	"time"
)

// sizing is the adaptation of the block size to demand: the rate IDs are taken at, how long refills
// take, what the namespace allows, and the low-water mark derived from them. Guarded by Client.mu.
type sizing struct {
	rate       float64 // IDs/s
	rateAt     time.Time
	rateCarved int64
	fastest    float64       // the fastest recent demand, IDs/s, decayed by fastestHalfLife
	latency    time.Duration // moving average of successful refills
	slowest    time.Duration // the slowest recent refill, decayed by slowestHalfLife
	slowestAt  time.Time
	lastSize   int64
	lowWater   int64
	nsBlock    int64         // the namespace's block size; 0 until known
	nsMax      int64         // the namespace's maximum block size; 0 until known
	sizeCap    int64         // lowered when the source refuses a size
	ttl        time.Duration // the namespace's lease TTL, when the source tells it
	lastLife   time.Duration // how long the last block could be used when it arrived
	settingsOK bool          // the namespace's settings have been asked for
}

// learnSettings takes the namespace's block size bounds and lease TTL, read once after the first
// block. When the source cannot tell (an older server, a token that may not read settings), the
// defaults stand and a refused size lowers the cap instead.
func (s *sizing) learnSettings(ns Settings, err error) {
	if err != nil {
		return
	}
	if ns.MaxBlockSize > 0 {
		s.nsMax = ns.MaxBlockSize
	}
	if ns.BlockSize > 0 && s.nsBlock == 0 {
		s.nsBlock = ns.BlockSize
	}
	s.ttl = ns.LeaseTTL
}

// bounds returns the smallest and largest block size to ask for.
func (s *sizing) bounds(cfg *config) (lo, hi int64) {
	hi = int64(defaultMaxBlockSize)
	if s.nsMax > 0 {
		hi = s.nsMax
	}
	if cfg.maxBlock > 0 {
		hi = min(hi, cfg.maxBlock)
	}
	if s.sizeCap > 0 {
		hi = min(hi, s.sizeCap)
	}
	lo = max(s.nsBlock, 1)
	if cfg.minBlock > 0 {
		lo = cfg.minBlock
	}
	return min(lo, hi), hi
}

// rateWindow is the shortest time the demand is measured over, unless a whole block was taken sooner:
// carves and leases within it keep the rate measured before, so that leases starting one after another
// do not each measure almost nothing.
const rateWindow = 10 * time.Millisecond

// sampleRate measures the demand since the last sample, given the IDs carved so far, once rateWindow
// has passed or a block's worth of IDs was carved. It reports whether it took a sample.
func (s *sizing) sampleRate(now time.Time, carvedTotal int64) bool {
	dt := now.Sub(s.rateAt)
	carved := carvedTotal - s.rateCarved
	if dt <= 0 || dt < rateWindow && carved < max(s.lastSize, 1) {
		return false
	}
	sample := float64(carved) / max(dt, time.Millisecond).Seconds()
	// Follow a rising rate at once (a stall costs more than a large block); let a falling one decay.
	s.rate = max(sample, (s.rate+sample)/2)
	s.fastest = max(s.rate, s.fastest*math.Exp2(-dt.Seconds()/fastestHalfLife.Seconds()))
	s.rateAt, s.rateCarved = now, carvedTotal
	return true
}

// fastestHalfLife is how fast the fastest recent demand is forgotten. A process that shares its
// processors takes IDs in bursts: while other work holds the CPU its callers take few, and once they
// run again they take as many as the processors allow, several times the rate just measured, at once.
// The next burst is likely while the last is recent.
const fastestHalfLife = time.Second

// plannedRate is the demand the low-water mark plans for: the larger of the current rate and the
// fastest recent one.
func (s *sizing) plannedRate() float64 { return max(s.rate, s.fastest) }

// requestSize returns the size of the next block at the demand last sampled: enough for the refill
// interval at the observed rate, and for several refill latencies, within the bounds and short enough
// to be used up before its lease expires. 0 asks for the namespace's block size; so does the first
// lease (first) unless WithMinBlockSize or WithMaxBlockSize is set.
func (s *sizing) requestSize(cfg *config, first bool) int64 {
	if first && cfg.minBlock == 0 && cfg.maxBlock == 0 {
		return 0
	}
	want := s.rate * cfg.refillInterval.Seconds()
	want = max(want, s.rate*4*s.refillLatency().Seconds())
	if life := s.blockLife(); life > 0 {
		want = min(want, s.rate*life.Seconds()/2)
	}
	lo, hi := s.bounds(cfg)
	if want >= float64(hi) {
		return hi
	}
	return max(lo, min(hi, int64(math.Ceil(want))))
}

// blockLife is how long a block can be used: the namespace's lease TTL, or less when the last block
// came with less time left (a server that carves blocks from an older segment); 0 means unbounded.
func (s *sizing) blockLife() time.Duration {
	switch {
	case s.lastLife > 0 && (s.ttl <= 0 || s.lastLife < s.ttl):
		return s.lastLife
	default:
		return max(s.ttl, 0)
	}
}

// refillLatency is what the low-water mark plans for: the larger of the moving average and the slowest
// recent refill.
func (s *sizing) refillLatency() time.Duration { return max(s.latency, s.slowest) }

// slowestHalfLife is how fast a slow refill is forgotten: a busy process or server is slow in bursts,
// and the next burst is likely while the last is recent.
const slowestHalfLife = time.Second

// noteLatency records how long a successful refill took; the first one (first) sets the average.
func (s *sizing) noteLatency(took time.Duration, now time.Time, first bool) {
	if first {
		s.latency = took
	} else {
		s.latency = (3*s.latency + took) / 4
	}
	if dt := now.Sub(s.slowestAt); dt > 0 {
		s.slowest = time.Duration(float64(s.slowest) * math.Exp2(-dt.Seconds()/slowestHalfLife.Seconds()))
	}
	s.slowest, s.slowestAt = max(s.slowest, took), now
}

// noteBlock records the size of a block that landed and, when it expires (useBy not zero), how long it
// can be used from now. The first block tells the namespace's block size.
func (s *sizing) noteBlock(size int64, useBy, now time.Time) {
	s.lastSize = size
	s.lastLife = 0
	if !useBy.IsZero() {
		s.lastLife = useBy.Sub(now)
	}
	if s.nsBlock == 0 {
		s.nsBlock = size // the first lease asks for the namespace's block size
	}
}

// schedulingSlack is the time a refill may wait for a processor before it starts: the Go scheduler
// preempts a busy goroutine after 10ms.
const schedulingSlack = 10 * time.Millisecond

// setLowWater sets the mark so that a refill started at it lands before the cache runs out at the
// fastest recent rate (see plannedRate): room for two refill latencies plus the scheduling slack, plus
// hedgeDelay (the hedge delay when the source can hedge, so that a refill whose first request hangs
// still lands, through its hedge; else 0), and never below 20% of the last block. The mark counts the
// IDs cached and those asked for by the leases in flight; when it is more than a block, several leases
// are in flight and the cache holds several blocks. Blocks that expire hold no more than half their
// life's worth: IDs beyond it would expire unserved.
func (s *sizing) setLowWater(hedgeDelay time.Duration) {
	runway := 2*s.refillLatency() + schedulingSlack + hedgeDelay
	if life := s.blockLife(); life > 0 {
		runway = min(runway, life/2)
	}
	s.lowWater = max(s.lastSize/5, int64(math.Ceil(s.plannedRate()*runway.Seconds())), 1)
}

// full is how many IDs, cached and asked for by the leases in flight, refills top the cache up to: the
// low-water mark and a block, or the mark and refillInterval's worth of IDs at the current rate when
// blocks are capped below that.
func (s *sizing) full(refillInterval time.Duration) int64 {
	return s.lowWater + max(s.lastSize, int64(s.rate*refillInterval.Seconds()))
}

// sampleRateLocked samples the demand and, once a block has landed, moves the low-water mark with it.
// Callers sample as they carve runs, and leases as they start.
func (c *Client) sampleRateLocked(now time.Time) {
	if c.size.sampleRate(now, c.count.carvedTotal) && c.count.refills > 0 {
		c.setLowWaterLocked()
	}
}

// requestSizeLocked samples the demand and returns the size of the next block (see
// sizing.requestSize).
func (c *Client) requestSizeLocked() int64 {
	c.sampleRateLocked(c.cfg.clock.Now())
	return c.size.requestSize(&c.cfg, c.count.refills == 0)
}

// setLowWaterLocked sets the low-water mark, with room for the hedge delay when the source can hedge.
func (c *Client) setLowWaterLocked() { c.size.setLowWater(c.hedge.runway()) }
