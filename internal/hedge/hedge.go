// Package hedge derives when to hedge a request: how long to wait for an answer before the same
// request goes to another server too. The delay is the 95th percentile of the latencies of recent
// answers, within bounds, so that about one request in twenty is hedged while the servers are healthy,
// and every request is hedged promptly while one of them hangs.
package hedge

import (
	"slices"
	"time"
)

// Window is how many recent answers the percentile is taken over.
const Window = 64

// Recovery is how long after a failure answers say nothing of the usual latency: a request that began
// within it may have waited for a server to be checked again, a connection to be dialled or a backoff
// to pass, and an outage of a few seconds would otherwise leave the delay at its ceiling for as many
// answers as Window after it ends.
const Recovery = 5 * time.Second

// Delay keeps the latencies of the last Window answers. Feed it only the answers that were used: the
// late answer of a request that a hedge outpaced would teach it to wait for a path that hung. The zero
// value is ready for use; it is not safe for concurrent use. It holds as many latencies as it was
// given, up to Window: a process keeps one per namespace it serves, most of which see few answers.
type Delay struct {
	recent []time.Duration // grows to Window, then a ring
	n      int             // answers observed in all
	failed int64           // monoNanos of the last failure noted; 0: none
}

// Fail notes that a request failed at now (or that its answer came through a failover): the answers to
// requests begun within Recovery of it are not observed.
func (d *Delay) Fail(now time.Time) { d.failed = monoNanos(now) }

// Observe records how long the answer to a request begun at start took, unless the request began
// within Recovery of the last failure.
func (d *Delay) Observe(start time.Time, took time.Duration) {
	if d.failed != 0 && monoNanos(start)-d.failed < int64(Recovery) {
		return
	}
	if len(d.recent) < Window {
		d.recent = append(d.recent, took)
	} else {
		d.recent[d.n%Window] = took
	}
	d.n++
}

// Get returns the 95th percentile (the nearest rank) of the latencies observed, at least floor and at
// most ceiling; before the first answer, first (at most ceiling).
func (d *Delay) Get(floor, ceiling, first time.Duration) time.Duration {
	n := len(d.recent)
	if n == 0 {
		return min(first, ceiling)
	}
	var buf [Window]time.Duration
	sorted := buf[:n]
	copy(sorted, d.recent[:n])
	slices.Sort(sorted)
	return min(max(sorted[(n*95+99)/100-1], floor), ceiling)
}

// clockBase anchors the instants kept as integers (see monoNanos): this module's own copy of the
// server's internal/mono, which a module the SDK shares cannot import.
var clockBase = time.Now()

// monoNanos is t as nanoseconds since clockBase, never 0 (0 means "not set" where these are kept):
// the difference of two times goes by the monotonic clock when both carry one, as comparing the times
// themselves would, so a step of the wall clock neither ages nor freshens what is kept.
func monoNanos(t time.Time) int64 {
	if d := int64(t.Sub(clockBase)); d != 0 {
		return d
	}
	return 1
}
