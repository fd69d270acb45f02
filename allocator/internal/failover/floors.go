package failover

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// Mark is the highest counter seen on a server for one namespace, who saw it, and which server it was:
// the identity the server answered with when its counter was seen there (empty when the one who saw it
// did not record it). A server that answers with another identity now is another server in its place.
type Mark struct {
	Value    int64
	Holder   string
	Identity string
}

// ThisProcess is the holder of the marks a process took from its own leases.
const ThisProcess = "this ticketd process"

// Floors are what one process knows of one server's counters: per namespace, the highest counter seen
// there by this process or read in a peer's water marks. A lease requires the server's counter to be
// at or above its floor (a counter below it went back in time: a restored backup, lost data), and the
// process writes its floors into the peers as their water marks. Floors also count what this process
// leased there, for the peers to size a repair's margin from. A floor is never dropped. Safe for
// concurrent use; the zero value is ready.
type Floors struct {
	mu   sync.Mutex
	high map[string]floor
	// names holds the holders and identities of the marks, each once (see floor): a few are shared by
	// every namespace (this process, each peer, each server's identity). names[0] is "".
	names []string
	index map[string]uint32
	// leasedSince counts, per namespace, the counter units leased here since the pace was last taken.
	leasedSince map[string]int64
	paceAt      time.Time
	// The value last written into a peer's water marks: for the first peer written to (firstPeer, the
	// only one of a pair), in the floor itself; for any other, in written[peer][ns].
	firstPeer string
	written   map[string]map[string]int64
}

// floor is one namespace's Mark, its holder and identity as indexes into Floors.names, and the value
// last written into the first peer's water marks: 24 bytes, where a Mark and a map of what was
// written, for each namespace, took 40 and another entry.
type floor struct {
	value, written   int64
	holder, identity uint32
}

// mark is the Mark of a floor. f.mu must be held.
func (f *Floors) mark(e floor) Mark {
	return Mark{Value: e.value, Holder: f.names[e.holder], Identity: f.names[e.identity]}
}

// intern returns the index of s in f.names, adding it when it is new. f.mu must be held.
func (f *Floors) intern(s string) uint32 {
	if f.names == nil {
		f.names, f.index = []string{""}, map[string]uint32{"": 0}
	}
	if i, ok := f.index[s]; ok {
		return i
	}
	i := uint32(len(f.names))
	f.names = append(f.names, s)
	f.index[s] = i
	return i
}

// Observe raises a namespace's floor to m. A mark no higher than the floor leaves it, but gives an
// identity to a floor that had none.
func (f *Floors) Observe(ns string, m Mark) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observeLocked(ns, m)
}

func (f *Floors) observeLocked(ns string, m Mark) {
	if f.high == nil {
		f.high = map[string]floor{}
	}
	cur, ok := f.high[ns]
	switch {
	case !ok || m.Value > cur.value:
		cur.value, cur.holder, cur.identity = m.Value, f.intern(m.Holder), f.intern(m.Identity)
		f.high[ns] = cur
	case m.Value == cur.value && cur.identity == 0 && m.Identity != "":
		cur.identity = f.intern(m.Identity)
		f.high[ns] = cur
	}
}

// Leased notes a lease by this process that took the counter to end, span counter units above where
// it started, on the server that answered with identity.
func (f *Floors) Leased(ns string, end, span int64, identity string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observeLocked(ns, Mark{Value: end, Holder: ThisProcess, Identity: identity})
	if f.leasedSince == nil {
		f.leasedSince = map[string]int64{}
	}
	f.leasedSince[ns] += span
}

// Get returns a namespace's floor; the zero Mark when nothing was seen.
func (f *Floors) Get(ns string) Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.high[ns]
	if !ok {
		return Mark{}
	}
	return f.mark(e)
}

// Snapshot returns every namespace's floor.
func (f *Floors) Snapshot() map[string]Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Mark, len(f.high))
	for ns, e := range f.high {
		out[ns] = f.mark(e)
	}
	return out
}

// Pace is what one process leased of one namespace on one server since its pace was last taken: the
// counter units (Span), and how many a second that was.
type Pace struct {
	Span      int64
	PerSecond int64
}

