package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// The restored-state guard, as the MySQL pair has it. An instance restarted from an old RDB or AOF, or
// one whose data was wiped, comes back with counters that went back in time (or none), and would issue
// again every ID since. Each process keeps, per instance and namespace, the highest counter it has seen
// there (its floors), writes them into the other instances' water marks (the marks hash, field
// "offset:namespace") every WatermarkInterval and on Close, and reads the peers' marks back into its
// floors. Every lease script requires the counter to be at or above the floor and the instance to keep
// the identity its claim was proven with; every check, and the guard every WatermarkInterval, compares
// the counters with the floors. An instance that fails is fenced until `ticketd repair`.

// writeMarks writes every instance's unwritten floors (of its counters and of its own lease counts),
// and what this process leased there since the last write, into each usable peer.
func (s *Store) writeMarks(ctx context.Context) error {
	var errs []error
	now := s.cfg.now()
	for _, in := range s.set.All() {
		if in.checked.Load() == nil {
			continue
		}
		pace := in.marks.TakePace(now)
		for _, p := range s.set.All() {
			// A fenced peer keeps marks too (see the MySQL backend's writeWatermarks).
			if p == in || !(p.Usable() || p.fence.Fenced()) {
				continue
			}
			err := s.writeTo(ctx, in, p, pace)
			p.stored.Note(in.Name(), err, now)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeTo writes in's unwritten floors and what this process leased there into the peer p.
func (s *Store) writeTo(ctx context.Context, in, p *instance, pace map[string]failover.Pace) error {
	off := strconv.FormatInt(in.offset, 10) + ":"
	for _, m := range []struct {
		floors *failover.Floors
		key    string
		what   string
	}{{&in.marks, s.keys.marks(), "water marks"}, {&in.local, s.keys.localMarks(), "lease counts"}} {
		pending := m.floors.Pending(p.Name())
		if len(pending) == 0 {
			continue
		}
		args := make([]any, 0, 2*len(pending))
		for ns, v := range pending {
			args = append(args, off+ns, strconv.FormatInt(v.Value, 10))
		}
		if err := raiseScript.Run(ctx, p.client, []string{m.key}, args...).Err(); err != nil {
			return fmt.Errorf("%s of %s on %s: %w", m.what, in.Name(), p.Name(), err)
		}
		for ns, v := range pending {
			m.floors.Wrote(p.Name(), ns, v.Value)
		}
	}
	args := []any{s.cfg.WatermarkInterval.Microseconds()}
	for ns, pc := range pace {
		if pc.Span > 0 {
			args = append(args, off+ns, strconv.FormatInt(pc.PerSecond, 10), strconv.FormatInt(pc.Span, 10))
		}
	}
	if len(args) == 1 {
		return nil
	}
	k := s.keys
	if err := paceScript.Run(ctx, p.client, []string{k.rates(), k.leased(), k.windows(), k.fleet(), k.intervals()}, args...).Err(); err != nil {
		return fmt.Errorf("lease rates of %s on %s: %w", in.Name(), p.Name(), err)
	}
	return nil
}

// readMarks reads every reachable instance's water marks into the floors of the instances they are
// about.
func (s *Store) readMarks(ctx context.Context) {
	for _, p := range s.set.All() {
		if !p.reachable() {
			continue
		}
		pipe := p.client.Pipeline()
		marks := pipe.HGetAll(ctx, s.keys.marks())
		local := pipe.HGetAll(ctx, s.keys.localMarks())
		if _, err := pipe.Exec(ctx); err != nil {
			s.cfg.Logger.Debug("could not read water marks", "peer", p.Name(), "err", err)
			continue
		}
		d := description{marks: marks.Val(), localMarks: local.Val()}
		for _, in := range s.set.All() {
			if in != p {
				in.observeMarks(d, p.Name())
			}
		}
	}
}

// guard runs every WatermarkInterval, and at once when an instance is fenced: it writes the marks to the
// peers, reads theirs back into the floors, takes out of rotation an instance whose persistence was
// switched off while it served, and fences one whose counters went below the floors — also when no
// lease is asking.
func (s *Store) guard() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.AttemptTimeout)
	defer cancel()
	if s.cfg.marksWriting != nil {
		s.cfg.marksWriting()
	}
	if err := s.writeMarks(ctx); err != nil && !s.set.Closed() {
		s.cfg.Logger.Warn("could not record high-water marks", "err", err)
	}
	s.readMarks(ctx)
	for _, in := range s.set.All() {
		if !in.Usable() {
			continue
		}
		// Persistence switched off on the running instance takes it out of rotation.
		if err := in.checkDurability(ctx); errors.Is(err, allocator.ErrMisconfigured) {
			in.MarkDown(err)
			continue
		}
		if err := s.checkFence(ctx, in); errors.Is(err, allocator.ErrFenced) {
			in.MarkDown(err)
		}
	}
}

// checkFence compares the instance's counters with its floors: a counter below its floor, or gone
// although the floor says the instance issued from it, fences the instance.
func (s *Store) checkFence(ctx context.Context, in *instance) error {
	floors := in.marks.Snapshot()
	if len(floors) == 0 {
		in.fence.Clear()
		return nil
	}
	names := make([]string, 0, len(floors))
	for ns := range floors {
		names = append(names, ns)
	}
	sort.Strings(names)
	pipe := in.client.Pipeline()
	cmds := make([]*goredis.StringCmd, len(names))
	for i, ns := range names {
		cmds[i] = pipe.Get(ctx, s.keys.counter(ns))
	}
	counts := pipe.HMGet(ctx, s.keys.local(), names...)
	// Read in the same round trip as the counters, so that an instance wiped between two reads is not
	// reported as one that merely lost a namespace.
	ident := pipe.HGet(ctx, s.keys.identity(), "id")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("%s: %w", in.Name(), err)
	}
	var fenced, details []string
	for i, ns := range names {
		f, local := floors[ns], in.local.Get(ns)
		v, err := cmds[i].Int64()
		count := int64(0)
		if i < len(counts.Val()) {
			if c, ok := counts.Val()[i].(string); ok {
				count, _ = strconv.ParseInt(c, 10, 64)
			}
		}
		switch {
		case errors.Is(err, goredis.Nil) && f.Value > 0:
			fenced = append(fenced, ns)
			details = append(details, fmt.Sprintf("namespace %q is gone but %s saw its counter at %d", ns, f.Holder, f.Value))
		case err == nil && v < f.Value:
			fenced = append(fenced, ns)
			details = append(details, fmt.Sprintf("namespace %q counter %d is below %d seen by %s", ns, v, f.Value, f.Holder))
		case err == nil && count < local.Value:
			fenced = append(fenced, ns)
			details = append(details, copyReason(ns, strconv.FormatInt(count, 10), local))
		}
	}
	if len(fenced) == 0 {
		in.fence.Clear()
		return nil
	}
	if id, err := ident.Result(); errors.Is(err, goredis.Nil) || (err == nil && id == "") {
		// The counters went back together with the identity: the data was lost, not one namespace.
		return s.fenceLost(in, "its identity is gone: its data was wiped, or another Redis answers at its address")
	}
	return s.fence(in, fenced, details)
}

