package allocatortest

import (
	"sort"
	"sync"
	"time"
)

// Clock is a manual clock for tests of expiry, backoff, rates and staleness: it stands still until
// Advance moves it, and Advance runs the timers that come due, in the caller's goroutine, before it
// returns. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*clockTimer
}

type clockTimer struct {
	at   time.Time
	f    func()
	done bool
}

// NewClock returns a Clock at 2026-01-02 03:04:05 UTC.
func NewClock() *Clock { return NewClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

// NewClockAt returns a Clock at t.
func NewClockAt(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f once the clock has been advanced by d or more; stop cancels it and reports whether
// it did.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

// Advance moves the clock forward by d and fires every timer due by then, the earliest first.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*clockTimer
	live := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !t.at.After(c.now):
			t.done = true
			due = append(due, t)
		default:
			live = append(live, t)
		}
	}
	clear(c.timers[len(live):])
	c.timers = live
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}
