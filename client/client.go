// Package client is the Go SDK of ticketd: it leases blocks of unique IDs from ticketd servers (or from a
// backend in the same process) and serves them from memory, one atomic add per ID, refilling in the
// background before the cached IDs run out.
//
// # Uniqueness and order
//
// Every ID a Client returns is unique: it comes from a block that no other caller, process or server
// was given, and each ID of a block is handed out at most once. IDs from different Clients, processes
// and machines never collide as long as they lease from the same ticket servers.
//
// IDs are not returned in increasing order, not even to a single goroutine. To serve many goroutines
// without a shared counter, a Client splits each block into runs of consecutive IDs (of the block's
// step), one run per processor; a goroutine takes the next ID of the run of the processor it happens to
// run on, and the Go scheduler may move it to another processor between two calls. What holds:
//   - IDs taken from the same run come out in increasing order of the moment they were taken, so a
//     goroutine that stays on one processor sees increasing IDs until that run is used up;
//   - a block leased later from the same ticket server through the same path (FromBackend, or one
//     ticketd replica, which carves blocks from its segments in order) holds only higher IDs, so IDs
//     grow over time, roughly, at the granularity of blocks; ticketd replicas each cache segments of
//     their own, so blocks through different replicas interleave by up to a segment;
//   - the IDs that one NextN call writes are increasing within each run they come from.
//
// A caller that needs a strict order must sort, or use one ID as a sequence number and ticketd only to
// make it unique. IDs also have gaps: IDs cached when a Client is closed, or when its block expires,
// are never issued to anyone (Stats counts the expired ones as Discarded).
//
// # Refill
//
// The next block is leased in the background once the IDs left fall below a low-water mark, so that
// the block lands before the cache runs dry at the fastest rate and the slowest refill latency seen
// lately (each forgotten at half per second); the mark is never below 20% of the last block. The block
// size follows demand: rate × WithRefillInterval, between the namespace's block size and its maximum.
// One lease in flight is the rule; when demand × refill latency is more than the largest block the
// namespace allows, the Client keeps several blocks cached and several leases in flight, as many as
// the mark needs (up to WithMaxInFlight), and fewer again when demand falls. A refill not answered within the hedge delay (WithHedgeDelay; by default the 95th
// percentile of recent requests' latencies) sends a second lease to another URL; the first block to
// arrive is used, and the other, if it comes, is kept while the cache has room, else dropped (a gap).
// The low-water mark covers the hedge delay too. A failed refill is retried with exponential backoff
// and jitter while the cached IDs keep being served; only when nothing is left do callers wait, until
// the context ends or WithMaxWait passes, and then get ErrUnavailable.
package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors, for errors.Is. A refill's error, which ErrUnavailable wraps, matches the one of the
// server's answer (see StatusError) or the one a Backend wrapped.
var (
	// ErrUnavailable means no ID was cached and no source delivered a block before the caller's context
	// ended or the WithMaxWait wait passed. It wraps the last refill error and the context's error.
	ErrUnavailable = errors.New("client: no ID available: the cache is empty and no source delivered a block in time")
	// ErrClosed means the Client has been closed.
	ErrClosed = errors.New("client: closed")
	// ErrUnauthorized means the server wants a bearer token (HTTP 401); set one with WithToken.
	ErrUnauthorized = errors.New("client: unauthorized: the server wants a bearer token")
	// ErrForbidden means the token is not valid for this namespace (HTTP 403).
	ErrForbidden = errors.New("client: forbidden: the token is not valid for this namespace")
	// ErrRateLimited means the server asked the client to slow down (HTTP 429).
	ErrRateLimited = errors.New("client: rate limited by the server")
	// ErrBadRequest means the server refused a request as malformed (HTTP 400 or 413 that is not about
	// the namespace name or the block size).
	ErrBadRequest = errors.New("client: the server refused the request as malformed")
	// ErrBadResponse means a server's answer could not be used: not JSON, an invalid block, a block of
	// another namespace, or one that arrived already expired.
	ErrBadResponse = errors.New("client: unusable answer from the source")
	// ErrOverlap means a source returned a block that shares IDs with one this Client already used;
	// the block is refused, and the refill retried.
	ErrOverlap = errors.New("client: leased block overlaps a block already served")

	// ErrInvalidNamespace means a namespace name is not 1 to 64 of a-z, 0-9, '_', '.' and '-', starting
	// with a letter or a digit (HTTP 400 invalid_namespace).
	ErrInvalidNamespace = errors.New("client: invalid namespace name")
	// ErrInvalidSize means a lease asked for more IDs than the namespace allows (HTTP 400 invalid_size).
	ErrInvalidSize = errors.New("client: invalid block size")
	// ErrNotFound means the namespace does not exist (HTTP 404 namespace_not_found).
	ErrNotFound = errors.New("client: namespace not found")
	// ErrExhausted means the namespace has no ID left below its ceiling (HTTP 409 id_space_exhausted).
	ErrExhausted = errors.New("client: ID space exhausted")
	// ErrMisconfigured means the ticket servers' settings could issue duplicate IDs, so they serve none
	// (HTTP 500 misconfigured).
	ErrMisconfigured = errors.New("client: ticket server misconfigured")
	// ErrServerUnavailable means no ticket server could serve the lease (HTTP 503, or any 5xx).
	ErrServerUnavailable = errors.New("client: no ticket server available")
)

