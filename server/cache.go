package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/backoff"
	"github.com/ticketd/ticketd/internal/hedge"
	"github.com/ticketd/ticketd/internal/mono"
)

// PreferLeaser is implemented by backends that can lease from a chosen ticket server (*mysql.Store does).
// The cache uses it to take the next segment from the other ticket server while that one is healthy,
// so both servers keep being exercised and a dead one is noticed before the cache runs dry.
type PreferLeaser interface {
	LeaseFrom(ctx context.Context, namespace string, size int64, prefer string) (allocator.Block, error)
}

// CacheConfig tunes the segment cache. The zero value of each field means its default; a negative
// number is refused with allocator.ErrInvalidConfig naming the field, except HedgeDelay (see there).
type CacheConfig struct {
	// Disabled turns the cache off: every request leases from the backend.
	Disabled bool
	// Target is how long a segment should last at the current rate: the next segment is twice as large
	// when the last one lasted under half of Target, and half as large when it lasted over twice Target.
	// Default 10s. For a namespace with a lease TTL, at most a quarter of the TTL.
	Target time.Duration
	// MinSegment and MaxSegment bound the segment size; MaxSegment is further bounded by the namespace's
	// max_block_size and MinSegment raised to four default blocks. Default 10,000 and 16,777,216.
	// A request for more than a quarter of the largest segment goes straight to the backend.
	MinSegment, MaxSegment int64
	// PrefetchAt is the share of a segment used when the next one is fetched, below 1. Default 0.2.
	PrefetchAt float64
	// SettingsTTL is how long namespace settings are used before they are read again. Default 5s.
	SettingsTTL time.Duration
	// FetchTimeout bounds one backend call of the cache; the backend's own timeout usually ends it
	// first. Default 30s.
	FetchTimeout time.Duration
	// MaxAhead bounds the segments a namespace keeps leased ahead of the current one, cached and in
	// flight. One is enough while a segment outlasts a lease; when segments are at their largest and
	// one is used up faster than the backend leases the next, the cache keeps as many as the lease
	// latency needs, up to MaxAhead, with as many leases in flight. Default 8.
	MaxAhead int
	// HedgeDelay is how long a segment lease waits for its ticket server before a second lease goes to
	// another healthy server (a hedge), when the backend can choose (PreferLeaser); while no server is
	// known healthy, as at the end of an outage, to another server that is not fenced. The first
	// segment to arrive is served first, the other next. The segments kept ahead cover the delay too.
	// Default: the 95th percentile of the latencies of recent segment leases, at least 20ms (250ms
	// before the first); at most half of FetchTimeout. Negative: never hedge.
	HedgeDelay time.Duration
	// IdleAfter is how long a namespace's cache is kept after its last request: then its segments are
	// dropped (their IDs left unissued, a gap) and what the cache held for it is freed, so that a
	// process that served many namespaces once does not keep them all. Default 10m.
	IdleAfter time.Duration
}

// validate applies the rule of every configuration: zero means the default, a negative value is an
// error. A negative HedgeDelay is the exception: it means never hedge.
func (c CacheConfig) validate() error {
	if err := allocator.CheckConfig("server.CacheConfig",
		allocator.Setting("Target", c.Target), allocator.Setting("MinSegment", c.MinSegment),
		allocator.Setting("MaxSegment", c.MaxSegment), allocator.Setting("PrefetchAt", c.PrefetchAt),
		allocator.Setting("SettingsTTL", c.SettingsTTL), allocator.Setting("FetchTimeout", c.FetchTimeout),
		allocator.Setting("MaxAhead", c.MaxAhead), allocator.Setting("IdleAfter", c.IdleAfter)); err != nil {
		return err
	}
	if c.PrefetchAt >= 1 {
		return fmt.Errorf("%w: server.CacheConfig: PrefetchAt %g must be below 1", allocator.ErrInvalidConfig, c.PrefetchAt)
	}
	return nil
}

func (c CacheConfig) withDefaults() CacheConfig {
	allocator.Default(&c.Target, 10*time.Second)
	allocator.Default(&c.MinSegment, 10_000)
	allocator.Default(&c.MaxSegment, 1<<24)
	c.MaxSegment = min(c.MaxSegment, allocator.MaxBlockSizeLimit)
	c.MinSegment = min(c.MinSegment, c.MaxSegment)
	allocator.Default(&c.PrefetchAt, 0.2)
	allocator.Default(&c.SettingsTTL, 5*time.Second)
	allocator.Default(&c.FetchTimeout, 30*time.Second)
	allocator.Default(&c.MaxAhead, 8)
	allocator.Default(&c.IdleAfter, 10*time.Minute)
	if c.HedgeDelay > 0 {
		c.HedgeDelay = min(c.HedgeDelay, c.FetchTimeout/2)
	}
	return c
}

