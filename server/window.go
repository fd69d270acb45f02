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
	stamp := uint64(sec) & secMask
	slot := &w.slots[uint64(sec)%windowSeconds]
	for {
		old := slot.Load()
		var count uint64
		if old>>countBits == stamp {
			count = old & countMask
		}
		count = min(count+uint64(max(n, 0)), countMask)
		if slot.CompareAndSwap(old, stamp<<countBits|count) {
			return
		}
	}
}

// last returns the counts of the windowSeconds seconds up to now, oldest first; now's second is still
// counting.
func (w *idWindow) last(now time.Time) [windowSeconds]int64 {
	var out [windowSeconds]int64
	end := now.Unix()
	for i := range out {
		sec := end - windowSeconds + 1 + int64(i)
		v := w.slots[uint64(sec)%windowSeconds].Load()
		if v>>countBits == uint64(sec)&secMask {
			out[i] = int64(v & countMask)
		}
	}
	return out
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
