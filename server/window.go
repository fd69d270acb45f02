package server

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// windowSeconds is how far back the status page looks: one slot per second.
const windowSeconds = 60

// Each slot of an idWindow packs the second it counts (low secBits bits of the Unix second) above the
// count, so that one compare-and-swap both moves a slot to a new second and adds to it.
const (
	countBits = 40
	countMask = 1<<countBits - 1
	secMask   = 1<<(64-countBits) - 1
)

// idWindow counts the IDs handed out in each of the last windowSeconds seconds. Adding is lock-free
// (the hot path pays one compare-and-swap); a count that would pass 2^40 in one second stays at 2^40-1.
// Safe for concurrent use.
type idWindow struct {
	slots [windowSeconds]atomic.Uint64
}

func (w *idWindow) add(now time.Time, n int64) {
	sec := now.Unix()
	addToSlot(&w.slots[uint64(sec)%windowSeconds], sec, n, true)
}

// addToSlot adds n to slot for the second sec. A slot that holds another second is moved to sec when
// reuse is set, or when that second is a minute old or more (or ahead of sec: the clock stepped back);
// otherwise addToSlot reports false and leaves the slot alone.
func addToSlot(slot *atomic.Uint64, sec, n int64, reuse bool) bool {
	stamp := uint64(sec) & secMask
	for {
		old := slot.Load()
		var count uint64
		switch {
		case old>>countBits == stamp:
			count = old & countMask
		case !reuse && old != 0 && slotAge(old, sec) < windowSeconds:
			return false
		}
		count = min(count+uint64(max(n, 0)), countMask)
		if slot.CompareAndSwap(old, stamp<<countBits|count) {
			return true
		}
	}
}

// slotAge is how many seconds before sec the second of a slot's value v is, modulo its stamp's bits:
// a second after sec comes out a large age.
func slotAge(v uint64, sec int64) uint64 { return (uint64(sec) - v>>countBits) & secMask }

// last returns the counts of the windowSeconds seconds up to now, oldest first; now's second is still
// counting.
func (w *idWindow) last(now time.Time) [windowSeconds]int64 {
	var out [windowSeconds]int64
	w.addLast(now, &out)
	return out
}

// addLast adds the counts of the windowSeconds seconds up to now to out, oldest first.
func (w *idWindow) addLast(now time.Time, out *[windowSeconds]int64) {
	end := now.Unix()
	for i := range out {
		sec := end - windowSeconds + 1 + int64(i)
		v := w.slots[uint64(sec)%windowSeconds].Load()
		if v>>countBits == uint64(sec)&secMask {
			out[i] += int64(v & countMask)
		}
	}
}

// idleAt reports whether no ID was counted in the windowSeconds seconds up to now.
func (w *idWindow) idleAt(now time.Time) bool {
	for _, n := range w.last(now) {
		if n != 0 {
			return false
		}
	}
	return true
}

// lastMinute counts the IDs one namespace was handed in each second of the last minute: in one slot
// while they fall in one second, in an idWindow once they fall in several. A process that serves
// many namespaces hands most of them IDs now and then, each time within a second: those keep the
// slot's 8 bytes, not a window of 480. Adding is lock-free. Safe for concurrent use; the zero value is
// ready.
type lastMinute struct {
	one    atomic.Uint64            // a second and its count, packed as a slot of idWindow
	window atomic.Pointer[idWindow] // made when the IDs of the last minute fall in a second other than one's
}

// add counts n IDs handed out at now: in the slot when it holds now's second or one a minute old or
// more, in the window otherwise. A second's IDs may be counted in both; last sums them.
func (l *lastMinute) add(now time.Time, n int64) {
	if !addToSlot(&l.one, now.Unix(), n, false) {
		l.windowMade().add(now, n)
	}
}

// windowMade returns the window, made when there is none.
func (l *lastMinute) windowMade() *idWindow {
	if w := l.window.Load(); w != nil {
		return w
	}
	w := &idWindow{}
	if l.window.CompareAndSwap(nil, w) {
		return w
	}
	return l.window.Load()
}