// fence records that the instance went back in time for the namespaces named (see failover.Set.Fence).
func (s *Store) fence(in *instance, namespaces, details []string) error {
	// The marks in kept of the others went back with it: they are written there again.
	for _, o := range s.set.All() {
		if o != in {
			o.marks.Unwrite(in.Name())
			o.local.Unwrite(in.Name())
		}
	}
	return s.set.Fence(in, &in.fence, namespaces, details, s.kickGuard)
}

// fenceLost fences an instance that lost its data (its identity), for every namespace this process
// knows of.
func (s *Store) fenceLost(in *instance, why string) error {
	names := map[string]bool{}
	for ns := range in.marks.Snapshot() {
		names[ns] = true
	}
	for _, r := range s.set.Known() {
		names[r.ns.Name] = true
	}
	list := make([]string, 0, len(names))
	for ns := range names {
		list = append(list, ns)
	}
	if len(list) == 0 {
		list = []string{"NAMESPACE"}
	}
	return s.fence(in, list, []string{"it lost its data: " + why})
}

// Repair advances a fenced instance's counter for a namespace past the highest water mark the peers (and
// this process) hold, plus a margin for leases issued after the last mark was written, then checks the
// instance again. An instance that lost its data gets a new identity for its configured offset first
// (every instance must answer), and the namespace is created on it above the mark. opts.Margin zero
// sizes the margin from the lease rates recorded with the marks (see failover.RepairMargin). An instance
// that is not fenced for the namespace is refused unless opts.Force. Run it only after checking why the
// instance went back — it makes the instance serve again.
func (s *Store) Repair(ctx context.Context, namespace, server string, opts allocator.RepairOptions) (allocator.RepairResult, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.RepairResult{}, err
	}
	if opts.Margin < 0 {
		return allocator.RepairResult{}, fmt.Errorf("%w: margin %d must not be negative", allocator.ErrInvalidSettings, opts.Margin)
	}
	var in *instance
	for _, c := range s.set.All() {
		if c.Name() == server {
			in = c
		}
	}
	if in == nil {
		return allocator.RepairResult{}, fmt.Errorf("no Redis instance named %q; the instances are %s", server, s.names())
	}
	if err := in.checkDurability(ctx); err != nil {
		return allocator.RepairResult{}, err
	}
	self, err := in.describe(ctx)
	if err != nil {
		return allocator.RepairResult{}, err
	}
	_, claimErr := in.claim(ctx) // reads the peers' marks into the floors; says whether the data was lost
	lost := self.identity["id"] == "" && errors.Is(claimErr, allocator.ErrFenced)
	if claimErr != nil && !lost && !errors.Is(claimErr, errUnproven) {
		return allocator.RepairResult{}, claimErr
	}
	s.readMarks(ctx)
	w := in.marks.Get(namespace)
	res := allocator.RepairResult{Server: in.Name(), Namespace: namespace, Watermark: w.Value, Holder: w.Holder}
	cur, err := in.client.Get(ctx, s.keys.counter(namespace)).Int64()
	missing := errors.Is(err, goredis.Nil)
	if err != nil && !missing {
		return res, fmt.Errorf("%s: %w", in.Name(), err)
	}
	switch {
	case lost:
		res.Fenced, res.Reason = true, "it lost its data: "+strings.TrimPrefix(claimErr.Error(), allocator.ErrFenced.Error()+": ")
	case missing && w.Value > 0:
		res.Fenced, res.Reason = true, fmt.Sprintf("namespace %q is gone but %s saw its counter at %d", namespace, w.Holder, w.Value)
	case !missing && cur < w.Value:
		res.Fenced, res.Reason = true, fmt.Sprintf("counter %d is below %d seen by %s", cur, w.Value, w.Holder)
	case !missing:
		local := in.local.Get(namespace)
		count, err := in.client.HGet(ctx, s.keys.local(), namespace).Int64()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return res, fmt.Errorf("%s: %w", in.Name(), err)
		}
		if count < local.Value {
			res.Fenced, res.Reason = true, copyReason(namespace, strconv.FormatInt(count, 10), local)
		}
	}
	if !missing {
		res.Before = cur
	}
	if !res.Fenced && !opts.Force {
		return res, fmt.Errorf("%w: %s is not fenced for namespace %q (its counter %d is at or above every water mark, the highest %d): there is nothing to repair. Check the instance name; to move the counter anyway, give --force",
			allocator.ErrMisconfigured, in.Name(), namespace, res.Before, res.Watermark)
	}
	// The instance's own settings size the margin; a namespace it lacks is created with the newest
	// settings the others, or this process, hold. (An instance restored while the others are down can
	// be repaired from its own.)
	latest, err := in.readRecord(ctx, namespace)
	if missing || err != nil {
		if latest, err = s.set.Latest(ctx, namespace); err != nil {
			return res, err
		}
	}
	if lost {
		if _, err := in.adopt(ctx); err != nil {
			return res, err
		}
	}
	res.Margin, res.MarginWhy = opts.Margin, "given"
	if opts.Margin == 0 {
		res.Margin, res.MarginWhy = failover.RepairMargin(s.peaks(ctx, in, namespace), s.cfg.WatermarkInterval, latest.ns.MaxBlockSize, s.cfg.Stride)
	}
	// The newest settings the instances hold: the margin stops at the higher of their ceiling and the
	// instance's own, and the repaired instance takes theirs (see failover.NoCeiling).
	start, maxID := latest.Namespace().Start, failover.NoCeiling // the highest start it was created or advanced with
	newest, newestErr := s.set.Latest(ctx, namespace)
	if newestErr == nil {
		start, maxID = max(start, newest.Namespace().Start), max(latest.ns.WithDefaults().MaxID, newest.ns.WithDefaults().MaxID)
	}
	base, from := failover.RepairBase(res.Watermark, res.Before, start)
	if from != "" {
		res.MarginWhy += "; " + from
	}
	target, clamped := failover.RepairTarget(base, res.Margin, s.cfg.Stride, in.offset, maxID)
	if clamped {
		res.MarginWhy += "; " + failover.ClampedMargin(in.Name(), maxID)
	}
	if missing {
		if _, err := in.create(ctx, latest, target); err != nil {
			return res, err
		}
	}
	if err := raiseCounterScript.Run(ctx, in.client, []string{s.keys.counter(namespace)}, strconv.FormatInt(target, 10)).Err(); err != nil {
		return res, fmt.Errorf("%s: %w", in.Name(), err)
	}
	if newestErr == nil {
		// The newest settings, the ceiling by its own time, also below the repaired counter (the
		// instance then has nothing to issue): no water mark to prove, no floor to raise.
		k := s.keys
		if err := updateScript.Run(ctx, in.client, []string{k.settings(namespace), k.counter(namespace)},
			newest.ns.BlockSize, newest.ns.MaxBlockSize, newest.ns.LeaseTTL.Milliseconds(), newest.updatedUS, 0, 0,
			newest.ns.WithDefaults().MaxID, newest.ceilingUS, 0, 0).Err(); err != nil {
			return res, fmt.Errorf("%s: %w", in.Name(), err)
		}
	}
	// The instance counts as many leases as were seen there again: the repaired counter is past them.
	if local := in.local.Get(namespace); local.Value > 0 {
		if err := raiseLocalScript.Run(ctx, in.client, []string{s.keys.local()}, namespace, strconv.FormatInt(local.Value, 10)).Err(); err != nil {
			return res, fmt.Errorf("%s: %w", in.Name(), err)
		}
	}
	if res.After, err = in.client.Get(ctx, s.keys.counter(namespace)).Int64(); err != nil {
		return res, fmt.Errorf("%s: %w", in.Name(), err)
	}
	res.Margin = res.After - base
	in.marks.Observe(namespace, failover.Mark{Value: res.After, Holder: "ticketd repair"})
	s.cfg.Logger.Warn("Redis instance repaired", "server", in.Name(), "namespace", namespace, "before", res.Before,
		"watermark", res.Watermark, "margin", res.Margin, "after", res.After, "why", res.MarginWhy)
	if !in.Usable() {
		if err := in.Revive(ctx); err != nil && !errors.Is(err, allocator.ErrFenced) {
			return res, err
		}
	}
	return res, nil
}