// Limits of a namespace, as ticketd sets them.
const (
	defaultMaxBlockSize = 1_000_000 // a namespace's maximum block size when it sets none
	maxBlockSizeLimit   = 1 << 32   // the largest maximum block size a namespace may set
	maxNameLength       = 64
)

// validateName refuses a namespace name that no ticketd server accepts, before any request.
func validateName(name string) error {
	ok := len(name) >= 1 && len(name) <= maxNameLength
	for i := 0; ok && i < len(name); i++ {
		ch := name[i]
		ok = ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || i > 0 && (ch == '_' || ch == '.' || ch == '-')
	}
	if !ok {
		return fmt.Errorf("%w: %q must be 1 to 64 of a-z, 0-9, '_', '.' and '-', starting with a letter or a digit",
			ErrInvalidNamespace, clip(name, 80))
	}
	return nil
}

const (
	// numShards is the number of per-processor runs; processors beyond it share (atomically).
	numShards = 64
	shardMask = numShards - 1
	// maxRun bounds the IDs one processor takes from a block at a time; smaller runs strand fewer IDs on
	// idle processors, larger ones take the lock less often.
	maxRun = 8192
)

// run is a slice of a block served by one processor: IDs base + k*step for k in [0, size). Claiming
// is one atomic add on next. A run fills two cache lines of its own, so that processors never write
// to a line another reads.
type run struct {
	next  atomic.Int64 // index of the next unclaimed ID; passes size once the run is used up
	size  int64
	base  int64
	step  int64
	lease *lease
	_     [88]byte
}

// claim takes up to len(dst) IDs from r and writes them to dst; it returns how many.
func claim(r *run, dst []int64) int {
	if r == nil || len(dst) == 0 || r.next.Load() >= r.size {
		return 0
	}
	want := min(int64(len(dst)), r.size) // so that next cannot overflow however often it is called
	k := r.next.Add(want) - want
	if k < 0 || k >= r.size {
		return 0
	}
	got := min(want, r.size-k)
	for i := range got {
		dst[i] = r.base + (k+i)*r.step
	}
	return int(got)
}

// shard holds one processor's current run, alone on its cache lines.
type shard struct {
	run atomic.Pointer[run]
	_   [120]byte
}

// lease is a block the Client holds.
type lease struct {
	blk     Block
	carved  int64     // IDs handed to runs or callers
	useBy   time.Time // when to stop serving it (a margin before its expiry); zero: never
	revoked bool
	stop    func() bool // the expiry timer
}

// flight is the state of the leases in flight. Guarded by Client.mu.
type flight struct {
	n        int   // leases in flight
	ids      int64 // IDs they asked for (the namespace's block size for a lease of size 0)
	peak     int   // the most leases in flight at once so far
	learning bool  // the namespace's settings are being read: no second lease yet
}