// TakePace returns, per namespace leased from since the last call, what this process leased there
// (PerSecond is zero at the first call, which has no interval to divide by).
func (f *Floors) TakePace(now time.Time) map[string]Pace {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Pace, len(f.leasedSince))
	elapsed := now.Sub(f.paceAt).Seconds()
	for ns, n := range f.leasedSince {
		p := Pace{Span: n}
		if !f.paceAt.IsZero() && elapsed > 0 {
			p.PerSecond = int64(float64(n) / elapsed)
		}
		out[ns] = p
	}
	f.leasedSince, f.paceAt = nil, now
	return out
}

// Pending returns the floors the named peer has not received yet.
func (f *Floors) Pending(peer string) map[string]Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]Mark{}
	for ns, e := range f.high {
		if f.writtenLocked(peer, ns, e) < e.value {
			out[ns] = f.mark(e)
		}
	}
	return out
}

// writtenLocked is the value last written into the named peer's water mark of ns, whose floor is e.
// f.mu must be held.
func (f *Floors) writtenLocked(peer, ns string, e floor) int64 {
	w := f.written[peer][ns]
	if peer == f.firstPeer {
		w = max(w, e.written)
	}
	return w
}

// Unwrite forgets what the named peer was given: it went back in time (restored, lost its data,
// replaced), and the marks it held are to be written there again.
func (f *Floors) Unwrite(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.written, peer)
	if peer != f.firstPeer {
		return
	}
	for ns, e := range f.high {
		if e.written != 0 {
			e.written = 0
			f.high[ns] = e
		}
	}
}

// Wrote notes that the named peer now holds v as the namespace's water mark.
func (f *Floors) Wrote(peer, ns string, v int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.firstPeer == "" {
		f.firstPeer = peer
	}
	if e, ok := f.high[ns]; ok && peer == f.firstPeer {
		e.written = max(e.written, v)
		f.high[ns] = e
		return
	}
	if f.written == nil {
		f.written = map[string]map[string]int64{}
	}
	if f.written[peer] == nil {
		f.written[peer] = map[string]int64{}
	}
	f.written[peer][ns] = max(f.written[peer][ns], v)
}

// RepairMarginIntervals is how many water-mark intervals of leases a default repair margin covers: the
// interval whose leases no mark holds yet, one more for a writer that was late, and one to spare.
const RepairMarginIntervals = 3

// Peaks are the highest lease rates the peers recorded for a server and a namespace, in counter units
// a second: Fleet, of every process together (measured by the peers from what each process reported
// it leased), and Process, of the fastest single process; and Interval, the longest water-mark interval
// of the processes that reported them (0 when none said).
type Peaks struct {
	Fleet, Process int64
	Interval       time.Duration
}

// ShiftedPeak is the fleet's rate a repair's margin assumes for one server: what every process leased
// from every server together, each server at the highest rate its peers recorded for it (fleet, by
// offset), and one whose rates are lost (kept on the server that lost its data) at the highest of the
// others; servers is how many there are. When a server's peers are cut off from the fleet, that
// server takes the whole of it, at once, and the marks of what it issued then reach no peer.
func ShiftedPeak(fleet map[int64]int64, servers int) int64 {
	var sum, top int64
	for _, r := range fleet {
		sum += r
		top = max(top, r)
	}
	if missing := servers - len(fleet); missing > 0 {
		sum += int64(missing) * top
	}
	return sum
}