// peaks are the highest lease rates the peers recorded for the instance's namespace: of every process
// together, and of the fastest one.
func (s *Store) peaks(ctx context.Context, in *instance, namespace string) failover.Peaks {
	var peaks failover.Peaks
	fleet := map[int64]int64{}
	// each reads a hash of "offset:namespace" fields, and calls f with every offset's value for the
	// namespace.
	each := func(p *instance, key string, f func(offset, v int64)) {
		m, err := p.client.HGetAll(ctx, key).Result()
		if err != nil {
			return
		}
		for field, val := range m {
			off, ns, ok := strings.Cut(field, ":")
			if !ok || ns != namespace {
				continue
			}
			o, err1 := strconv.ParseInt(off, 10, 64)
			v, err2 := strconv.ParseInt(val, 10, 64)
			if err1 == nil && err2 == nil {
				f(o, v)
			}
		}
	}
	for _, p := range s.set.All() {
		if p == in {
			continue
		}
		each(p, s.keys.rates(), func(_, v int64) { peaks.Process = max(peaks.Process, v) })
		each(p, s.keys.fleet(), func(o, v int64) { fleet[o] = max(fleet[o], v) })
		each(p, s.keys.intervals(), func(_, v int64) { peaks.Interval = max(peaks.Interval, time.Duration(v)*time.Microsecond) })
	}
	peaks.Fleet = failover.ShiftedPeak(fleet, len(s.set.All()))
	return peaks
}

var _ allocator.Repairer = (*Store)(nil)
