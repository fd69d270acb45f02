package failover

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Mark is the highest counter seen on a server for one namespace, and who saw it.
type Mark struct {
	Value  int64
	Holder string
}

// ThisProcess is the holder of the marks a process took from its own leases.
const ThisProcess = "this ticketd process"

// Floors are what one process knows of one server's counters: per namespace, the highest counter seen
// there by this process or read in a peer's water marks. A lease requires the server's counter to be
// at or above its floor (a counter below it went back in time: a restored backup, lost data), and the
// process writes its floors into the peers as their water marks. Floors also measure the pace of this
// process's leases, for sizing a repair's margin. Safe for concurrent use; the zero value is ready.
type Floors struct {
	mu   sync.Mutex
	high map[string]Mark
	// leasedSince counts, per namespace, the counter units leased here since rates were last taken.
	leasedSince map[string]int64
	ratesAt     time.Time
	// written[peer][ns] is the value last written into that peer's water marks.
	written map[string]map[string]int64
}

// Observe raises a namespace's floor to v, seen by holder.
func (f *Floors) Observe(ns string, v int64, holder string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observeLocked(ns, v, holder)
}

func (f *Floors) observeLocked(ns string, v int64, holder string) {
	if f.high == nil {
		f.high = map[string]Mark{}
	}
	if v > f.high[ns].Value {
		f.high[ns] = Mark{v, holder}
	}
}

// Leased notes a lease by this process that took the counter to end, span counter units above where
// it started.
func (f *Floors) Leased(ns string, end, span int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observeLocked(ns, end, ThisProcess)
	if f.leasedSince == nil {
		f.leasedSince = map[string]int64{}
	}
	f.leasedSince[ns] += span
}

// Get returns a namespace's floor; the zero Mark when nothing was seen.
func (f *Floors) Get(ns string) Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.high[ns]
}

// Snapshot returns every namespace's floor.
func (f *Floors) Snapshot() map[string]Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]Mark, len(f.high))
	for ns, m := range f.high {
		out[ns] = m
	}
	return out
}

// TakeRates returns, per namespace, the counter units this process leased per second since the last
// call (nothing at the first).
func (f *Floors) TakeRates(now time.Time) map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	if elapsed := now.Sub(f.ratesAt).Seconds(); !f.ratesAt.IsZero() && elapsed > 0 {
		for ns, n := range f.leasedSince {
			out[ns] = int64(float64(n) / elapsed)
		}
	}
	f.leasedSince, f.ratesAt = nil, now
	return out
}

// Pending returns the floors the named peer has not received yet.
func (f *Floors) Pending(peer string) map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for ns, m := range f.high {
		if f.written[peer][ns] < m.Value {
			out[ns] = m.Value
		}
	}
	return out
}

// Wrote notes that the named peer now holds v as the namespace's water mark.
func (f *Floors) Wrote(peer, ns string, v int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
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

// RepairMargin sizes a repair's margin from what can have been leased since the last water mark was
// written: RepairMarginIntervals intervals at peak (the highest lease rate recorded with the marks,
// counter units per second), and never less than ten of the namespace's largest blocks at the
// server's step. It says how it chose.
func RepairMargin(peak int64, interval time.Duration, maxBlock, step int64) (int64, string) {
	window := time.Duration(RepairMarginIntervals) * interval
	byRate := int64(float64(peak) * window.Seconds())
	byBlocks := 10 * maxBlock * step
	if byRate > byBlocks {
		return byRate, fmt.Sprintf("%d water-mark intervals (%s) at the highest lease rate recorded with the marks, %d per second", RepairMarginIntervals, window, peak)
	}
	return byBlocks, fmt.Sprintf("ten blocks of max_block_size %d at step %d (more than %d water-mark intervals, %s, at the highest lease rate recorded with the marks, %d per second)",
		maxBlock, step, RepairMarginIntervals, window, peak)
}

// FenceReason is the error text of a fenced server: what went back, and the command that repairs it.
func FenceReason(server string, namespaces, details []string) string {
	return fmt.Sprintf("%s went back in time, as after a restore from an old backup or a lost disk (%s); it serves nothing until an operator checks it and runs: ticketd repair %s --server %s",
		server, strings.Join(details, "; "), namespaces[0], server)
}
