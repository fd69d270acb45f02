package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/ticketd/ticketd/allocator"
)

// fault is one entry of the schedule: applied at a share `at` of the run, reverted at `until`. apply
// and revert may note what they saw in the fault's result; revert may be nil.
type fault struct {
	at, until float64
	name      string
	expect    string // see FaultResult.Expect
	outage    bool   // see FaultResult.Outage
	apply     func(ctx context.Context, res *FaultResult) error
	revert    func(ctx context.Context, res *FaultResult) error
}

// The schedule's windows, as shares of the run. No two overlap, so every failure mode is seen on its
// own, and a fault that takes a server back in time is repaired before the next one begins.
var (
	slotDump        = [2]float64{0.02, 0.03}
	slotLatency     = [2]float64{0.04, 0.09}
	slotLostReplies = [2]float64{0.10, 0.14}
	slotKillA       = [2]float64{0.15, 0.22}
	slotRestoreLive = [2]float64{0.23, 0.28}
	slotResets      = [2]float64{0.29, 0.33}
	slotColdCopy    = [2]float64{0.34, 0.38}
	slotReplica     = [2]float64{0.39, 0.42}
	slotSettings    = [2]float64{0.43, 0.49}
	slotTimeouts    = [2]float64{0.50, 0.55}
	slotStart       = [2]float64{0.56, 0.63}
	slotRestoreCold = [2]float64{0.64, 0.70}
	slotKillB       = [2]float64{0.72, 0.80}
	slotCeiling     = [2]float64{0.81, 0.85}
	slotPromote     = [2]float64{0.86, 0.97}
)

func at(slot [2]float64, f fault) fault {
	f.at, f.until = slot[0], slot[1]
	return f
}

