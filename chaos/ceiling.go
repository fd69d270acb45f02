package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/ticketd/ticketd/allocator"
)

// CeilingNamespace is the second namespace the run draws from, with few clients: a small one, whose
// ceiling (max_id) a fault lowers while the faults run, and which is then drawn up to it.
const CeilingNamespace = "chaos-ceiling"

// The ceiling namespace's settings: created with an INT column's ceiling, small blocks.
const (
	ceilingMaxID        = math.MaxInt32
	ceilingBlockSize    = 20
	ceilingMaxBlockSize = 200
)

// ceilingSettings are the ceiling namespace's settings with the given max_id: an update sets them all.
func ceilingSettings(maxID int64) allocator.Namespace {
	return allocator.Namespace{Name: CeilingNamespace, BlockSize: ceilingBlockSize, MaxBlockSize: ceilingMaxBlockSize, MaxID: maxID}
}

// ceilingShare is the share of the run's rate that the ceiling namespace's clients draw; they are one
// for every ceilingClientsPer clients of the run's own namespace, at least one.
const (
	ceilingShare      = 0.02
	ceilingClientsPer = 16
)

// ceiling is a namespace's max_id, in force from since on. A ceiling is in force once the
// CreateNamespace or UpdateNamespace that set it returned success: a lease that began before that may
// still be bounded by the ceiling before. (The run only ever lowers a ceiling.)
type ceiling struct {
	maxID int64
	since time.Time
}

// ceilings are a namespace's ceilings in the order they came in force.
type ceilings []ceiling

// at is the ceiling in force at t: the last one in force at or before t (the first one before any).
func (cs ceilings) at(t time.Time) int64 {
	if len(cs) == 0 {
		return allocator.DefaultMaxID
	}
	m := cs[0].maxID
	for _, c := range cs[1:] {
		if c.since.After(t) {
			break
		}
		m = c.maxID
	}
	return m
}

// ceilingCheck is what the check of a namespace's blocks against its ceilings found.
type ceilingCheck struct {
	// above is how many IDs of the blocks lie above the ceiling in force when their lease began.
	above int64
	// after counts the blocks whose lease began once the last ceiling was in force, and highest is
	// their highest ID.
	after, highest int64
}

// check holds every block against the ceiling in force when its lease began.
func (cs ceilings) check(blocks []recorded) ceilingCheck {
	var c ceilingCheck
	for _, b := range blocks {
		if b.Size <= 0 {
			continue
		}
		c.above += b.Size - allocator.Fit(b.Start, b.Step, b.Size, cs.at(b.began))
		if len(cs) > 1 && !b.began.Before(cs[len(cs)-1].since) {
			c.after++
			c.highest = max(c.highest, lastOf(b.Block))
		}
	}
	return c
}

// lowered notes that the ceiling namespace's max_id is maxID from since on.
func (w *world) lowered(maxID int64, since time.Time) {
	w.mu.Lock()
	w.ceilings = append(w.ceilings, ceiling{maxID: maxID, since: since})
	w.mu.Unlock()
}

// ceilingRoom is how far above the highest ID issued a lowering puts the ceiling, in blocks of the
// largest size, of each server's step: a moment of the clients' draws, then the ceiling is reached.
const ceilingRoom = 4

