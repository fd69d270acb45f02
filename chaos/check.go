package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// stalls sets f's longest stalls from the clients' longest calls: the longest over every call that did
// not begin during an outage, with the fault it began in, and the longest that did; and each fault's own.
func stalls(f *Figures, clients []*drawer, faults []FaultResult) {
	var longest, outage time.Duration
	f.LongestStallDuring = "between faults"
	for _, d := range clients {
		if d.longestBetween > longest {
			longest, f.LongestStallDuring, f.LongestStallAfter = d.longestBetween, "between faults", "no fault had ended yet"
			if e := d.longestBetweenAfter; e != nil {
				f.LongestStallAfter = fmt.Sprintf("%s, over %.1f s before the call began", e.name, d.longestBetweenBegan.Sub(e.at).Seconds())
			}
		}
		for stage, took := range d.longestIn {
			for k := range faults {
				if faults[k].Name != *stage {
					continue
				}
				faults[k].LongestStallMS = max(faults[k].LongestStallMS, float64(took.Microseconds())/1000)
				switch {
				case faults[k].Outage:
					outage = max(outage, took)
				case took > longest:
					longest, f.LongestStallDuring, f.LongestStallAfter = took, *stage, ""
				}
			}
		}
	}
	f.LongestStallMS = float64(longest.Microseconds()) / 1000
	f.LongestOutageStallMS = float64(outage.Microseconds()) / 1000
}

// summarize checks every ID the world's clients drew and every block its servers issued, and returns
// the world's figures and fault results.
func (w *world) summarize(ctx context.Context) (Figures, []FaultResult, error) {
	w.mu.Lock()
	clients, faults := w.clients, slices.Clone(w.faultsRun)
	issued := issue{blocks: w.rec.blocks(), advances: slices.Clone(w.advances), ceilings: slices.Clone(w.ceilings)}
	resets := map[int][]int64{}
	for i, r := range w.resets {
		resets[i] = slices.Clone(r)
	}
	w.mu.Unlock()

	var f Figures
	drawn := map[string][]int64{} // by namespace
	for _, d := range clients {
		drawn[d.namespace] = append(drawn[d.namespace], d.ids...)
		issued.exhausted += d.exhausted
		f.ExhaustedWaits += d.exhaustedWaits
		f.LongestExhaustedWaitMS = max(f.LongestExhaustedWaitMS, float64(d.longestExhaustedWait.Microseconds())/1000)
		f.degradedCalls += d.degradedCalls
		f.degradedOK += d.degradeOK
		f.NextErrors += d.errors
	}
	stalls(&f, clients, faults)
	f.ServedWhileDegraded = 1
	if f.degradedCalls > 0 {
		f.ServedWhileDegraded = float64(f.degradedOK) / float64(f.degradedCalls)
	}
	f.FailedAttempts, f.Failovers = w.attempts.failed.Load(), w.attempts.failovers.Load()
	issued.check(&f, faults, drawn, w.layout, w.indexOf)

	after, err := w.counters(ctx)
	if err != nil {
		return f, faults, err
	}
	f.LostInFlightIDs = w.layout.lostInFlight(w.before, after, resets, issued.of(Namespace), w.indexOf)
	return f, faults, nil
}

// issue is what the servers issued in a run, and what it must be held to.
type issue struct {
	blocks   []recorded
	advances []advance
	ceilings ceilings // the ceiling namespace's
	// exhausted counts the calls of the ceiling namespace's clients that found it exhausted.
	exhausted int64
}

// of returns the blocks of one namespace.
func (is issue) of(ns string) []allocator.Block {
	var out []allocator.Block
	for _, b := range is.blocks {
		if b.Namespace == ns {
			out = append(out, b.Block)
		}
	}
	return out
}

func (is issue) recordedOf(ns string) []recorded {
	var out []recorded
	for _, b := range is.blocks {
		if b.Namespace == ns {
			out = append(out, b)
		}
	}
	return out
}

