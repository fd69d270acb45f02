// Package multi is what the backends that lease from several ticket servers share: each server's
// health and backoff (Member), and the Set of servers that leases fail over across and that namespace
// settings are read from and written to. Each backend keeps its own storage, checks and errors.
package multi

import (
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Config is how a Set treats its servers. The backends fill every field from their own configuration;
// only Observer may be nil.
type Config struct {
	// Noun names one server in log lines: "ticket server", "Redis instance".
	Noun string
	// Every names all the servers in the error of a lease that each of them refused as exhausted:
	// "every server", "every Redis instance".
	Every string
	// AttemptTimeout bounds one attempt on one server; Timeout bounds a whole call, failover included.
	AttemptTimeout, Timeout time.Duration
	// MinBackoff and MaxBackoff bound how long a failed server is skipped before it is tried again;
	// the wait doubles with each failure.
	MinBackoff, MaxBackoff time.Duration
	// SettingsTTL is how long a lease may use namespace settings read before.
	SettingsTTL time.Duration
	// ReviveToRead makes a read of namespace settings that finds no server usable first revive the
	// servers whose backoff has passed, rather than fail at once.
	ReviveToRead bool
	// IsFault reports whether an error says the server (or the way to it) failed, rather than the
	// request; such an error takes the server out of rotation. IsServerFault, or a backend's extension.
	IsFault func(error) bool
	// Logger receives the warnings about servers going down and coming back.
	Logger *slog.Logger
	// Observer, if set, sees every lease attempt.
	Observer allocator.Observer
	// Now is the clock.
	Now func() time.Time
}

// IsServerFault reports whether err says a server (or the way to it) failed, rather than the request:
// a bad size, name or namespace, or an exhausted counter, is the request's.
func IsServerFault(err error) bool {
	switch {
	case errors.Is(err, allocator.ErrInvalidSize), errors.Is(err, allocator.ErrNotFound),
		errors.Is(err, allocator.ErrExhausted), errors.Is(err, allocator.ErrInvalidNamespace):
		return false
	}
	return true
}

// FirstAtLeast is the smallest x ≥ start with x ≡ offset (mod step), or ok=false past MaxInt64: the
// first ID that the server of that offset may issue at or above start.
func FirstAtLeast(start, step, offset int64) (int64, bool) {
	if start < 1 {
		start = 1
	}
	r := offset % step
	d := ((r-start%step)%step + step) % step
	if start > math.MaxInt64-d {
		return 0, false
	}
	return start + d, true
}