// ceilingLowered lowers the ceiling namespace's max_id from an admin process of its own, as `ticketd
// namespace update --max-id` run beside the replicas would: first while the admin's way to server b
// is cut (through proxies of its own), which must be refused as unavailable, naming b, and change
// nothing — a process started afterwards still reads the ceiling before — then from a new admin
// process that reaches every server, which must succeed. The revert draws the namespace up to its
// ceiling through replica 1, beside its clients: every server is then exhausted, and every block
// leased after the lowering is held to it.
func (w *world) ceilingLowered() fault {
	const cut = 1
	name := fmt.Sprintf("max_id of %s lowered by an admin process cut off from server %s, then by one that reaches every server; the namespace drawn up to its ceiling",
		CeilingNamespace, label(cut))
	return fault{name: name, expect: ExpectCeiling,
		apply: func(ctx context.Context, res *FaultResult) error {
			admin, breakWay, closeAdmin, err := w.openAdmin(ctx, true)
			if err != nil {
				return err
			}
			defer closeAdmin()
			ns, err := admin.Namespace(ctx, CeilingNamespace)
			if err != nil {
				return err
			}
			before := ns.WithDefaults().MaxID
			target := w.ceilingTarget(ns)
			breakWay(cut)
			_, err = admin.UpdateNamespace(ctx, ceilingSettings(target))
			// Refused as unavailable, naming the server: the operator knows what to bring back.
			refused := errors.Is(err, allocator.ErrUnavailable) && strings.Contains(err.Error(), admin.Servers()[cut])
			switch {
			case err == nil:
				w.lowered(target, time.Now()) // in force, wrongly: the clients are held to it
				res.Detail = fmt.Sprintf("lowering to %d with server %s cut off: accepted", target, label(cut))
			case refused:
				res.Detail = fmt.Sprintf("lowering to %d with server %s cut off: refused (%v)", target, label(cut), err)
			default:
				res.Detail = fmt.Sprintf("lowering to %d with server %s cut off: failed, but not as unavailable naming it (%v)", target, label(cut), err)
			}
			closeAdmin()

			// A process started now reads the ceiling as it was, then lowers it with every server in
			// reach. Clients may lease past a target between its read and the change (refused, as it
			// must be): the change is made again above what they took, as an operator would.
			fresh, _, closeFresh, err := w.openAdmin(ctx, false)
			if err != nil {
				return err
			}
			defer closeFresh()
			now, err := fresh.Namespace(ctx, CeilingNamespace)
			if err != nil {
				return err
			}
			unchanged := now.WithDefaults().MaxID == before
			res.FencedOrRefused = refused && unchanged
			res.Detail += fmt.Sprintf("; a process started afterwards reads max_id %d (before: %d)", now.WithDefaults().MaxID, before)
			var tries []string
			var last error
			ok := waitUntil(healthyWithin, func() bool {
				ns, last = fresh.Namespace(ctx, CeilingNamespace)
				if last != nil {
					return false
				}
				target = w.ceilingTarget(ns)
				if _, last = fresh.UpdateNamespace(ctx, ceilingSettings(target)); last == nil {
					w.lowered(target, time.Now())
					return true
				}
				tries = append(tries, last.Error())
				return !errors.Is(last, allocator.ErrUnavailable) && !errors.Is(last, allocator.ErrInvalidSettings) &&
					!errors.Is(last, context.DeadlineExceeded)
			})
			if !ok || last != nil {
				return fmt.Errorf("lowering max_id with every server in reach: %w (tries: %s)", last, strings.Join(tries, "; "))
			}
			res.Detail += fmt.Sprintf("; lowered to %d with every server in reach", target)
			if len(tries) > 0 {
				res.Detail += fmt.Sprintf(" after %d refused tries (%s)", len(tries), strings.Join(tries, "; "))
			}
			return nil
		},
		revert: func(ctx context.Context, res *FaultResult) error {
			n, err := w.drawUp(ctx)
			if err != nil {
				return err
			}
			res.Detail += fmt.Sprintf("; %d more blocks leased through replica 1 until every server was exhausted", n)
			return nil
		}}
}

// ceilingTarget is a ceiling ceilingRoom blocks above the highest ID the namespace's servers issued.
func (w *world) ceilingTarget(ns allocator.Namespace) int64 {
	return ns.HighestIssued() + ceilingRoom*ceilingMaxBlockSize*w.layout.step
}

// drawUp leases from the ceiling namespace through replica 1 until every server is exhausted, and
// returns how many blocks it leased.
func (w *world) drawUp(ctx context.Context) (int, error) {
	rep := w.replica(0)
	if rep == nil {
		return 0, errors.New("replica 1 is not running")
	}
	b := w.rec.wrap(rep.backend)
	n := 0
	var last error
	if waitUntil(healthyWithin, func() bool {
		for {
			_, last = b.Lease(ctx, CeilingNamespace, ceilingMaxBlockSize)
			if last != nil {
				return errors.Is(last, allocator.ErrExhausted) && !errors.Is(last, allocator.ErrUnavailable)
			}
			n++
		}
	}) {
		return n, nil
	}
	return n, fmt.Errorf("the ceiling was not reached within %s: %v", healthyWithin, last)
}

// openAdmin opens the backend as an admin process of its own. proxied, it reaches each server through a
// proxy of its own, and breakWay(i) breaks its way to server i (its connections there fail, and new
// ones); else it reaches the servers directly. done closes the process and its proxies; it may be
// called twice.
func (w *world) openAdmin(ctx context.Context, proxied bool) (b leaser, breakWay func(i int), done func(), err error) {
	addrs := w.servers.addrs()
	var proxies []*toxiproxy.Proxy
	ends := make([]endpoint, len(addrs))
	for i, addr := range addrs {
		ends[i] = endpoint{index: i, addr: addr}
		if proxied {
			p := toxiproxy.NewProxy(w.toxi, fmt.Sprintf("%s-admin-%s", w.backend, label(i)), "127.0.0.1:0", addr)
			if err := p.Start(); err != nil {
				for _, q := range proxies {
					q.Stop()
				}
				return nil, nil, nil, fmt.Errorf("chaos: the admin's proxy to %s: %w", addr, err)
			}
			proxies = append(proxies, p)
			ends[i].addr = p.Listen
		}
	}
	stopProxies := func() {
		for _, p := range proxies {
			p.Stop()
		}
	}
	b, err = w.servers.open(ctx, ends, nil, w.log.With("process", "admin"))
	if err != nil {
		stopProxies()
		return nil, nil, nil, fmt.Errorf("chaos: admin process: %w", err)
	}
	closed := false
	done = func() {
		if !closed {
			closed = true
			b.Close()
			stopProxies()
		}
	}
	breakWay = func(i int) {
		if i < len(proxies) {
			proxies[i].Stop()
		}
	}
	return b, breakWay, done, nil
}