// check sets f's figures of what was issued and drawn (IDs by namespace): each namespace is a space of
// IDs of its own, so IDs are checked for duplicates, and against the blocks, within their namespace.
// It notes in faults what the start advances and the ceiling lowering were checked against.
func (is issue) check(f *Figures, faults []FaultResult, drawn map[string][]int64, l layout, indexOf func(string) (int, bool)) {
	all := make([]allocator.Block, len(is.blocks))
	for k, b := range is.blocks {
		all[k] = b.Block
	}
	f.Blocks = int64(len(all))
	f.ParityViolations = l.parityViolations(all, indexOf)
	for ns, ids := range drawn {
		slices.Sort(ids)
		f.IDs += int64(len(ids))
		f.Duplicates += duplicates(ids)
		f.ParityViolations += l.outsideBlocks(ids, is.of(ns))
	}
	for _, ns := range []string{Namespace, CeilingNamespace} {
		n, first := l.reissued(is.recordedOf(ns))
		f.ReissuedIDs += n
		if f.ReissuedFirst == "" {
			f.ReissuedFirst = first
		}
	}
	for _, a := range is.advances {
		c := a.check(is.recordedOf(Namespace), indexOf)
		f.StartViolations += c.violations
		for k := range faults {
			if faults[k].Name == a.fault {
				faults[k].Checked = c.returned
				faults[k].Detail += fmt.Sprintf("; %d blocks leased after the change, %d of them from server %s, the lowest from %d",
					c.blocks, c.returned, label(a.returned), c.lowest)
			}
		}
	}
	cc := is.ceilings.check(is.recordedOf(CeilingNamespace))
	f.IDsAboveMaxID = cc.above
	for k := range faults {
		if faults[k].Expect == ExpectCeiling {
			faults[k].Checked = cc.after
			faults[k].Detail += fmt.Sprintf("; %d blocks leased after the lowering, the highest ID %d; %d IDs above the ceiling in force at their lease; %d calls of its clients answered exhausted",
				cc.after, cc.highest, cc.above, is.exhausted)
		}
	}
}

// duplicates counts the IDs of a sorted list equal to the one before.
func duplicates(sorted []int64) int64 {
	var n int64
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			n++
		}
	}
	return n
}

// layout is how a backend's servers split the IDs: servers of them, server i (from 0) issuing IDs ≡
// i+1 (mod step) — the pair and two Redis instances odd and even, a Galera cluster of three nodes at
// offsets 1, 2, 3 of 4.
type layout struct {
	servers int
	step    int64
}

// pairLayout is two servers, odd and even.
var pairLayout = layout{servers: 2, step: 2}

// indexes are the servers' indexes, 0 to servers-1.
func (l layout) indexes() []int {
	out := make([]int, l.servers)
	for i := range out {
		out[i] = i
	}
	return out
}

// residue is the residue (mod step) of the IDs server i issues.
func (l layout) residue(i int) int64 { return int64(i+1) % l.step }

// firstOf is server i's first ID at or above start.
func (l layout) firstOf(i int, start int64) int64 {
	return start + (l.residue(i)-start%l.step+l.step)%l.step
}

// parityViolations counts the IDs of blocks issued by no known server, with another step, or outside
// the residue of the server that issued them.
func (l layout) parityViolations(blocks []allocator.Block, indexOf func(string) (int, bool)) int64 {
	var n int64
	for _, b := range blocks {
		if i, ok := indexOf(b.Server); !ok || b.Step != l.step || b.Start%l.step != l.residue(i) {
			n += b.Size
		}
	}
	return n
}

