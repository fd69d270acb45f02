package client

import "time"

// clock is the time source of a Client: real time in production, a manual clock in tests, so that
// expiry and backoff can be tested without sleeping.
type clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d; stop cancels it and reports whether it did.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