// RepairMargin sizes a repair's margin from what can have been leased since the last water mark was
// written: RepairMarginIntervals water-mark intervals (the longer of interval and the one recorded with
// the peaks) at the highest rate recorded with the marks (the fleet's, or one process's when that is
// higher, as with marks of processes that predate the fleet's), and never less than ten of the
// namespace's largest blocks at the server's step. It says how it chose.
func RepairMargin(p Peaks, interval time.Duration, maxBlock, step int64) (int64, string) {
	window := time.Duration(RepairMarginIntervals) * max(interval, p.Interval)
	rate, whose := p.Fleet, "every process together"
	if p.Process > p.Fleet {
		rate, whose = p.Process, "one process"
	}
	byRate := int64(float64(rate) * window.Seconds())
	measured := fmt.Sprintf("the highest lease rate recorded with the marks, %d per second by %s (the fastest single process: %d per second)", rate, whose, p.Process)
	byBlocks := 10 * maxBlock * step
	if byRate > byBlocks {
		return byRate, fmt.Sprintf("%d water-mark intervals (%s) at %s", RepairMarginIntervals, window, measured)
	}
	return byBlocks, fmt.Sprintf("ten blocks of max_block_size %d at step %d (more than %d water-mark intervals, %s, at %s)",
		maxBlock, step, RepairMarginIntervals, window, measured)
}

// RepairTarget is the counter a repair moves a server (of step and offset) to: the first value at or
// above base plus margin, but no further than just past maxID, the namespace's ceiling (and above
// base). clamped says that the margin reached the ceiling: the server then has nothing left to issue
// safely, since any ID below the ceiling may have been issued after the last water mark.
func RepairTarget(base, margin, step, offset, maxID int64) (target int64, clamped bool) {
	top := min(maxID, math.MaxInt64-step) // the highest ID a lease may end at: the counter stays an int64
	if base > top || margin > top-base {
		past, _ := FirstAtLeast(top+1, step, offset) // top+1+step-1 ≤ MaxInt64
		// Above base all the same: a repair's mark must pass the marks it answers (one taken on the
		// server this one replaced, say), and past the ceiling a step more costs nothing.
		if above, ok := FirstAtLeast(base+1, step, offset); ok && base < math.MaxInt64 {
			past = max(past, above)
		}
		return max(past, base), true
	}
	target, _ = FirstAtLeast(base+margin, step, offset)
	if target > top {
		return target, true
	}
	return target, false
}

// RepairBase is the counter a repair's margin is added to: the highest of the water mark, the
// server's counter before the repair, and the namespace's start. Every server may have issued IDs from
// the start up since an advance of it returned, and the advance moved the counters without a water
// mark. from says when the start is the highest, for the repair's report.
func RepairBase(mark, before, start int64) (base int64, from string) {
	base = max(mark, before)
	if start > base {
		return start, fmt.Sprintf("counted from the namespace's start %d, above the water mark and the counter", start)
	}
	return base, ""
}

// NoCeiling is the ceiling a repair's margin stops at when the newest settings cannot be read.
//
// Otherwise it stops at the higher of the repaired server's own ceiling and the newest the servers
// hold: a server restored from a copy older than a raise of max_id holds a lower one than it may have
// issued up to since; past a higher one, a step more costs nothing but IDs above the ceiling. The
// repaired server then takes the newest ceiling by its time: one restored from a copy older than a
// lowering would otherwise serve up to its old, higher ceiling to a process that has not read the
// settings since.
const NoCeiling int64 = math.MaxInt64

// ClampedMargin says why a repair stopped at the ceiling maxID.
func ClampedMargin(server string, maxID int64) string {
	return fmt.Sprintf("clamped at max_id %d: %s has nothing left to issue safely for this namespace (any ID it holds below max_id may have been issued after the last water mark); the other servers issue what remains", maxID, server)
}

// FenceReason is the error text of a fenced server: what went back, and the command that repairs it.
func FenceReason(server string, namespaces, details []string) string {
	return fmt.Sprintf("%s went back in time or was replaced, as after a restore from an old backup, a lost disk or a replica promoted in its place (%s); it serves nothing until an operator checks it and runs: ticketd repair %s --server %s",
		server, strings.Join(details, "; "), namespaces[0], server)
}

// IdentityChanged says that a mark was taken on another server than the one that answers now.
func IdentityChanged(ns string, m Mark, now string) string {
	return fmt.Sprintf("namespace %q: %s saw its counter at %d on %s, but it answers as %s now: another server took its place",
		ns, m.Holder, m.Value, m.Identity, now)
}

// Replaced reports whether a server that answers with identity now is not the one the mark m was
// taken on.
func (m Mark) Replaced(identity string) bool {
	return m.Identity != "" && identity != "" && m.Identity != identity
}