// faults is the schedule: the faults every backend gets, and the backend's own.
func (w *world) faults() []fault {
	p := w.proxies
	withToxics := func(specs ...func() error) func(context.Context, *FaultResult) error {
		return func(context.Context, *FaultResult) error {
			for _, s := range specs {
				if err := s(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	fs := []fault{
		at(slotLatency, fault{name: "200 ms latency between replica 1 and server a",
			apply: withToxics(
				func() error { return toxic(p[0][0], "lat-up", "latency", "upstream", `{"latency":200}`) },
				func() error { return toxic(p[0][0], "lat-down", "latency", "downstream", `{"latency":200}`) }),
			revert: func(context.Context, *FaultResult) error {
				removeToxic(p[0][0], "lat-up")
				removeToxic(p[0][0], "lat-down")
				return nil
			}}),
		at(slotLostReplies, fault{name: "replies lost after the lease committed, replica 2 and server b",
			apply:  withToxics(func() error { return toxic(p[1][1], "lost", "timeout", "downstream", `{"timeout":1000}`) }),
			revert: func(context.Context, *FaultResult) error { removeToxic(p[1][1], "lost"); return nil }}),
		at(slotResets, fault{name: "connection resets between replica 1 and server b",
			apply:  withToxics(func() error { return toxic(p[0][1], "reset", "reset_peer", "upstream", `{"timeout":0}`) }),
			revert: func(context.Context, *FaultResult) error { removeToxic(p[0][1], "reset"); return nil }}),
		at(slotReplica, fault{name: "ticketd replica 1 restarted",
			apply:  func(context.Context, *FaultResult) error { w.stopReplica(0); return nil },
			revert: func(ctx context.Context, _ *FaultResult) error { return w.startReplica(ctx, 0, w.layout.indexes()) }}),
		at(slotTimeouts, fault{name: "timeouts between replica 1 and server a, latency between replica 2 and server a",
			apply: withToxics(
				func() error { return toxic(p[0][0], "hang", "timeout", "downstream", `{"timeout":0}`) },
				func() error { return toxic(p[1][0], "lat", "latency", "downstream", `{"latency":200}`) }),
			revert: func(context.Context, *FaultResult) error {
				removeToxic(p[0][0], "hang")
				removeToxic(p[1][0], "lat")
				return nil
			}}),
	}
	if w.servers.canKill() {
		kill := func(i int) fault {
			return fault{name: fmt.Sprintf("server %s SIGKILLed, then restarted", label(i)),
				apply:  func(context.Context, *FaultResult) error { return w.servers.kill(i) },
				revert: func(ctx context.Context, _ *FaultResult) error { return w.servers.restart(ctx, i) }}
		}
		fs = append(fs, at(slotKillA, kill(0)), at(slotKillB, kill(1)), at(slotStart, w.startAdvance(1)))
	}
	// A Galera cluster's own steps (an eviction, a state transfer) hold its schedule up long enough
	// that a fault this late would not be reached: its schedule is kept as it was.
	if w.backend != BackendGalera {
		fs = append(fs, at(slotCeiling, w.ceilingLowered()))
	}
	fs = append(fs, w.servers.faults(w)...)
	sort.Slice(fs, func(i, j int) bool { return fs[i].at < fs[j].at })
	return fs
}

// schedule applies and reverts the faults on time, and returns what came of each. When the run ends
// early, whatever is active is reverted; what was not reached is reported not applied.
func (w *world) schedule(ctx context.Context) []FaultResult {
	type event struct {
		at     time.Duration
		i      int
		revert bool
	}
	fs := w.faults()
	results := make([]FaultResult, len(fs))
	var events []event
	for i, f := range fs {
		results[i] = FaultResult{Backend: w.backend, Name: f.name, Expect: f.expect, Outage: f.outage}
		events = append(events, event{at: time.Duration(f.at * float64(w.cfg.Duration)), i: i},
			event{at: time.Duration(f.until * float64(w.cfg.Duration)), i: i, revert: true})
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	start := time.Now()
	active := map[int]bool{}
	revert := func(i int) {
		res := &results[i]
		if fs[i].revert != nil {
			if err := fs[i].revert(context.Background(), res); err != nil {
				res.Error = joinErr(res.Error, "revert: "+err.Error())
				w.log.Error("chaos: could not revert a fault", "fault", fs[i].name, "err", err)
			}
		}
		delete(active, i)
		// The next fault begins with both servers in rotation everywhere, so that each is seen on its own.
		var back []error
		for _, j := range w.layout.indexes() {
			back = append(back, w.backInRotation(j))
		}
		if err := errors.Join(back...); err != nil {
			res.Error = joinErr(res.Error, "revert: "+err.Error())
		}
		w.lastOver.Store(&faultEnd{name: fs[i].name, at: time.Now()})
		w.log.Info("chaos: fault over", "fault", fs[i].name, "fenced_or_refused", res.FencedOrRefused, "detail", res.Detail)
	}
	for _, ev := range events {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(ev.at))):
		}
		if ctx.Err() != nil {
			break
		}
		res := &results[ev.i]
		if ev.revert {
			if active[ev.i] {
				revert(ev.i)
			}
		} else {
			w.degraded.Store(true) // calls made while the fault is being applied meet it too
			w.stage.Store(&fs[ev.i].name)
			active[ev.i] = true
			if err := fs[ev.i].apply(ctx, res); err != nil {
				res.Error = "apply: " + err.Error()
				w.log.Error("chaos: could not apply a fault", "fault", fs[ev.i].name, "err", err)
				revert(ev.i) // what was done of it is undone
			} else {
				res.Applied = true
				w.log.Info("chaos: fault", "fault", fs[ev.i].name)
			}
		}
		w.degraded.Store(len(active) > 0)
		if len(active) == 0 {
			w.stage.Store(nil)
		}
	}
	for i := range active {
		revert(i)
	}
	w.degraded.Store(false)
	w.stage.Store(nil)
	for i := range results {
		if !results[i].Applied && results[i].Error == "" {
			results[i].Detail = "not reached: the run ended first"
		}
	}
	return results
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// toxic adds a toxic to a proxy; remove takes it away.
func toxic(p *toxiproxy.Proxy, name, typ, stream string, attrs string) error {
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	_, err := p.Toxics.AddToxicJson(strings.NewReader(js))
	return err
}

func removeToxic(p *toxiproxy.Proxy, name string) {
	_ = p.Toxics.RemoveToxic(context.Background(), name)
}

// startAdvanceBy is how far above every counter a start advance moves the namespace's start.
const startAdvanceBy = 1_000_000_000_000

// advance is a namespace's start advanced while a server was down: every lease that began in epoch or
// later must start at or above start, and returned is the server that was down.
type advance struct {
	fault    string
	epoch    int64
	start    int64
	returned int
}

// startAdvance kills server i, advances the namespace's start well above every counter through replica
// 1's backend (replica 2 learns of it from the servers), and starts server i again.
func (w *world) startAdvance(i int) fault {
	name := fmt.Sprintf("namespace start advanced while server %s was down", label(i))
	return fault{name: name, expect: ExpectStart,
		apply: func(ctx context.Context, res *FaultResult) error {
			if err := w.servers.kill(i); err != nil {
				return err
			}
			rep := w.replica(0)
			if rep == nil {
				return errors.New("replica 1 is not running")
			}
			// The other server may be out of rotation for a moment in replica 1 (a connection the
			// previous fault broke, found by a lease), and then nothing answers: the change is made
			// again, as an operator would, until healthyWithin has passed.
			var ns allocator.Namespace
			var err error
			waitUntil(healthyWithin, func() bool {
				ns, err = w.advanceStart(ctx, rep.backend)
				return err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, allocator.ErrUnavailable)
			})
			if err != nil {
				return err
			}
			epoch := w.rec.epoch.Add(1)
			w.mu.Lock()
			w.advances = append(w.advances, advance{fault: name, epoch: epoch, start: ns.Start, returned: i})
			for _, j := range w.layout.indexes() {
				w.resets[j] = append(w.resets[j], w.layout.firstOf(j, ns.Start))
			}
			w.mu.Unlock()
			res.Detail = fmt.Sprintf("start advanced to %d, %d above the highest counter", ns.Start, int64(startAdvanceBy))
			return nil
		},
		revert: func(ctx context.Context, _ *FaultResult) error {
			if err := w.servers.restart(ctx, i); err != nil {
				return err
			}
			return w.exercise(ctx, i)
		}}
}

// advanceStart moves the namespace's start startAdvanceBy above every counter and every ID drawn, and
// returns the namespace as changed.
func (w *world) advanceStart(ctx context.Context, b allocator.Backend) (allocator.Namespace, error) {
	ns, err := b.Namespace(ctx, Namespace)
	if err != nil {
		return ns, err
	}
	high := w.rec.highest()
	for _, s := range ns.Servers {
		high = max(high, s.Next)
	}
	ns.Start, ns.Servers = high+startAdvanceBy, nil
	_, err = b.UpdateNamespace(ctx, ns)
	return ns, err
}

// exercise leases through replica 1, preferring server i, until a block comes from i: a fault whose
// check needs the returned server to lease gets that lease, however few the clients' own are.
func (w *world) exercise(ctx context.Context, i int) error { return w.exerciseVia(ctx, 0, i) }

// exerciseVia is exercise through replica r.
func (w *world) exerciseVia(ctx context.Context, r, i int) error {
	rep := w.replica(r)
	if rep == nil {
		return fmt.Errorf("replica %d is not running", r+1)
	}
	var name string
	for _, n := range rep.backend.Servers() { // the name replica r gives server i (Redis: its proxy's address)
		if j, ok := w.indexOf(n); ok && j == i {
			name = n
		}
	}
	b := w.rec.wrap(rep.backend)
	var last error
	if waitUntil(healthyWithin, func() bool {
		blk, err := b.LeaseFrom(ctx, Namespace, 0, name)
		last = err
		return err == nil && blk.Server == name
	}) {
		return nil
	}
	return fmt.Errorf("server %s leased nothing through replica %d within %s: %v", label(i), r+1, healthyWithin, last)
}

// issuedPast has server i lease through both replicas, before it is put back in time: each replica
// then has leased past what the copy holds, and must fence it on its own. At a low rate the clients'
// leases alone may all go elsewhere between a copy and its restore, and then the server went back
// over nothing it issued: nothing to fence. (A server put back over leases that only another process
// made, within the last water-mark interval, is beyond what the guard can see.)
func (w *world) issuedPast(ctx context.Context, i int) error {
	for r := range 2 {
		if err := w.exerciseVia(ctx, r, i); err != nil {
			return err
		}
	}
	return nil
}

// checkFrom has the blocks server i issues from now on counted for the fault named (its Checked): a
// fault whose server must serve again shows that it did.
func (w *world) checkFrom(fault string, i int) {
	epoch := w.rec.epoch.Add(1)
	w.mu.Lock()
	w.advances = append(w.advances, advance{fault: fault, epoch: epoch, returned: i})
	w.mu.Unlock()
}

// repairFenced waits until every running replica has fenced server i, then repairs it through one of
// them (not forced: a server that is not fenced is refused). It notes in res what it saw and what the
// repair did.
func (w *world) repairFenced(ctx context.Context, i int, res *FaultResult) error {
	fenced := func(h allocator.ServerHealth) bool { return h.Fenced }
	res.FencedOrRefused = waitUntil(fencedWithin, func() bool { return w.everywhere(i, fenced) })
	var seen []string
	var repairer allocator.Repairer
	var name, why string
	for r, rep := range w.running() {
		h, _ := w.health(r, i)
		if !h.Fenced {
			seen = append(seen, fmt.Sprintf("replica %d: not fenced (%s)", r+1, healthText(h)))
			continue
		}
		seen = append(seen, fmt.Sprintf("replica %d: fenced", r+1))
		if rp, ok := rep.backend.(allocator.Repairer); ok && repairer == nil {
			repairer, name, why = rp, h.Name, h.Error
		}
	}
	sort.Strings(seen)
	res.Detail = fmt.Sprintf("server %s: %s", label(i), strings.Join(seen, ", "))
	if why != "" {
		res.Detail += "; why: " + why
	}
	if repairer == nil {
		if !res.FencedOrRefused {
			return fmt.Errorf("server %s was not fenced within %s, so there is nothing to repair", label(i), fencedWithin)
		}
		return fmt.Errorf("the %s backend cannot repair a server", w.backend)
	}
	// Every namespace of the run is repaired, as an operator repairs each the server is fenced for; the
	// ceiling namespace may have stayed at or above its marks (nothing leased from it since), and then
	// the server is not fenced for it: that repair is refused, and skipped.
	for _, ns := range []string{Namespace, CeilingNamespace} {
		// A repair that times out (a busy machine, a server still starting) is run again, as an operator
		// would, until healthyWithin has passed: a server left fenced would be out for the rest of the run.
		var rr allocator.RepairResult
		var err error
		waitUntil(healthyWithin, func() bool {
			rr, err = repairer.Repair(ctx, ns, name, allocator.RepairOptions{})
			return err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, allocator.ErrUnavailable)
		})
		switch {
		case ns != Namespace && errors.Is(err, allocator.ErrMisconfigured) && !rr.Fenced:
			res.Detail += fmt.Sprintf("; %s: not fenced, not repaired (counter %d, water mark %d)", ns, rr.Before, rr.Watermark)
			continue
		case err != nil:
			return fmt.Errorf("repair of server %s, namespace %s: %w", label(i), ns, err)
		}
		if ns == Namespace {
			w.mu.Lock()
			w.resets[i] = append(w.resets[i], rr.After)
			w.mu.Unlock()
		}
		res.Detail += fmt.Sprintf("; %s repaired: counter %d → %d (water mark %d by %s, margin %d)", ns, rr.Before, rr.After, rr.Watermark, rr.Holder, rr.Margin)
	}
	return nil
}

func healthText(h allocator.ServerHealth) string {
	switch {
	case h.Name == "":
		return "no health reported"
	case h.Healthy:
		return "in rotation"
	}
	return h.Error
}
