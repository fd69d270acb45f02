package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/backoff"
	"github.com/ticketd/ticketd/internal/mono"
)

// Set is a backend's ticket servers: S is the backend's server type, R its record of a namespace's
// settings. Leases go round-robin across usable servers and fail over to the others; namespace
// settings are read from every usable server, the latest copy winning, and cached for leases. Safe for
// concurrent use once every server is added.
type Set[S Server[R], R Record[R]] struct {
	cfg     Config
	servers []S
	next    atomic.Uint64 // round-robin cursor

	settingsMu sync.Mutex
	// settings holds, per namespace, the newest copy of its settings this process has read or written,
	// and whether and when it was read for leases. A copy is never dropped: a server that missed a
	// change while every server holding it is away still gets it from here (see Known).
	settings map[string]settingsEntry[R]
	// refreshing is closed when the background refresh of the cached settings ends (see Settings); nil
	// while none runs.
	refreshing chan struct{}

	bg        context.Context // ends background refreshes at Close
	stopBG    context.CancelFunc
	closeOnce sync.Once
	closed    atomic.Bool
	done      chan struct{}
	wg        sync.WaitGroup
}

// settingsEntry is what a Set knows of one namespace's settings: the newest copy, and when it was last
// read for leases (see Settings), in mono.Nanos; 0 while it is not cached for leases (never read
// for one, or dropped after a change). One copy serves both: a namespace costs one entry, not two.
type settingsEntry[R any] struct {
	rec     R
	fetched int64
}

// cached reports whether the entry is cached for leases, and for how long at now.
func (e settingsEntry[R]) cached(now time.Time) (age time.Duration, ok bool) {
	return time.Duration(mono.Nanos(now) - e.fetched), e.fetched != 0
}

// NewSet returns an empty Set; add its servers with Add before any other call.
func NewSet[S Server[R], R Record[R]](cfg Config) *Set[S, R] {
	if cfg.Runtime.Now == nil {
		cfg.Runtime.Now = cfg.Now
	}
	cfg.Runtime = cfg.Runtime.WithDefaults()
	cfg.Now = cfg.Runtime.Now
	cfg.rotation = &rotation{}
	set := &Set[S, R]{cfg: cfg, settings: map[string]settingsEntry[R]{},
		done: make(chan struct{})}
	set.bg, set.stopBG = context.WithCancel(context.Background())
	set.next.Store(uint64(cfg.Runtime.Float64() * (1 << 32))) // processes started together do not all begin on the same server
	return set
}

// NewMember returns the health of a server of this Set that has not been checked yet.
func (set *Set[S, R]) NewMember(name string) *Member { return NewMember(name, &set.cfg) }

// Add appends a server; the order of Add is the configuration order.
func (set *Set[S, R]) Add(s S) { set.servers = append(set.servers, s) }

// All returns the servers in configuration order. The slice is the Set's own: do not change it.
func (set *Set[S, R]) All() []S { return set.servers }

// Names returns the server names in configuration order.
func (set *Set[S, R]) Names() []string {
	out := make([]string, len(set.servers))
	for i, s := range set.servers {
		out[i] = s.Name()
	}
	return out
}

// Health reports each server's state in configuration order.
func (set *Set[S, R]) Health() []allocator.ServerHealth {
	out := make([]allocator.ServerHealth, len(set.servers))
	for i, s := range set.servers {
		out[i] = s.Health()
	}
	return out
}

// InParallel runs fn on every server at once and returns its errors in configuration order.
func (set *Set[S, R]) InParallel(fn func(S) error) []error {
	errs := make([]error, len(set.servers))
	var wg sync.WaitGroup
	for i, s := range set.servers {
		wg.Add(1)
		set.cfg.Runtime.Go(func() {
			defer wg.Done()
			errs[i] = fn(s)
		})
	}
	wg.Wait()
	return errs
}

// Order returns the servers starting at the round-robin cursor, the one named prefer first when there
// is one.
func (set *Set[S, R]) Order(prefer string) []S {
	out := backoff.Rotate(set.servers, &set.next)
	if prefer != "" {
		for i, s := range out {
			if s.Name() == prefer {
				out[0], out[i] = out[i], out[0]
				break
			}
		}
	}
	return out
}

// why joins the errors of the servers a call tried; when it tried none, it says why each server was
// left out.
func (set *Set[S, R]) why(errs []error) error {
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	reasons := make([]error, 0, len(set.servers))
	for _, h := range set.Health() {
		reason := h.Error
		if h.Healthy {
			reason = "usable, but not tried before the call's time ran out"
		}
		reasons = append(reasons, fmt.Errorf("%s: %s", h.Name, reason))
	}
	return fmt.Errorf("no %s was usable: %w", set.cfg.Noun, errors.Join(reasons...))
}