// outsideBlocks counts the IDs of a sorted list that lie in no block of their residue: walks the IDs
// against the sorted blocks of each residue.
func (l layout) outsideBlocks(sorted []int64, blocks []allocator.Block) int64 {
	var n int64
	for parity := range l.step {
		var bs []allocator.Block
		for _, b := range blocks {
			if b.Start%l.step == parity {
				bs = append(bs, b)
			}
		}
		slices.SortFunc(bs, func(x, y allocator.Block) int { return compare(x.Start, y.Start) })
		j := 0
		for _, id := range sorted {
			if id%l.step != parity {
				continue
			}
			for j < len(bs) && lastOf(bs[j]) < id {
				j++
			}
			if j == len(bs) || !bs[j].Contains(id) {
				n++
			}
		}
	}
	return n
}

// reissued counts the IDs that lie in more than one block: walks each residue's blocks in order of
// their start, against the highest ID issued before.
func (l layout) reissued(blocks []recorded) (n int64, first string) {
	for parity := range l.step {
		var bs []recorded
		for _, b := range blocks {
			if b.Start%l.step == parity && b.Step == l.step && b.Size > 0 {
				bs = append(bs, b)
			}
		}
		slices.SortFunc(bs, func(x, y recorded) int { return compare(x.Start, y.Start) })
		var high int64 = -1  // the highest ID of the blocks so far; -1 before the first
		var highest recorded // the block that holds it
		for _, b := range bs {
			last := lastOf(b.Block)
			if high >= b.Start {
				n += (min(high, last)-b.Start)/l.step + 1
				if first == "" {
					first = fmt.Sprintf("%s (lease began %s) and %s (lease began %s)", highest.Block, highest.began.Format("15:04:05.000"),
						b.Block, b.began.Format("15:04:05.000"))
				}
			}
			if last > high {
				high, highest = last, b
			}
		}
	}
	return n, first
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func lastOf(b allocator.Block) int64 {
	l, _ := b.Last()
	return l
}

// advanceCheck is what a start advance's check found.
type advanceCheck struct {
	// blocks were leased after the change; violations of them start below the new start; returned of
	// them come from the server that was down, and lowest is the lowest start among them.
	blocks, violations, returned, lowest int64
}

// check finds the blocks leased after the start was advanced that start below it.
func (a advance) check(blocks []recorded, indexOf func(string) (int, bool)) advanceCheck {
	var c advanceCheck
	for _, b := range blocks {
		if b.epoch < a.epoch {
			continue
		}
		c.blocks++
		if b.Start < a.start {
			c.violations++
		}
		if i, ok := indexOf(b.Server); ok && i == a.returned {
			if c.returned == 0 || b.Start < c.lowest {
				c.lowest = b.Start
			}
			c.returned++
		}
	}
	return c
}

// lostInFlight is how many IDs the servers' counters moved past that no recorded block holds: ranges
// taken by leases that committed while their reply was lost. They are gaps, never issued.
//
// An operator's repair or start advance moves a counter up to a value, and a restore moves it back
// before a repair: those moves are not leases. So each server's counter is followed in stretches, one
// from each such value (resets) to the next: a stretch that ended at a reset counts up to the end of
// its highest block (what happened after that block is not known), the last one up to the counter
// at the end.
func (l layout) lostInFlight(before, after map[int]int64, resets map[int][]int64, blocks []allocator.Block, indexOf func(string) (int, bool)) int64 {
	var moved, recorded int64
	for i, from := range before {
		bounds := append([]int64{from}, resets[i]...)
		slices.Sort(bounds)
		ends := make([]int64, len(bounds)) // the end of each stretch's highest block
		copy(ends, bounds)
		for _, b := range blocks {
			if j, ok := indexOf(b.Server); !ok || j != i {
				continue
			}
			recorded += b.Size
			k, _ := slices.BinarySearch(bounds, b.Start+1) // the stretch whose bound is at or below the start
			k = max(k-1, 0)
			ends[k] = max(ends[k], lastOf(b)+b.Step)
		}
		last := len(bounds) - 1
		for k := range last {
			moved += ends[k] - bounds[k]
		}
		moved += after[i] - bounds[last]
	}
	return moved/l.step - recorded
}
