// Package mono keeps instants as integers that go by the monotonic clock: what a process keeps many
// of (a timestamp per segment, per namespace) costs 8 bytes instead of a time.Time's 24.
package mono

import "time"

// base anchors the instants kept as integers.
var base = time.Now()

// Nanos is t as nanoseconds since base, never 0 (0 means "not set" where these are kept): the
// difference of two times goes by the monotonic clock when both carry one, as comparing the times
// themselves would, so a step of the wall clock neither ages nor freshens what is kept.
func Nanos(t time.Time) int64 {
	if d := int64(t.Sub(base)); d != 0 {
		return d
	}
	return 1
}

// Time is the time Nanos gave n for.
func Time(n int64) time.Time { return base.Add(time.Duration(n)) }