// start counts a lease of ids IDs in flight.
func (f *flight) start(ids int64) {
	f.n++
	f.ids += ids
	f.peak = max(f.peak, f.n)
}

// end counts off a lease of ids IDs whose refill is settled.
func (f *flight) end(ids int64) {
	f.n--
	f.ids -= ids
}

// retrying is the outcome of the last refills: their errors and the backoff before the next. Guarded
// by Client.mu.
type retrying struct {
	permErr   error // a refill error that waiting will not cure (unknown namespace, bad token)
	lastErr   error
	failures  int
	backoffTo time.Time
	stopRetry func() bool
}

// succeeded clears the errors and the backoff after a refill that leased a block.
func (r *retrying) succeeded() {
	r.failures, r.permErr, r.lastErr, r.backoffTo = 0, nil, nil, time.Time{}
}

// stop cancels the retry timer, if one is armed.
func (r *retrying) stop() {
	if r.stopRetry != nil {
		r.stopRetry()
	}
}

// counters are the tallies Stats reports. Guarded by Client.mu.
type counters struct {
	served, carvedTotal, discarded, stalls, refills, refillErrors int64
}

// waiters is who waits on whom: callers waiting for a block, and lease goroutines waiting for
// Client.mu, whom callers holding it make way for.
type waiters struct {
	avail   chan struct{} // closed and replaced whenever waiting callers should look again; under Client.mu
	callers atomic.Int32  // callers waiting for a block
	refills atomic.Int32  // lease goroutines waiting for Client.mu
}

// broadcast wakes the callers waiting, so that they look again. The caller holds Client.mu.
func (w *waiters) broadcast() {
	close(w.avail)
	w.avail = make(chan struct{})
}

