package client

import (
	"fmt"
	"time"
)

// ledger is the blocks a Client holds: those with IDs not yet carved into runs, those whose expiry
// timer is armed, and the last ones received, against which a new block is checked. Guarded by
// Client.mu.
type ledger struct {
	leases   []*lease // blocks with IDs not yet carved, oldest first
	expiring []*lease // blocks with an expiry whose timer is armed
	uncarved int64
	recent   [maxInFlightLimit + 16]Block // the last blocks received, to refuse an overlapping one
	recentN  int
}

// add records a block that landed, to be served until useBy (zero: no expiry), and returns its lease;
// the caller arms the expiry timer of one that expires.
func (g *ledger) add(blk Block, useBy time.Time) *lease {
	g.recent[g.recentN%len(g.recent)] = blk
	g.recentN++
	l := &lease{blk: blk, useBy: useBy}
	g.leases = append(g.leases, l)
	g.uncarved += blk.Size
	if !useBy.IsZero() {
		g.expiring = append(g.expiring, l)
	}
	return l
}

// take carves up to n IDs from the front of l's uncarved part.
func (g *ledger) take(l *lease, n int64) (base, got int64) {
	got = min(n, l.blk.Size-l.carved)
	base = l.blk.Start + l.carved*l.blk.Step
	l.carved += got
	g.uncarved -= got
	return base, got
}

// front drops the used-up blocks at the front and returns the oldest with IDs left to carve, and
// whether it may still be served (its useBy not passed on clk). nil: none is left.
func (g *ledger) front(clk clock) (l *lease, usable bool) {
	for len(g.leases) > 0 {
		l := g.leases[0]
		if l.carved < l.blk.Size && (l.useBy.IsZero() || clk.Now().Before(l.useBy)) {
			return l, true
		}
		if l.carved < l.blk.Size {
			return l, false
		}
		g.leases[0] = nil
		g.leases = g.leases[1:]
	}
	return nil, false
}

// revoke stops serving l: it stops its timer, drops it, and returns how many of its IDs were never
// carved. It reports false when l was revoked already.
func (g *ledger) revoke(l *lease) (left int64, ok bool) {
	if l.revoked {
		return 0, false
	}
	l.revoked = true
	if l.stop != nil {
		l.stop()
	}
	if left = l.blk.Size - l.carved; left > 0 {
		g.uncarved -= left
		l.carved = l.blk.Size
	}
	for i, q := range g.leases {
		if q == l {
			g.leases = append(g.leases[:i:i], g.leases[i+1:]...)
			break
		}
	}
	for i, q := range g.expiring {
		if q == l {
			g.expiring = append(g.expiring[:i:i], g.expiring[i+1:]...)
			break
		}
	}
	return max(left, 0), true
}

// stopTimers stops the expiry timers, for Close.
func (g *ledger) stopTimers() {
	for _, l := range g.expiring {
		l.stop()
	}
	g.expiring = nil
}

// blocks is the number of blocks with IDs not yet carved.
func (g *ledger) blocks() int {
	n := 0
	for _, l := range g.leases {
		if l.carved < l.blk.Size {
			n++
		}
	}
	return n
}

// overlap refuses a block that shares IDs with one of the last blocks received.
func (g *ledger) overlap(blk Block) error {
	for i := range min(g.recentN, len(g.recent)) {
		if overlaps(g.recent[i], blk) {
			return fmt.Errorf("%w: %v and %v", ErrOverlap, g.recent[i], blk)
		}
	}
	return nil
}