// Every runs fn every d in the background until Close, and also soon after each call of the returned
// kick (calls that come while fn runs or waits to run are merged into one run).
func (set *Set[S, R]) Every(d time.Duration, fn func()) (kick func()) {
	if set.cfg.Runtime.Every != nil {
		return set.cfg.Runtime.Every(d, set.done, fn)
	}
	kicked := make(chan struct{}, 1)
	set.wg.Add(1)
	go func() {
		defer set.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-set.done:
				return
			case <-t.C:
			case <-kicked:
			}
			fn()
		}
	}()
	return func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	}
}

// Closed reports whether Close was called.
func (set *Set[S, R]) Closed() bool { return set.closed.Load() }

// Close stops the background work started by Every, waits for it, then runs release (the backend
// closes its connections there). Safe to call twice: release runs once.
func (set *Set[S, R]) Close(release func()) {
	set.closeOnce.Do(func() {
		set.settingsMu.Lock() // no background refresh starts after this (see Settings)
		set.closed.Store(true)
		set.settingsMu.Unlock()
		close(set.done)
		set.stopBG()
		set.wg.Wait()
		release()
	})
}

// CloseRecording is Close that first records the water marks one last time with record, under
// AttemptTimeout (a failure is logged), then runs release.
func (set *Set[S, R]) CloseRecording(record func(context.Context) error, release func()) {
	set.Close(func() {
		ctx, cancel := set.cfg.Runtime.Timeout(context.Background(), set.cfg.AttemptTimeout)
		if err := record(ctx); err != nil {
			set.cfg.Logger.Warn("could not record high-water marks at close", "err", err)
		}
		cancel()
		release()
	})
}

// Lease takes a block of size IDs (0 means the namespace's block size) from the first server that
// gives one: prefer first when it names a server (also while it is in backoff), then round-robin;
// first every server that is up or due for a retry, then those still in backoff. When every server
// failed it waits (a backoff that grows from MinBackoff, jittered) and tries them all again, round
// after round until Timeout: a cluster that stalls writes for a few seconds (a Galera cluster until it
// evicts a dead node) delays a lease rather than failing it. lease is one attempt on one server,
// bounded by AttemptTimeout; a server that is down is revived first. An attempt whose outcome is
// unknown is abandoned, and the next one takes a new range (the lost range is a gap, never issued
// again). A bad name, or a size below 0 or above MaxBlockSizeLimit, is refused before any server is
// asked; a request that a server refuses (a size above the namespace's maximum, a namespace that does
// not exist) is not tried again, nor is a server that cannot serve it before an operator acts
// (exhausted, fenced, misconfigured).
func (set *Set[S, R]) Lease(ctx context.Context, namespace string, size int64, prefer string,
	lease func(ctx context.Context, s S, rec R, size int64) (allocator.Block, error)) (allocator.Block, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.Block{}, err
	}
	if size < 0 || size > allocator.MaxBlockSizeLimit {
		return allocator.Block{}, allocator.ValidateSize(size, allocator.MaxBlockSizeLimit)
	}
	if set.closed.Load() {
		return allocator.Block{}, allocator.ErrClosed
	}
	began := set.cfg.Now()
	deadline := began.Add(set.cfg.Timeout)
	ctx, cancel := set.cfg.Runtime.Timeout(ctx, set.cfg.Timeout)
	defer cancel()
	rec, err := set.Settings(ctx, namespace)
	for round := 1; errors.Is(err, allocator.ErrUnavailable) && set.pause(ctx, round, deadline); round++ {
		rec, err = set.Settings(ctx, namespace)
	}
	if err != nil {
		return allocator.Block{}, err
	}
	ns := rec.Namespace()
	if size == 0 {
		size = ns.BlockSize
	}
	if err := allocator.ValidateSize(size, ns.MaxBlockSize); err != nil {
		return allocator.Block{}, err
	}

	l := leaseRounds[S, R]{set: set, rec: rec, size: size, prefer: prefer, lease: lease, last: map[S]error{}, spent: map[S]bool{}}
	order := set.Order(prefer)
	rounds := 0
	for {
		rounds++
		if blk, done, err := l.round(ctx, order); done {
			return blk, err
		}
		if len(l.spent) == len(set.servers) || set.closed.Load() || !set.pause(ctx, rounds, deadline) {
			break
		}
	}
	if l.exhausted > 0 && l.exhausted == len(set.servers) {
		return allocator.Block{}, fmt.Errorf("%w: namespace %q on %s: %w", allocator.ErrExhausted, namespace, set.cfg.Every, l.errs())
	}
	errs := l.errs()
	switch {
	case errs == nil && ctx.Err() != nil:
		errs = ctx.Err()
	case errs == nil:
		errs = set.why(nil)
	}
	if rounds > 1 {
		return allocator.Block{}, fmt.Errorf("%w: namespace %q, %d rounds over the servers in %s: %w", allocator.ErrUnavailable, namespace, rounds,
			set.cfg.Now().Sub(began).Round(time.Millisecond), errs)
	}
	return allocator.Block{}, fmt.Errorf("%w: namespace %q: %w", allocator.ErrUnavailable, namespace, errs)
}