// lifecycle is what Close ends: the background leases and timers, and the callers waiting. closed is
// guarded by Client.mu; the rest is set by New and synchronizes itself.
type lifecycle struct {
	closed    bool
	done      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// stop cancels the leases in flight, wakes the callers waiting and waits for the lease goroutines to
// return.
func (l *lifecycle) stop() {
	l.cancel()
	close(l.done)
	l.wg.Wait()
}

// Client serves unique IDs of one namespace from leased blocks. All its methods are safe for
// concurrent use by any number of goroutines.
type Client struct {
	// Its state comes in parts, each a type with the methods that keep it: the processors' runs
	// (shards), the ledger of blocks held, the leases in flight, the sizing of the next block, the
	// refill errors and backoff, the hedging, the counters, the waiters and the lifecycle. The runs are
	// read and claimed without a lock; mu guards every other part (but the atomics in waiters and what
	// New sets in lifecycle), all of them under the one lock because their invariants span parts: a
	// carve moves IDs from the ledger to a run, counts them and samples the demand; a block that lands
	// changes the flight, the backoff, the sizing, the counters and the ledger at once, and the
	// low-water mark it sets is measured against the ledger and the flight together.
	shards [numShards]shard

	ns    string
	cfg   config
	src   leaser
	procs int64

	mu       sync.Mutex
	ledger   ledger
	flight   flight
	size     sizing
	retrying retrying
	hedge    hedging
	count    counters
	waiters  waiters
	life     lifecycle
}

// New returns a Client that serves IDs of namespace from src. It does no I/O itself: a background
// goroutine leases the first block at once, and the first Next waits for it. Close the Client to stop
// its leases.
func New(src Source, namespace string, opts ...Option) (*Client, error) {
	if src == nil {
		return nil, errors.New("client: a Source is required (client.HTTP or client.FromBackend)")
	}
	if err := validateName(namespace); err != nil {
		return nil, err
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	cfg = cfg.withDefaults()
	if cfg.procs == 0 {
		cfg.procs = runtime.GOMAXPROCS(0)
	}
	l, err := src.open(namespace, &cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		ns: namespace, cfg: cfg, src: l,
		procs: int64(min(max(cfg.procs, 1), numShards)),
	}
	c.waiters.avail = make(chan struct{})
	c.size.lowWater = 1 // lease the first block at once
	c.life.done = make(chan struct{})
	c.hedge.paths = l.paths()
	c.hedge.delay = c.hedge.derive(&c.cfg)
	c.size.rateAt = cfg.clock.Now()
	c.life.ctx, c.life.cancel = context.WithCancel(context.Background())
	c.mu.Lock()
	c.startLeasesLocked()
	c.mu.Unlock()
	return c, nil
}

// Next returns a new unique ID. It is lock-free and does not allocate while the cache holds IDs; it
// waits only when the cache is empty, until a refill lands, ctx ends or WithMaxWait passes (then
// ErrUnavailable). ctx is only looked at while waiting.
func (c *Client) Next(ctx context.Context) (int64, error) {
	p := procPin() // procID, by hand: the compiler does not inline it
	procUnpin()
	if r := c.shards[p&shardMask].run.Load(); r != nil {
		if k := r.next.Add(1) - 1; k < r.size {
			return r.base + k*r.step, nil
		}
	}
	return c.nextSlow(ctx)
}

func (c *Client) nextSlow(ctx context.Context) (int64, error) {
	var one [1]int64
	if _, err := c.fill(ctx, one[:]); err != nil {
		return 0, err
	}
	return one[0], nil
}

// NextN fills dst with new unique IDs and returns how many it wrote: len(dst), or fewer with an error
// when the cache ran dry and no refill came in time (ErrUnavailable) or the Client was closed. The IDs
// are increasing within each run they come from (see the package documentation).
func (c *Client) NextN(ctx context.Context, dst []int64) (int, error) {
	n := claim(c.shards[procID()&shardMask].run.Load(), dst)
	if n == len(dst) {
		return n, nil
	}
	m, err := c.fill(ctx, dst[n:])
	return n + m, err
}

// fill is the slow path: it carves new runs, takes IDs straight from a block for large batches, takes
// what other processors' runs hold, and waits for a refill when nothing is left.
func (c *Client) fill(ctx context.Context, dst []int64) (int, error) {
	n := 0
	stalled := false
	var timer *time.Timer
	for {
		n += claim(c.shards[procID()&shardMask].run.Load(), dst[n:])
		if n == len(dst) {
			return n, nil
		}
		c.mu.Lock()
		if c.life.closed {
			c.mu.Unlock()
			return n, ErrClosed
		}
		got, yield := c.carveLocked(dst[n:])
		n += got
		for i := 0; i < numShards && n < len(dst); i++ {
			n += claim(c.shards[i].run.Load(), dst[n:])
		}
		if n == len(dst) {
			c.unlockYielding(yield)
			return n, nil
		}
		if c.retrying.permErr != nil {
			err := c.retrying.permErr
			c.startLeasesLocked() // a retry, if its backoff has passed
			c.mu.Unlock()
			return n, err
		}
		if !stalled && c.count.refills > 0 { // waiting for the first block is start-up, not a stall
			stalled = true
			c.count.stalls++
			c.cfg.hooks.stall()
		}
		c.startLeasesLocked()
		ch := c.waiters.avail
		c.waiters.callers.Add(1)
		c.mu.Unlock()

		if timer == nil {
			timer = time.NewTimer(c.cfg.maxWait)
			defer timer.Stop()
		}
		var why error
		select {
		case <-ch:
		case <-ctx.Done():
			why = ctx.Err()
		case <-timer.C:
			why = fmt.Errorf("waited %s (WithMaxWait)", c.cfg.maxWait)
		case <-c.life.done:
		}
		c.waiters.callers.Add(-1)
		if why == nil {
			select {
			case <-c.life.done:
			default:
				continue // look again, first without the lock: the block that landed may have left a run here
			}
		}
		c.mu.Lock()
		closed, last := c.life.closed, c.retrying.lastErr
		c.mu.Unlock()
		switch {
		case closed:
			return n, ErrClosed
		case why != nil && last != nil:
			return n, fmt.Errorf("%w: namespace %s: %w; last refill error: %w", ErrUnavailable, c.ns, why, last)
		case why != nil:
			return n, fmt.Errorf("%w: namespace %s: %w", ErrUnavailable, c.ns, why)
		}
	}
}

// unlockYielding releases c.mu from a caller that has just carved a run, and yields its processor when
// a lease is in flight (yield) or a lease goroutine waits for c.mu. A lease goroutine just started, or
// woken by the unlock, waits on this processor until the caller blocks or is preempted, up to 10ms
// later; the answer to a lease in flight comes back through goroutines queued behind every busy
// caller, each of which would otherwise keep its processor for 10ms. Long enough, either way, for a
// busy cache to run dry. Yielding once per run lets them through after a run's time per caller ahead,
// for a fraction of a nanosecond per ID.
func (c *Client) unlockYielding(yield bool) {
	c.mu.Unlock()
	if yield || c.waiters.refills.Load() > 0 {
		runtime.Gosched()
	}
}

// lockForRefill takes c.mu for a lease goroutine, telling callers that it waits.
func (c *Client) lockForRefill() {
	if c.mu.TryLock() {
		return
	}
	c.waiters.refills.Add(1)
	c.mu.Lock()
	c.waiters.refills.Add(-1)
}

// carveLocked gives the caller's processor a new run (or, for a batch of at least a run, IDs straight
// from the oldest block) and claims from it, and starts the leases needed. It reports whether a lease
// is in flight.
func (c *Client) carveLocked(dst []int64) (n int, inFlight bool) {
	s := &c.shards[procID()&shardMask]
	n = claim(s.run.Load(), dst) // another goroutine may have installed a run meanwhile
	for n < len(dst) {
		l := c.headLocked()
		if l == nil {
			break
		}
		want := int64(len(dst) - n)
		size := c.runSize(l)
		if want >= size {
			base, got := c.carve(l, want)
			c.count.served += got
			for i := range got {
				dst[n] = base + i*l.blk.Step
				n++
			}
			continue
		}
		// The old run is used up: claim failed while no one else could install a run.
		n += claim(c.installLocked(s, l), dst[n:])
	}
	c.sampleRateLocked(c.cfg.clock.Now())
	c.startLeasesLocked()
	return n, c.flight.n > 0
}

// installLocked gives s a new run carved from l, in place of its used-up one.
func (c *Client) installLocked(s *shard, l *lease) *run {
	base, got := c.carve(l, c.runSize(l))
	if old := s.run.Load(); old != nil {
		c.count.served += old.size
	}
	r := &run{size: got, base: base, step: l.blk.Step, lease: l}
	s.run.Store(r)
	return r
}

// fillShardsLocked gives every processor whose run is used up a new one, so that the callers a landing
// block wakes take their IDs without the lock rather than all queueing for it.
func (c *Client) fillShardsLocked() {
	for i := range c.procs {
		s := &c.shards[i]
		if r := s.run.Load(); r != nil && r.next.Load() < r.size {
			continue
		}
		l := c.headLocked()
		if l == nil {
			return
		}
		c.installLocked(s, l)
	}
}

// runSize is how many IDs a processor takes from l at a time: a share of the block small enough that
// the processors' runs together hold at most a quarter of it.
func (c *Client) runSize(l *lease) int64 {
	return max(1, min(maxRun, l.blk.Size/(4*c.procs)))
}

// carve takes up to n IDs from the front of l's uncarved part, and counts them.
func (c *Client) carve(l *lease, n int64) (base, got int64) {
	base, got = c.ledger.take(l, n)
	c.count.carvedTotal += got
	return base, got
}

// headLocked returns the oldest block with IDs left to carve, dropping used-up and expired ones.
func (c *Client) headLocked() *lease {
	for {
		l, usable := c.ledger.front(c.cfg.clock)
		if l == nil || usable {
			return l
		}
		c.revokeLocked(l) // expired before its timer fired
	}
}

// revokeLocked stops serving l: its uncarved IDs and the unclaimed IDs of its runs are discarded.
func (c *Client) revokeLocked(l *lease) {
	left, ok := c.ledger.revoke(l)
	if !ok {
		return
	}
	c.count.discarded += left
	c.cfg.hooks.discard(left, DiscardExpired)
	for i := range c.shards {
		s := &c.shards[i]
		r := s.run.Load()
		if r == nil || r.lease != l {
			continue
		}
		claimed, left := s.drain(r)
		c.count.served += claimed
		c.count.discarded += left
		c.cfg.hooks.discard(left, DiscardExpired)
	}
	c.startLeasesLocked()
}

// drain removes r from s and ends it: a claim that comes after returns nothing. It returns how many
// IDs of r were claimed and how many were left.
func (s *shard) drain(r *run) (claimed, left int64) {
	s.run.Store(nil)
	old := r.next.Swap(r.size)
	claimed = min(max(old, 0), r.size)
	return claimed, r.size - claimed
}

// Stats is a snapshot of a Client's counters.
type Stats struct {
	// Served is the number of IDs returned by Next and NextN.
	Served int64
	// Refills is the number of blocks leased; RefillErrors the number of failed lease attempts.
	Refills, RefillErrors int64
	// RefillLatency is the moving average of how long a successful refill took.
	RefillLatency time.Duration
	// Stalls is the number of calls that found the cache empty and had to wait for a refill (waiting
	// for the very first block is not counted).
	Stalls int64
	// Discarded is the number of IDs dropped unserved: their block expired, or it was the spare of a
	// hedged refill and the cache was full.
	Discarded int64
	// Cached is the number of IDs held now.
	Cached int64
	// Rate is the demand in IDs per second, as last estimated.
	Rate float64
	// BlockSize is the size of the last block leased; LowWater the number of IDs, cached and asked for
	// by the leases in flight, below which the next lease starts.
	BlockSize, LowWater int64
	// Blocks is the number of leased blocks with IDs not yet handed to a processor or caller.
	Blocks int
	// InFlight is the number of leases in flight now, PeakInFlight the most there have been at once
	// (at most WithMaxInFlight).
	InFlight, PeakInFlight int
	// SlowRefills is the number of refills not answered within the hedge delay; Hedges the number of
	// them that sent a second lease to another URL (all of them with two URLs or more, none with one);
	// HedgesWon the number of hedges whose block came first and was used.
	SlowRefills, Hedges, HedgesWon int64
	// HedgeDelay is how long a refill waits for an answer before it is hedged: WithHedgeDelay, or the
	// 95th percentile of recent requests' latencies within its bounds.
	HedgeDelay time.Duration
	// LastError is the error of the last refill, nil when it succeeded.
	LastError error
	// Endpoints describes each ticketd URL of an HTTP source; nil for FromBackend.
	Endpoints []Endpoint
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	st := Stats{
		Served: c.count.served, Refills: c.count.refills, RefillErrors: c.count.refillErrors,
		RefillLatency: c.size.latency, Stalls: c.count.stalls, Discarded: c.count.discarded,
		Cached: c.ledger.uncarved, Rate: c.size.rate, BlockSize: c.size.lastSize, LowWater: c.size.lowWater,
		LastError: c.retrying.lastErr, Blocks: c.ledger.blocks(),
		InFlight: c.flight.n, PeakInFlight: c.flight.peak,
		SlowRefills: c.hedge.slow, Hedges: c.hedge.sent, HedgesWon: c.hedge.won, HedgeDelay: c.hedge.delay,
	}
	for i := range c.shards {
		if r := c.shards[i].run.Load(); r != nil {
			claimed := min(max(r.next.Load(), 0), r.size)
			st.Served += claimed
			st.Cached += r.size - claimed
		}
	}
	c.mu.Unlock()
	st.Endpoints = c.src.endpoints()
	return st
}

// Close stops the background refill, cancels the leases in flight and releases the source's idle
// connections. IDs still cached, and blocks that land after Close, are never issued (a gap). Calls to
// Next after Close return ErrClosed. Close is safe to call more than
// once and always returns nil.
func (c *Client) Close() error {
	c.life.closeOnce.Do(func() {
		c.mu.Lock()
		c.life.closed = true
		for i := range c.shards {
			if r := c.shards[i].run.Load(); r != nil {
				claimed, _ := c.shards[i].drain(r)
				c.count.served += claimed
			}
		}
		c.ledger.stopTimers()
		c.retrying.stop()
		c.waiters.broadcast()
		c.mu.Unlock()
		c.life.stop()
		c.src.close()
	})
	return nil
}