// fetchBackoff is the wait after consecutive failed calls: doubling from 20ms to 1s, with jitter.
var fetchBackoff = backoff.Policy{Min: 20 * time.Millisecond, Max: time.Second}

const (
	// hedgeFloor and firstHedgeDelay bound the derived hedge delay: an answer later than usual by less
	// than the floor is noise; before the first answer, the latency is not known.
	hedgeFloor      = 20 * time.Millisecond
	firstHedgeDelay = 250 * time.Millisecond
)

// segmentCache keeps, per namespace, a current segment that blocks are carved from and the next one
// fetched in the background (Leaf's double buffer); when a segment of the largest size does not last
// a backend lease, several are fetched ahead, up to CacheConfig.MaxAhead, several leases in flight.
// Carving is lock-free; requests that find the cache empty wait for the oldest backend call in flight.
// A segment is a block the backend leased, so a crash loses at most the cached segments: a gap, never a
// duplicate. Safe for concurrent use.
type segmentCache struct {
	cfg     CacheConfig
	backend allocator.Backend
	prefer  PreferLeaser             // nil when the backend cannot choose a server
	health  allocator.HealthReporter // nil when the backend does not report health
	metrics *Metrics
	logger  *slog.Logger
	now     func() time.Time

	ctx    context.Context // cancelled by close: ends background calls
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.RWMutex
	spaces  map[string]*space
	closed  bool
	sweptAt time.Time // the last look for idle namespaces (see sweepLocked)
}

func newSegmentCache(cfg CacheConfig, b allocator.Backend, m *Metrics, logger *slog.Logger, now func() time.Time) *segmentCache {
	ctx, cancel := context.WithCancel(context.Background())
	c := &segmentCache{cfg: cfg.withDefaults(), backend: b, metrics: m, logger: logger, now: now,
		ctx: ctx, cancel: cancel, spaces: map[string]*space{}}
	c.prefer, _ = b.(PreferLeaser)
	c.health, _ = b.(allocator.HealthReporter)
	return c
}

// readSettings reads a namespace's settings, without each server's counter where the backend can
// (allocator.SettingsReader), and read with every other namespace's where it can
// (allocator.SharedSettingsReader): the cache refreshes each namespace's settings every SettingsTTL.
func (c *segmentCache) readSettings(ctx context.Context, name string) (allocator.Namespace, error) {
	if r, ok := c.backend.(allocator.SharedSettingsReader); ok {
		return r.SharedSettings(ctx, name)
	}
	if r, ok := c.backend.(allocator.SettingsReader); ok {
		return r.Settings(ctx, name)
	}
	ns, err := c.backend.Namespace(ctx, name)
	ns.Servers = nil
	return ns, err
}

// close stops background calls and waits for them. Safe to call twice.
func (c *segmentCache) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// space is one namespace's cache.
type space struct {
	name string
	c    *segmentCache

	cur        atomic.Pointer[segment]
	usedAt     atomic.Int64 // unix nanoseconds of the last request
	settings   atomic.Pointer[allocator.Namespace]
	settingsAt atomic.Int64 // unix nanoseconds of the last settings read
	size       atomic.Int64 // size of the next segment lease; 0 until the first
	// Hints for the lock-free path, mirrored from the state under mu.
	busy       atomic.Bool  // a backend call is in flight
	refreshing atomic.Bool  // a call that only refreshes the settings is in flight
	room       atomic.Bool  // fewer segments are cached ahead and coming than the depth
	retryAt    atomic.Int64 // unix nanoseconds before which no call starts after a failure

	mu           sync.Mutex
	ahead        []*segment   // leased ahead of the current one, oldest first
	calls        []*fetchCall // in flight, oldest first; requests that find the cache empty wait for the first
	coming       int          // calls in flight that lease a segment
	depth        int          // segments to keep ahead, cached and coming: 1, or more while one does not last a lease
	lastErr      error        // of the last call, nil after a success
	failures     int
	lastServer   string        // ticket server of the last segment
	lastLifetime time.Duration // how long the last retired segment served, once retired is set
	retired      bool          // a segment has been used up or dropped
	haveLifetime bool          // lastLifetime is new: the next segment's size has not followed it yet
	latency      time.Duration // of segment leases: the moving average, or the last when slower
	// landed is closed when a segment lease lands, and then nil: made by the first request that waits
	// for one, so that a namespace nobody waits on keeps no channel.
	landed     chan struct{}
	answers    hedge.Delay // latencies of the segment leases that landed before their hedge or original
	lastDirect string      // the server of the last direct lease (see leaseDirect)
}

// dropFirst returns list without its first segment; nil, not an empty piece of the array, when none
// is left: an idle namespace keeps no array.
func dropFirst(list []*segment) []*segment {
	list[0] = nil
	if len(list) == 1 {
		return nil
	}
	return list[1:]
}

