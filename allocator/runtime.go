package allocator

import (
	"context"
	"math/rand/v2"
	"time"
)

// Runtime is where a backend of several servers takes its clock, its randomness and its background
// work from. The zero value is the real one: the system clock, math/rand/v2, goroutines and timers. A
// deterministic simulation gives its own, and steps the background work itself on simulated time in
// one goroutine; so every wait and every background task of the code that decides goes through here.
type Runtime struct {
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Float64 returns a number in [0, 1): the jitter of every backoff, and where the round-robin
	// starts. Default math/rand/v2's Float64.
	Float64 func() float64
	// Sleep waits d and reports true, or reports false as soon as ctx ends. Default a timer.
	Sleep func(ctx context.Context, d time.Duration) bool
	// Go runs fn in the background. Default a new goroutine.
	Go func(fn func())
	// Every runs fn every d, and soon after each call of the returned kick, until stop is closed.
	// Default a goroutine with a ticker.
	Every func(d time.Duration, stop <-chan struct{}, fn func()) (kick func())
	// Timeout bounds a call or an attempt: ctx, ended d from now, and its cancel. Default
	// context.WithTimeout, on the real clock.
	Timeout func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// WithDefaults fills the zero fields but Every (whose default needs its owner's WaitGroup) with the
// real clock, randomness, waits and goroutines.
func (r Runtime) WithDefaults() Runtime {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Float64 == nil {
		r.Float64 = rand.Float64
	}
	if r.Sleep == nil {
		r.Sleep = Sleep
	}
	if r.Go == nil {
		r.Go = func(fn func()) { go fn() }
	}
	if r.Timeout == nil {
		r.Timeout = context.WithTimeout
	}
	return r
}

// Sleep waits d on a real timer and reports true, or reports false as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
