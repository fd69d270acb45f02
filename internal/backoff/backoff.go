// Package backoff is the retry policy ticketd's parts share: after a run of consecutive failures, wait
// before trying again, the wait doubling with each failure from a minimum up to a maximum and jittered
// to between half and all of it; and, for a client of several endpoints, which endpoint to try first.
package backoff

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// Policy is a jittered exponential backoff. The zero Jitter means math/rand/v2's Float64.
type Policy struct {
	// Min is the wait after the first failure; Max bounds every wait.
	Min, Max time.Duration
	// Jitter returns a number in [0, 1) that places a wait between half and all of its full length.
	Jitter func() float64
}

// Full is the wait after n consecutive failures (n ≥ 1) before jitter: Min doubled n-1 times, at most
// Max. A Min of zero or less means Max.
func (p Policy) Full(n int) time.Duration {
	d := p.Min
	if d <= 0 {
		return p.Max
	}
	for i := 1; i < n && d < p.Max; i++ {
		if d > p.Max/2 {
			return p.Max
		}
		d *= 2
	}
	return min(d, p.Max)
}

// Wait is the wait after n consecutive failures: Full(n) jittered to between half and all of it.
func (p Policy) Wait(n int) time.Duration {
	d := p.Full(n)
	jitter := p.Jitter
	if jitter == nil {
		jitter = rand.Float64
	}
	return d/2 + time.Duration(jitter()*float64(d/2))
}

// Streak is an endpoint's run of consecutive failures and when it may be tried again. The zero value is
// an endpoint that has not failed. It is not safe for concurrent use: its owner's lock guards it.
type Streak struct {
	// Failures counts the failures since the last success.
	Failures int
	// RetryAt is when the endpoint may be tried again after its last failure.
	RetryAt time.Time
}

// Fail records a failure at now: the endpoint is skipped for wait.
func (s *Streak) Fail(now time.Time, wait time.Duration) {
	s.Failures++
	s.RetryAt = now.Add(wait)
}

// Reset ends the run after a success.
func (s *Streak) Reset() { *s = Streak{} }

// Due reports whether the endpoint's wait has passed at now.
func (s Streak) Due(now time.Time) bool { return !now.Before(s.RetryAt) }

// Rotate returns items starting at the next position of the round-robin cursor, so that successive
// calls start on successive items.
func Rotate[T any](items []T, cursor *atomic.Uint64) []T { return RotateAt(items, cursor.Add(1)) }

// RotateAt returns items starting at position pos (mod their number): Rotate without moving the
// cursor, for a request that must not take another's turn.
func RotateAt[T any](items []T, pos uint64) []T {
	n := len(items)
	out := make([]T, n)
	if n == 0 {
		return out
	}
	start := int(pos % uint64(n))
	for i := range n {
		out[i] = items[(start+i)%n]
	}
	return out
}

// HealthyFirst orders items to try: those whose wait has passed at now, in the order given, then those
// still waiting, the soonest due first. retryAt returns an item's RetryAt.
func HealthyFirst[T any](items []T, now time.Time, retryAt func(T) time.Time) []T {
	at := make([]time.Time, len(items))
	order := make([]int, 0, len(items))
	for i, it := range items {
		at[i] = retryAt(it)
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		aDue, bDue := !now.Before(at[a]), !now.Before(at[b])
		switch {
		case aDue && bDue:
			return 0
		case aDue:
			return -1
		case bDue:
			return 1
		}
		return at[a].Compare(at[b])
	})
	out := make([]T, len(items))
	for k, i := range order {
		out[k] = items[i]
	}
	return out
}