// fetchCall is one backend call; waiters read err once done is closed.
type fetchCall struct {
	done    chan struct{}
	err     error
	segment bool // it leases a segment

	// Segment leases, under space.mu: the server asked first and the size (set when the lease starts,
	// given for a hedge), and the other lease of a hedged pair.
	prefer    string
	size      int64
	partner   *fetchCall
	hedge     bool // it is the hedge of partner
	finished  bool
	landed    bool // it brought a segment
	spare     bool // its partner landed first: no longer counted as coming
	stopHedge func() bool
}

// segment is a leased block that client blocks are carved from.
type segment struct {
	blk       allocator.Block
	taken     atomic.Int64 // IDs handed out (may pass blk.Size: the carve that did failed)
	threshold int64        // taken at which the next segment is fetched
	staleAt   int64        // mono.Nanos; 0: never; from then on no block is carved from it
	activated int64        // mono.Nanos when it became current; under space.mu
}

// take carves n IDs, or reports that the segment cannot hold them (it is then used up).
func (s *segment) take(n int64) (allocator.Block, bool) {
	return s.takeUpTo(n, false)
}

// takeUpTo takes n IDs, or with short what is left when fewer are: the last IDs below a ceiling,
// which no further segment follows. A take that fails leaves the segment as it was.
func (s *segment) takeUpTo(n int64, short bool) (allocator.Block, bool) {
	for {
		t := s.taken.Load()
		k := min(n, s.blk.Size-t)
		if k <= 0 || (k < n && !short) {
			return allocator.Block{}, false
		}
		if s.taken.CompareAndSwap(t, t+k) {
			b, err := s.blk.Slice(t, k)
			return b, err == nil
		}
	}
}

func (s *segment) fresh(now time.Time) bool { return s.staleAt == 0 || mono.Nanos(now) < s.staleAt }

// servedFor is how long the segment has been current at now.
func (s *segment) servedFor(now time.Time) time.Duration {
	return max(0, time.Duration(mono.Nanos(now)-s.activated))
}

func (s *segment) remaining() int64 { return max(0, s.blk.Size-s.taken.Load()) }