// leaseRounds is one Lease's tries: each server's last error, and the servers it no longer tries.
type leaseRounds[S Server[R], R Record[R]] struct {
	set    *Set[S, R]
	rec    R
	size   int64
	prefer string
	lease  func(ctx context.Context, s S, rec R, size int64) (allocator.Block, error)

	failed    []S         // the servers that failed, in the order of their first failure
	last      map[S]error // each one's last error
	spent     map[S]bool  // servers that cannot serve this lease before an operator acts
	exhausted int         // how many of those have no ID left for the namespace
}

// round tries every server not spent once: first the one preferred and those up or due for a retry,
// then the others. The server preferred goes first also while it is in backoff: the segment cache
// prefers a server that is down while none is known up, and hedges the lease to another after a
// while, and that hedge must not ask the first lease's server first. done means the lease ends with
// the block or the error returned.
func (l *leaseRounds[S, R]) round(ctx context.Context, order []S) (allocator.Block, bool, error) {
	set := l.set
	tried := map[S]bool{}
	for pass := 0; pass < 2; pass++ {
		for _, s := range order {
			if l.spent[s] || tried[s] || (pass == 0 && s.Name() != l.prefer && !s.Usable() && !s.Due(set.cfg.Now())) {
				continue
			}
			if ctx.Err() != nil {
				return allocator.Block{}, false, nil
			}
			tried[s] = true
			blk, err := set.attempt(ctx, s, l.rec, l.size, l.lease)
			switch {
			case err == nil:
				return blk, true, nil
			case errors.Is(err, allocator.ErrInvalidSize), errors.Is(err, allocator.ErrNotFound):
				return blk, true, err // the request is wrong, not the server
			case ctx.Err() != nil && errors.Is(err, context.Canceled):
				return blk, true, err
			case errors.Is(err, allocator.ErrExhausted):
				l.spent[s] = true
				l.exhausted++
			case errors.Is(err, allocator.ErrFenced), errors.Is(err, allocator.ErrMisconfigured):
				l.spent[s] = true
			}
			if _, seen := l.last[s]; !seen {
				l.failed = append(l.failed, s)
			}
			l.last[s] = fmt.Errorf("%s: %w", s.Name(), err)
			if set.cfg.Observer != nil {
				set.cfg.Observer.ObserveFailover(s.Name())
			}
		}
	}
	return allocator.Block{}, false, nil
}

// errs joins each failed server's last error, in the order they first failed; nil when none failed.
func (l *leaseRounds[S, R]) errs() error {
	out := make([]error, 0, len(l.failed))
	for _, s := range l.failed {
		out = append(out, l.last[s])
	}
	return errors.Join(out...)
}

// pause waits before the next round of a call's tries: MinBackoff doubled per round up to MaxBackoff,
// jittered, and never closer to the call's deadline (ctx's, and deadline on the Set's clock) than
// MinBackoff (the last round still has time to ask). It reports false, at once, when no round is left:
// the call ended or its time is spent.
func (set *Set[S, R]) pause(ctx context.Context, round int, deadline time.Time) bool {
	wait := backoff.Policy{Min: set.cfg.MinBackoff, Max: set.cfg.MaxBackoff, Jitter: set.cfg.Runtime.Float64}.Wait(round)
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)-set.cfg.MinBackoff)
	}
	wait = min(wait, deadline.Sub(set.cfg.Now())-set.cfg.MinBackoff)
	if wait <= 0 || ctx.Err() != nil || set.closed.Load() {
		return false
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(set.bg, cancel) // Close ends the wait
	defer stop()
	// A server back in rotation ends it too: the next round tries that server at once, rather than
	// after a wait that began while every server was out.
	var back atomic.Bool
	unwatch := set.cfg.rotation.onBack(func() { back.Store(true); cancel() })
	slept := set.cfg.Runtime.Sleep(sctx, wait)
	unwatch()
	return slept || back.Load() && ctx.Err() == nil && !set.closed.Load()
}

// attempt makes one attempt on one server, reviving it first if it was down, and keeps its health.
func (set *Set[S, R]) attempt(ctx context.Context, s S, rec R, size int64,
	lease func(ctx context.Context, s S, rec R, size int64) (allocator.Block, error)) (allocator.Block, error) {
	if !s.Usable() {
		if err := s.Revive(ctx); err != nil {
			return allocator.Block{}, err
		}
	}
	actx, cancel := set.cfg.Runtime.Timeout(ctx, set.cfg.AttemptTimeout)
	defer cancel()
	start := set.cfg.Now()
	blk, err := lease(actx, s, rec, size)
	if set.cfg.Observer != nil {
		set.cfg.Observer.ObserveLease(s.Name(), set.cfg.Now().Sub(start), err)
	}
	if err != nil && set.cfg.IsFault(err) && ctx.Err() == nil {
		s.MarkDown(err)
	}
	if err == nil {
		s.MarkUp()
	}
	return blk, err
}
