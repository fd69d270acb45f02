package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// fault is one entry of the schedule: applied at a share `at` of the run, reverted at `until`.
type fault struct {
	at, until float64
	name      string
	apply     func(ctx context.Context) error
	revert    func(ctx context.Context) error
}

// faults is the schedule. Each window overlaps no other, so every failure mode is seen on its own.
func (e *env) faults() []fault {
	p := e.proxies
	withToxics := func(specs ...func() error) func(context.Context) error {
		return func(context.Context) error {
			for _, s := range specs {
				if err := s(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	fs := []fault{
		{at: 0.08, until: 0.18, name: "200 ms latency between replica 1 and server a",
			apply: withToxics(
				func() error { return toxic(p[0][0], "lat-up", "latency", "upstream", `{"latency":200}`) },
				func() error { return toxic(p[0][0], "lat-down", "latency", "downstream", `{"latency":200}`) }),
			revert: func(context.Context) error {
				removeToxic(p[0][0], "lat-up")
				removeToxic(p[0][0], "lat-down")
				return nil
			}},
		{at: 0.20, until: 0.27, name: "replies lost after the UPDATE committed, replica 2 and server b",
			apply:  withToxics(func() error { return toxic(p[1][1], "lost", "timeout", "downstream", `{"timeout":1000}`) }),
			revert: func(context.Context) error { removeToxic(p[1][1], "lost"); return nil }},
		{at: 0.46, until: 0.54, name: "connection resets between replica 1 and server b",
			apply:  withToxics(func() error { return toxic(p[0][1], "reset", "reset_peer", "upstream", `{"timeout":0}`) }),
			revert: func(context.Context) error { removeToxic(p[0][1], "reset"); return nil }},
		{at: 0.58, until: 0.62, name: "ticketd replica 1 restarted",
			apply:  func(context.Context) error { e.stopReplica(0); return nil },
			revert: func(ctx context.Context) error { return e.startReplica(ctx, 0) }},
		{at: 0.66, until: 0.74, name: "timeouts between replica 1 and server a, latency between replica 2 and server a",
			apply: withToxics(
				func() error { return toxic(p[0][0], "hang", "timeout", "downstream", `{"timeout":0}`) },
				func() error { return toxic(p[1][0], "lat", "latency", "downstream", `{"latency":200}`) }),
			revert: func(context.Context) error { removeToxic(p[0][0], "hang"); removeToxic(p[1][0], "lat"); return nil }},
	}
	if e.canKill() {
		fs = append(fs,
			fault{at: 0.30, until: 0.42, name: "server a SIGKILLed, then restarted",
				apply: func(context.Context) error { return e.kill(0) }, revert: func(ctx context.Context) error { return e.start(ctx, 0) }},
			fault{at: 0.80, until: 0.90, name: "server b SIGKILLed, then restarted",
				apply: func(context.Context) error { return e.kill(1) }, revert: func(ctx context.Context) error { return e.start(ctx, 1) }},
		)
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].at < fs[j].at })
	return fs
}

// schedule applies and reverts the faults on time; it returns what it applied. When the run ends
// early, whatever is active is reverted.
func (e *env) schedule(ctx context.Context) []string {
	type event struct {
		at     time.Duration
		f      fault
		revert bool
	}
	var events []event
	for _, f := range e.faults() {
		events = append(events, event{at: time.Duration(f.at * float64(e.cfg.Duration)), f: f},
			event{at: time.Duration(f.until * float64(e.cfg.Duration)), f: f, revert: true})
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	start := time.Now()
	active := map[string]fault{}
	var applied []string
	for _, ev := range events {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(ev.at))):
		}
		if ctx.Err() != nil {
			break
		}
		if ev.revert {
			if _, on := active[ev.f.name]; !on {
				continue
			}
			if err := ev.f.revert(context.Background()); err != nil {
				e.log.Error("chaos: could not revert a fault", "fault", ev.f.name, "err", err)
			}
			delete(active, ev.f.name)
			e.log.Info("chaos: fault over", "fault", ev.f.name)
		} else {
			if err := ev.f.apply(ctx); err != nil {
				e.log.Error("chaos: could not apply a fault", "fault", ev.f.name, "err", err)
				continue
			}
			active[ev.f.name] = ev.f
			applied = append(applied, ev.f.name)
			e.log.Info("chaos: fault", "fault", ev.f.name)
		}
		e.degraded.Store(len(active) > 0)
	}
	for name, f := range active {
		if err := f.revert(context.Background()); err != nil {
			e.log.Error("chaos: could not revert a fault", "fault", name, "err", fmt.Sprint(err))
		}
	}
	e.degraded.Store(false)
	return applied
}