func (c *segmentCache) space(name string) *space {
	c.mu.RLock()
	sp := c.spaces[name]
	c.mu.RUnlock()
	if sp != nil {
		return sp
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sp = c.spaces[name]; sp == nil {
		now := c.now()
		c.sweepLocked(now)
		sp = &space{name: strings.Clone(name), c: c, depth: 1} // the name alone, not the request it came in
		sp.room.Store(true)
		sp.usedAt.Store(now.UnixNano())
		c.spaces[sp.name] = sp
	}
	return sp
}

// sweep drops the namespaces idle for CacheConfig.IdleAfter (see sweepLocked).
func (c *segmentCache) sweep() {
	c.mu.Lock()
	c.sweepLocked(c.now())
	c.mu.Unlock()
}

// sweepLocked drops, at most every quarter of CacheConfig.IdleAfter, the namespaces without a request
// for IdleAfter and without a backend call in flight: their segments are a gap. A request that holds
// a dropped space finishes with it; the next one makes a new space. c.mu must be held.
func (c *segmentCache) sweepLocked(now time.Time) {
	if now.Sub(c.sweptAt) < c.cfg.IdleAfter/4 {
		return
	}
	c.sweptAt = now
	idleSince := now.Add(-c.cfg.IdleAfter).UnixNano()
	for name, sp := range c.spaces {
		if sp.usedAt.Load() <= idleSince && !sp.busy.Load() {
			delete(c.spaces, name)
		}
	}
}

// forget drops a namespace's segments (after its settings change, or when it does not exist).
func (c *segmentCache) forget(name string) {
	c.mu.Lock()
	delete(c.spaces, name)
	c.mu.Unlock()
}

// bounds are the segment sizes allowed for a namespace.
func (c *segmentCache) bounds(st allocator.Namespace) (lo, hi int64) {
	hi = min(c.cfg.MaxSegment, st.MaxBlockSize)
	lo = min(max(c.cfg.MinSegment, 4*st.BlockSize), hi)
	return lo, hi
}

// target is how long a segment of this namespace should last: a segment stops serving at half the
// lease TTL, so it should be used up well before that.
func (c *segmentCache) target(st allocator.Namespace) time.Duration {
	if st.LeaseTTL > 0 {
		return min(c.cfg.Target, st.LeaseTTL/4)
	}
	return c.cfg.Target
}

// lease returns a block of size IDs (0: the namespace's block size) and whether it came from a cached
// segment. The size is checked against the namespace's settings before any backend lease.
func (c *segmentCache) lease(ctx context.Context, name string, size int64, reqID string) (allocator.Block, bool, error) {
	sp := c.space(name)
	sp.usedAt.Store(c.now().UnixNano())
	st, err := sp.loadSettings(ctx, reqID)
	if err != nil {
		if errors.Is(err, allocator.ErrNotFound) {
			c.forget(name)
		}
		return allocator.Block{}, false, err
	}
	if size == 0 {
		size = st.BlockSize
	}
	if err := allocator.ValidateSize(size, st.MaxBlockSize); err != nil {
		return allocator.Block{}, false, err
	}
	lo, hi := c.bounds(st)
	if size*4 > hi {
		return c.direct(ctx, sp, size, reqID)
	}
	if cur := sp.size.Load(); size*4 > max(cur, lo) {
		// Too big for the segments of late: serve it directly, and make the next segments fit it.
		sp.size.CompareAndSwap(cur, min(size*4, hi))
		return c.direct(ctx, sp, size, reqID)
	}
	for {
		now := c.now()
		seg := sp.cur.Load()
		if seg != nil && seg.blk.Size < size {
			// A segment from before a settings change may be too small for this request.
			return c.direct(ctx, sp, size, reqID)
		}
		if seg != nil && seg.fresh(now) {
			if blk, ok := seg.take(size); ok {
				sp.kick(now, seg, reqID)
				return blk, true, nil
			}
		}
		if err := sp.refill(ctx, seg, reqID); err != nil {
			if errors.Is(err, allocator.ErrExhausted) {
				if blk, ok := sp.rest(ctx, seg, size, reqID); ok {
					return blk, true, nil
				}
			}
			return allocator.Block{}, false, err
		}
	}
}

// direct leases a block too big for the segments straight from the backend (hedged, see leaseDirect).
// When the namespace has reached its ceiling, the segments may still hold its last IDs: they are
// served instead.
func (c *segmentCache) direct(ctx context.Context, sp *space, size int64, reqID string) (allocator.Block, bool, error) {
	blk, err := c.leaseDirect(ctx, sp, size)
	if errors.Is(err, allocator.ErrExhausted) {
		if blk, ok := sp.rest(ctx, sp.cur.Load(), size, reqID); ok {
			return blk, true, nil
		}
	}
	return blk, false, err
}

// rest serves, once the backend has no ID left for the namespace, what the segments still hold, the
// current one (seg) and those leased ahead, as short blocks of up to size IDs: the last IDs below the
// ceiling. It reports false when nothing is left.
func (sp *space) rest(ctx context.Context, seg *segment, size int64, reqID string) (allocator.Block, bool) {
	for {
		if seg != nil && seg.fresh(sp.c.now()) {
			if blk, ok := seg.takeUpTo(size, true); ok {
				return blk, true
			}
		}
		// The next segment ahead becomes current; with none left, the refill asks the backend,
		// which refuses again.
		if sp.refill(ctx, seg, reqID) != nil {
			return allocator.Block{}, false
		}
		next := sp.cur.Load()
		if next == seg {
			return allocator.Block{}, false
		}
		seg = next
	}
}

// loadSettings returns the namespace's settings, reading them (once for all callers) when unknown,
// and starting a background refresh when they are old.
func (sp *space) loadSettings(ctx context.Context, reqID string) (allocator.Namespace, error) {
	for {
		if st := sp.settings.Load(); st != nil {
			return *st, nil
		}
		sp.mu.Lock()
		if sp.settings.Load() != nil {
			sp.mu.Unlock()
			continue
		}
		call, err := sp.joinLocked(false, reqID)
		sp.mu.Unlock()
		if err != nil {
			return allocator.Namespace{}, err
		}
		if err := wait(ctx, call); err != nil {
			return allocator.Namespace{}, err
		}
	}
}

// forgetFailures ends the backoff of every namespace whose last call failed: a ticket server is back in
// rotation, and the next request should not wait for a backoff begun while none was.
func (c *segmentCache) forgetFailures() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, sp := range c.spaces {
		if sp.retryAt.Load() != 0 {
			sp.retryAt.Store(0)
		}
	}
}

// joinLocked returns the oldest call in flight, starting one when there is none. Within the backoff
// after a failed call it returns that call's error instead.
func (sp *space) joinLocked(withSegment bool, reqID string) (*fetchCall, error) {
	if len(sp.calls) > 0 {
		return sp.calls[0], nil
	}
	if sp.lastErr != nil && sp.c.now().UnixNano() < sp.retryAt.Load() {
		return nil, sp.lastErr
	}
	return sp.startLocked(withSegment, reqID)
}