// last returns the counts of the windowSeconds seconds up to now, oldest first, and whether there is
// anything to show: a window, or the slot counting a second of the last minute.
func (l *lastMinute) last(now time.Time) ([windowSeconds]int64, bool) {
	var out [windowSeconds]int64
	w := l.window.Load()
	if w != nil {
		w.addLast(now, &out)
	}
	v := l.one.Load()
	age := slotAge(v, now.Unix())
	one := v&countMask != 0 && age < windowSeconds
	if one {
		out[windowSeconds-1-age] += int64(v & countMask)
	}
	return out, w != nil || one
}

// dropIdle drops the window when it counted no ID in the last minute: it holds nothing to show. An ID
// counted into it at the moment it is dropped is missing from the last minute.
func (l *lastMinute) dropIdle(now time.Time) {
	if w := l.window.Load(); w != nil && w.idleAt(now) {
		l.window.CompareAndSwap(w, nil)
	}
}

// latencyWindow keeps, per second of the last minute, a histogram of one ticket server's lease
// attempts (with the buckets of ticketd_lease_duration_seconds), so that the status page can show recent
// quantiles rather than those since start. Safe for concurrent use; leases are far rarer than
// requests, so a mutex is cheap here.
type latencyWindow struct {
	mu    sync.Mutex
	slots [windowSeconds]latencySlot
}

type latencySlot struct {
	sec     int64
	errors  int64
	sum     time.Duration // of the successful attempts
	max     time.Duration
	buckets [len(latencyBuckets) + 1]int64 // successful attempts; the last is +Inf
}

func (w *latencyWindow) add(now time.Time, took time.Duration, failed bool) {
	sec := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.slots[uint64(sec)%windowSeconds]
	if s.sec > sec {
		return // the clock stepped back a minute or more: the slot holds newer figures
	}
	if s.sec != sec {
		*s = latencySlot{sec: sec}
	}
	if failed {
		s.errors++
		return
	}
	s.sum += took
	s.max = max(s.max, took)
	i := 0
	for i < len(latencyBuckets) && took.Seconds() > latencyBuckets[i] {
		i++
	}
	s.buckets[i]++
}

// latencySummary is one ticket server's lease attempts over the last minute.
type latencySummary struct {
	Leases, Errors      int64 // successful and failed attempts
	Mean, P50, P99, Max time.Duration
}

func (w *latencyWindow) summary(now time.Time) latencySummary {
	end := now.Unix()
	var sum latencySlot
	w.mu.Lock()
	for i := range w.slots {
		s := &w.slots[i]
		if s.sec <= end-windowSeconds || s.sec > end {
			continue
		}
		sum.errors += s.errors
		sum.sum += s.sum
		sum.max = max(sum.max, s.max)
		for b := range s.buckets {
			sum.buckets[b] += s.buckets[b]
		}
	}
	w.mu.Unlock()
	out := latencySummary{Errors: sum.errors, Max: sum.max}
	for _, n := range sum.buckets {
		out.Leases += n
	}
	if out.Leases == 0 {
		return out
	}
	out.Mean = sum.sum / time.Duration(out.Leases)
	out.P50 = quantile(0.5, sum.buckets[:], sum.max)
	out.P99 = quantile(0.99, sum.buckets[:], sum.max)
	return out
}

// quantile estimates the q-quantile of a histogram with latencyBuckets by linear interpolation within
// the bucket where it falls (as Prometheus's histogram_quantile does), never above the largest value
// seen.
func quantile(q float64, buckets []int64, largest time.Duration) time.Duration {
	var total int64
	for _, n := range buckets {
		total += n
	}
	rank := q * float64(total)
	var seen int64
	for i, n := range buckets {
		if n == 0 || float64(seen+n) < rank {
			seen += n
			continue
		}
		lo, hi := 0.0, largest.Seconds()
		if i > 0 {
			lo = latencyBuckets[i-1]
		}
		if i < len(latencyBuckets) {
			hi = math.Min(latencyBuckets[i], hi)
		}
		v := lo + (hi-lo)*(rank-float64(seen))/float64(n)
		return min(time.Duration(v*float64(time.Second)), largest)
	}
	return largest
}