func wait(ctx context.Context, call *fetchCall) error {
	select {
	case <-call.done:
		return call.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refill replaces seen, the current segment that could not serve, with the next one, or waits for a
// backend call that brings one. It returns nil when the caller should try again.
func (sp *space) refill(ctx context.Context, seen *segment, reqID string) error {
	sp.mu.Lock()
	if sp.cur.Load() != seen {
		sp.mu.Unlock()
		return nil // another caller already replaced it
	}
	now := sp.c.now()
	// A namespace's first segment is no stall: no prefetch could have come before it.
	cold := seen == nil && !sp.retired
	if seen != nil {
		sp.lastLifetime, sp.haveLifetime, sp.retired = seen.servedFor(now), true, true
		sp.cur.Store(nil)
	}
	for len(sp.ahead) > 0 {
		n := sp.ahead[0]
		sp.ahead = dropFirst(sp.ahead)
		sp.hintLocked()
		if n.fresh(now) {
			n.activated = mono.Nanos(now)
			sp.cur.Store(n)
			sp.topUpLocked(now, reqID)
			sp.mu.Unlock()
			return nil
		}
		sp.c.logger.Debug("cached segment dropped: older than half its lease TTL", "namespace", sp.name, "block", n.blk.String())
	}
	sp.topUpLocked(now, reqID) // unless enough segments are coming (a spare whose partner landed is not)
	call, err := sp.joinLocked(true, reqID)
	if sp.landed == nil {
		sp.landed = make(chan struct{})
	}
	landed := sp.landed
	sp.mu.Unlock()
	if err != nil {
		return err
	}
	if !cold {
		sp.c.metrics.observeStall(sp.name)
	}
	select { // the oldest call's outcome, or a segment from any call (its hedge, a later one)
	case <-call.done:
		return call.err
	case <-landed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kick starts background calls when the current segment is used past its threshold and fewer
// segments are cached ahead and coming than the depth, or when the settings are old. It costs a few
// atomic loads when there is nothing to do.
func (sp *space) kick(now time.Time, seg *segment, reqID string) {
	if now.UnixNano() < sp.retryAt.Load() {
		return
	}
	needSegment := seg.taken.Load() >= seg.threshold && sp.room.Load()
	oldSettings := !sp.refreshing.Load() && now.UnixNano()-sp.settingsAt.Load() > int64(sp.c.cfg.SettingsTTL)
	if !needSegment && !oldSettings {
		return
	}
	sp.mu.Lock()
	if needSegment {
		sp.topUpLocked(now, reqID)
	}
	if oldSettings && !sp.refreshing.Load() {
		// A call of its own: segment leases go on with the settings they have meanwhile, so that a
		// read that waits for a server that hangs holds none of them up.
		sp.refreshing.Store(true)
		if _, err := sp.startLocked(false, reqID); err != nil {
			sp.refreshing.Store(false)
		}
	}
	sp.mu.Unlock()
}

// topUpLocked starts segment leases while the current segment is used past its threshold (or there is
// none) and fewer segments are cached ahead and coming than the depth.
func (sp *space) topUpLocked(now time.Time, reqID string) {
	if now.UnixNano() < sp.retryAt.Load() {
		return
	}
	for sp.wantSegmentLocked(now) {
		if _, err := sp.startLocked(true, reqID); err != nil {
			return
		}
	}
}

// startLocked starts a backend call of this namespace.
func (sp *space) startLocked(withSegment bool, reqID string) (*fetchCall, error) {
	return sp.launchLocked(&fetchCall{done: make(chan struct{}), segment: withSegment}, reqID)
}

// launchLocked starts call.
func (sp *space) launchLocked(call *fetchCall, reqID string) (*fetchCall, error) {
	c := sp.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, allocator.ErrClosed
	}
	sp.calls = append(sp.calls, call)
	if call.segment {
		sp.coming++
	}
	sp.hintLocked()
	c.wg.Add(1)
	go sp.fetch(call, reqID)
	return call, nil
}

// hintLocked mirrors the calls and segments ahead into the lock-free hints.
func (sp *space) hintLocked() {
	sp.busy.Store(len(sp.calls) > 0)
	sp.room.Store(len(sp.ahead)+sp.coming < sp.depth)
}

// wantSegmentLocked reports whether another segment lease is needed now: the current segment is
// missing, stale or used past its threshold, and fewer segments are cached ahead and coming than the
// depth.
func (sp *space) wantSegmentLocked(now time.Time) bool {
	if len(sp.ahead)+sp.coming >= sp.depth {
		return false
	}
	cur := sp.cur.Load()
	return cur == nil || !cur.fresh(now) || cur.taken.Load() >= cur.threshold
}

// fetch is the backend call: it refreshes old settings and, when it is a segment call, leases a
// segment.
func (sp *space) fetch(call *fetchCall, reqID string) {
	c := sp.c
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.FetchTimeout)
	defer cancel()
	now := c.now()
	var err error
	st := sp.settings.Load()
	if !call.segment {
		defer sp.refreshing.Store(false)
	}
	// A segment lease reads the settings only when it has none; kick refreshes old ones with a call of
	// its own.
	if st == nil || !call.segment && now.UnixNano()-sp.settingsAt.Load() > int64(c.cfg.SettingsTTL) {
		ns, nerr := c.readSettings(ctx, sp.name)
		switch {
		case nerr == nil:
			st = &ns
			sp.settings.Store(st)
			sp.settingsAt.Store(now.UnixNano())
		case st == nil || errors.Is(nerr, allocator.ErrNotFound):
			err = nerr
		default:
			c.logger.Debug("could not refresh namespace settings; using the last known", "namespace", sp.name, "err", nerr)
		}
	}
	var seg *segment
	var start time.Time
	var took time.Duration
	if err == nil && call.segment {
		sp.mu.Lock()
		if !call.hedge {
			call.size = sp.nextSizeLocked(*st)
			call.prefer = c.preferFor(sp.lastServer)
			sp.armHedgeLocked(call, reqID)
		}
		size, prefer := call.size, call.prefer
		sp.mu.Unlock()
		start = c.now()
		seg, err = sp.leaseSegment(ctx, *st, size, prefer, reqID)
		took = c.now().Sub(start)
	}

	sp.mu.Lock()
	defer sp.mu.Unlock()
	call.finished = true
	if call.stopHedge != nil {
		call.stopHedge()
	}
	if call.segment {
		var blk allocator.Block
		if seg != nil {
			blk = seg.blk
		}
		sp.noteOutcomeLocked(call.prefer, blk, err)
	}
	// A hedged pair fails only when both do: while the other lease brought a segment, or still may, a
	// failure is no fault of the namespace's, and its waiters look again.
	excused := err != nil && call.partner != nil && (call.partner.landed || !call.partner.finished)
	switch {
	case excused:
		err = nil
	case err == nil:
		sp.lastErr, sp.failures = nil, 0
		sp.retryAt.Store(0)
	case errors.Is(err, allocator.ErrNotFound):
		sp.lastErr = nil // not a fault: no backoff, so that a namespace created now is served at once
	default:
		sp.failures++
		sp.lastErr = err
		sp.retryAt.Store(c.now().Add(fetchBackoff.Wait(sp.failures)).UnixNano())
	}
	if sp.calls = slices.DeleteFunc(sp.calls, func(x *fetchCall) bool { return x == call }); len(sp.calls) == 0 {
		sp.calls = nil // an idle namespace keeps no array
	}
	if call.segment && !call.spare {
		sp.coming--
	}
	if seg != nil {
		sp.lastServer = seg.blk.Server
		sp.noteLatencyLocked(took)
		call.landed = true
		if p := call.partner; p == nil || !p.landed {
			sp.answers.Observe(start, took) // the first of a hedged pair: the other's latency is the hung path's
			if call.hedge {
				c.metrics.observeHedge(sp.name, true)
			}
			if p != nil && !p.finished {
				// The other may wait for a server that hangs: what comes of it is a spare, and the next
				// segments are leased without waiting for it.
				p.spare = true
				sp.coming--
			}
		}
		if sp.landed != nil {
			close(sp.landed)
			sp.landed = nil
		}
		sp.ahead = append(sp.ahead, seg)
		if cur := sp.cur.Load(); cur == nil || !cur.fresh(c.now()) || cur.remaining() == 0 {
			now := c.now()
			if cur != nil {
				sp.lastLifetime, sp.haveLifetime, sp.retired = cur.servedFor(now), true, true
			}
			next := sp.ahead[0] // the oldest first
			sp.ahead = dropFirst(sp.ahead)
			next.activated = mono.Nanos(now)
			sp.cur.Store(next)
		}
		sp.depth = sp.depthLocked(*st, seg.blk.Size)
	}
	sp.hintLocked()
	if seg != nil {
		sp.topUpLocked(c.now(), reqID) // the next ones, without waiting for a request to ask
	}
	call.err = err
	close(call.done)
}

// armHedgeLocked starts the hedge timer of a segment lease that asks a server first: once the hedge
// delay has passed without an answer, a second lease of the same size goes to another server, chosen
// as preferFor chooses: a healthy one, or while none is, one that is not fenced.
func (sp *space) armHedgeLocked(call *fetchCall, reqID string) {
	c := sp.c
	if !c.hedging() || call.prefer == "" {
		return
	}
	call.stopHedge = time.AfterFunc(sp.hedgeDelayLocked(), func() {
		sp.mu.Lock()
		defer sp.mu.Unlock()
		other := c.preferFor(call.prefer)
		if call.finished || other == "" || other == call.prefer {
			return // answered, or no other server to ask
		}
		h := &fetchCall{done: make(chan struct{}), segment: true, prefer: other, size: call.size, partner: call, hedge: true}
		if _, err := sp.launchLocked(h, reqID); err != nil {
			return
		}
		call.partner = h
		c.metrics.observeHedge(sp.name, false)
	}).Stop
}

// noteOutcomeLocked marks a failure for the hedge delay when a lease failed, or failed over from the
// server it asked first (asked; empty when it named none): the answers of the leases begun soon after
// say nothing of the usual latency (see hedge.Recovery). A namespace not found is no failure.
func (sp *space) noteOutcomeLocked(asked string, blk allocator.Block, err error) {
	if err != nil && !errors.Is(err, allocator.ErrNotFound) || err == nil && asked != "" && blk.Server != asked {
		sp.answers.Fail(sp.c.now())
	}
}

// hedges returns how many hedges of the namespace's leases were sent, and how many of them landed
// first (the namespace's counters, see Metrics).
func (sp *space) hedges() (sent, won int64) {
	n := sp.c.metrics.namespace(sp.name)
	return n.hedges.Load(), n.hedgesWon.Load()
}

// noteLatencyLocked records how long a segment lease took: the moving average, or the last when it was
// slower, is what the depth plans for.
func (sp *space) noteLatencyLocked(took time.Duration) {
	sp.latency = max(took, (3*sp.latency+took)/4)
}

// depthLocked is how many segments to keep ahead, cached and coming. One, while the segment size can
// still grow or a segment outlasts a lease; when segments of the largest size are used up faster, as
// many as are used up during a lease, from when the current one passes its threshold, up to MaxAhead.
// A lease that can be hedged counts with the hedge delay, so that a hedged lease lands in time too.
func (sp *space) depthLocked(st allocator.Namespace, size int64) int {
	_, hi := sp.c.bounds(st)
	life := time.Duration(float64(sp.lastLifetime) * (1 - sp.c.cfg.PrefetchAt))
	lease := sp.latency
	if sp.c.hedging() {
		lease += sp.hedgeDelayLocked()
	}
	if size < hi || !sp.retired || lease <= life {
		return 1
	}
	if life <= 0 {
		return sp.c.cfg.MaxAhead
	}
	return min(int(math.Ceil(float64(lease)/float64(life))), sp.c.cfg.MaxAhead)
}

// hedging reports whether segment leases are hedged: the backend can choose a server, and HedgeDelay
// is not negative.
func (c *segmentCache) hedging() bool { return c.prefer != nil && c.cfg.HedgeDelay >= 0 }

// hedgeDelayLocked is how long a segment lease waits for its server before it is hedged:
// CacheConfig.HedgeDelay, or the 95th percentile of recent answers within bounds (see package hedge).
func (sp *space) hedgeDelayLocked() time.Duration {
	if d := sp.c.cfg.HedgeDelay; d > 0 {
		return d
	}
	return sp.answers.Get(hedgeFloor, sp.c.cfg.FetchTimeout/2, firstHedgeDelay)
}

// nextSizeLocked adapts the segment size to the rate: double when the last segment lasted under half
// the target, halve when it lasted over twice the target, within the namespace's bounds.
func (sp *space) nextSizeLocked(st allocator.Namespace) int64 {
	lo, hi := sp.c.bounds(st)
	size := max(sp.size.Load(), lo)
	target := sp.c.target(st)
	if sp.haveLifetime {
		switch l := sp.lastLifetime; {
		case l < target/2:
			size *= 2
		case l > 2*target:
			size /= 2
		}
		sp.haveLifetime = false
	}
	size = min(max(size, lo), hi)
	sp.size.Store(size)
	return size
}

// preferFor chooses the ticket server for the next lease, or for the hedge of a lease that asked last
// first: another healthy server than last, else last if it is healthy. While no server is known
// healthy (at the end of an outage, before a lease or a check brings one back), another server than
// last that is not fenced, else last if it is not: such a lease is hedged like any other, since the
// server it asks first may be slow to come back. Empty when the backend reports no health, or every
// server is fenced.
func (c *segmentCache) preferFor(last string) string {
	if c.health == nil {
		return ""
	}
	servers := c.health.Health()
	if p := pickOther(servers, last, func(h allocator.ServerHealth) bool { return h.Healthy }); p != "" {
		return p
	}
	return pickOther(servers, last, func(h allocator.ServerHealth) bool { return !h.Fenced })
}

// pickOther returns the first server that ok accepts other than last, else last if ok accepts it,
// else "".
func pickOther(servers []allocator.ServerHealth, last string, ok func(allocator.ServerHealth) bool) string {
	lastOK := false
	for _, h := range servers {
		switch {
		case !ok(h):
		case h.Name != last:
			return h.Name
		default:
			lastOK = true
		}
	}
	if lastOK {
		return last
	}
	return ""
}

// leaseSegment leases a segment of size IDs, from the server named prefer first when the backend can
// choose.
func (sp *space) leaseSegment(ctx context.Context, st allocator.Namespace, size int64, prefer, reqID string) (*segment, error) {
	c := sp.c
	var blk allocator.Block
	var err error
	if c.prefer != nil {
		blk, err = c.prefer.LeaseFrom(ctx, sp.name, size, prefer)
	} else {
		blk, err = c.backend.Lease(ctx, sp.name, size)
	}
	c.metrics.observeFetch(err)
	if err != nil {
		if !errors.Is(err, allocator.ErrNotFound) && ctx.Err() == nil {
			c.logger.Warn("segment lease failed; serving what is cached", "namespace", sp.name, "size", size,
				"request_id", reqID, "err", err)
		}
		return nil, err
	}
	seg := &segment{blk: blk, threshold: max(1, int64(float64(blk.Size)*c.cfg.PrefetchAt))}
	if st.LeaseTTL > 0 && !blk.ExpiresAt.IsZero() {
		// Every block carved from it keeps its expiry; serving only in the first half of the TTL leaves
		// each client at least half the TTL to use its block.
		seg.staleAt = mono.Nanos(blk.ExpiresAt.Add(-st.LeaseTTL / 2))
		if !seg.fresh(c.now()) {
			// Serving it would hand out blocks about to expire, and leasing again would loop.
			return nil, fmt.Errorf("%w: %s leased a segment of %q that expires at %s, within half its TTL; check the clocks",
				allocator.ErrUnavailable, blk.Server, sp.name, blk.ExpiresAt.Format(time.RFC3339Nano))
		}
	}
	return seg, nil
}

// spaceStats is one namespace's cache as /metrics shows it.
type spaceStats struct {
	Namespace   string
	Segments    int
	Remaining   int64
	SegmentSize int64
}

// spaceList returns the namespaces cached now.
func (c *segmentCache) spaceList() []*space {
	c.mu.RLock()
	defer c.mu.RUnlock()
	spaces := make([]*space, 0, len(c.spaces))
	for _, sp := range c.spaces {
		spaces = append(spaces, sp)
	}
	return spaces
}

func (c *segmentCache) stats() []spaceStats {
	c.sweep()
	spaces := c.spaceList()
	now := c.now()
	out := make([]spaceStats, 0, len(spaces))
	for _, sp := range spaces {
		st := spaceStats{Namespace: sp.name, SegmentSize: sp.size.Load()}
		count := func(seg *segment) {
			if seg.fresh(now) {
				st.Remaining += seg.remaining()
				if seg.remaining() > 0 {
					st.Segments++
				}
			}
		}
		if cur := sp.cur.Load(); cur != nil {
			count(cur)
		}
		sp.mu.Lock()
		for _, n := range sp.ahead {
			count(n)
		}
		sp.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// segmentView is one cached segment as the status page shows it.
type segmentView struct {
	Role      string // "current" or "next" (leased ahead)
	Block     allocator.Block
	Last      int64     // the block's last ID
	Taken     int64     // IDs carved from it
	Remaining int64     // IDs left
	NextID    int64     // the first ID not yet handed out; meaningful while Remaining > 0
	StaleAt   time.Time // zero: never; from then on it serves nothing
	Stale     bool
}

// spaceView is one namespace's cache as the status page shows it.
type spaceView struct {
	Namespace string
	Segments  []segmentView // current first, then the next ones, oldest first; those there are
	Remaining int64         // IDs left in the segments that still serve
	NextSize  int64         // size of the next segment lease; 0 before the first
	Fetching  bool          // a backend call is in flight
	Fetches   int           // backend calls in flight
	Failures  int           // consecutive failed calls
	LastError string        // of the last call, while it failed
}

func viewOf(role string, seg *segment, now time.Time) segmentView {
	v := segmentView{Role: role, Block: seg.blk, Taken: min(seg.taken.Load(), seg.blk.Size), Remaining: seg.remaining(),
		Stale: !seg.fresh(now)}
	if seg.staleAt != 0 {
		v.StaleAt = mono.Time(seg.staleAt)
	}
	v.Last, _ = seg.blk.Last()
	if v.Remaining > 0 {
		v.NextID, _ = seg.blk.ID(v.Taken)
	}
	return v
}

// views returns every namespace's cache, sorted by name.
func (c *segmentCache) views() []spaceView {
	spaces := c.spaceList()
	now := c.now()
	out := make([]spaceView, 0, len(spaces))
	for _, sp := range spaces {
		v := spaceView{Namespace: sp.name, NextSize: sp.size.Load()}
		if cur := sp.cur.Load(); cur != nil {
			v.Segments = append(v.Segments, viewOf("current", cur, now))
		}
		sp.mu.Lock()
		for _, n := range sp.ahead {
			v.Segments = append(v.Segments, viewOf("next", n, now))
		}
		v.Fetches, v.Failures = len(sp.calls), sp.failures
		v.Fetching = v.Fetches > 0
		if sp.lastErr != nil {
			v.LastError = sp.lastErr.Error()
		}
		sp.mu.Unlock()
		for _, seg := range v.Segments {
			if !seg.Stale {
				v.Remaining += seg.Remaining
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out
}
