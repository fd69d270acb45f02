// Package failover is what the backends that lease from several ticket servers share: each server's
// health and backoff (Member), and the Set of servers that leases fail over across and that namespace
// settings are read from and written to. Each backend keeps its own storage, checks and errors.
package failover

import (
	"context"
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
	// Failover is the backend's configuration of timeouts, backoff and the settings cache (a lease may
	// use namespace settings read up to SettingsTTL before), with its defaults filled in.
	allocator.Failover
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
	// Runtime is where waits, jitter and background work come from (see allocator.Runtime); its zero
	// fields are the real ones, and its clock is Now.
	Runtime allocator.Runtime
	// CheckCeiling, when set, is asked before a namespace gets a ceiling below the default (at create)
	// or a lower one (at update): it refuses while ticketd processes that ignore ceilings may be
	// leasing (an older release, during an upgrade).
	CheckCeiling func(ctx context.Context, namespace string) error
	// BeforeChange, when set, runs before each server takes a namespace change: a seam for tests that
	// make something happen between a change's checks and its writes.
	BeforeChange func(server string)

	rotation *rotation // set by NewSet: its members say when one comes back in rotation
}

// Server is one ticket server of a Set. Name, Usable, Due, MarkDown and MarkUp come from the *Member
// that the server type embeds; the rest are the backend's own.
type Server[R Record[R]] interface {
	comparable
	Name() string
	Usable() bool
	Due(now time.Time) bool
	MarkDown(err error)
	MarkUp()
	// Health is the server's state, with what the backend knows of its step and offset.
	Health() allocator.ServerHealth
	// Revive checks a down server again and puts it back in rotation when it passes (see
	// Member.ReviveWith).
	Revive(ctx context.Context) error
	// ReadRecord reads the server's copy of a namespace's settings; found is false when it has none.
	ReadRecord(ctx context.Context, name string) (r R, found bool, err error)
	// ReadRecords reads the server's copy of every namespace's settings.
	ReadRecords(ctx context.Context) ([]R, error)
}

// RecordStreamer is implemented by servers that read their copy of every namespace's settings one at
// a time: a listing of tens of thousands of namespaces then keeps no list of every row of each server.
// fn sees every record the server holds when the error is nil, and some of them when it is not.
type RecordStreamer[R any] interface {
	EachRecord(ctx context.Context, fn func(R)) error
}

// eachRecord calls fn with s's copy of every namespace's settings, one at a time where s can
// (RecordStreamer).
func eachRecord[S Server[R], R Record[R]](ctx context.Context, s S, fn func(R)) error {
	if st, ok := any(s).(RecordStreamer[R]); ok {
		return st.EachRecord(ctx, fn)
	}
	recs, err := s.ReadRecords(ctx)
	if err != nil {
		return err
	}
	for _, r := range recs {
		fn(r)
	}
	return nil
}

// Record is one server's copy of a namespace's settings. Servers that missed a change hold older
// copies; what is in force is their Merge.
type Record[R any] interface {
	// Namespace is the settings, without Servers.
	Namespace() allocator.Namespace
	// UpdatedUS is when the settings last changed, in microseconds since the Unix epoch.
	UpdatedUS() int64
	// CeilingUS is when the ceiling (max_id) was last set, in microseconds since the Unix epoch; 0 when
	// unknown: a copy written by a ticketd that did not record it.
	CeilingUS() int64
	// WithLimits returns the record with the ceiling maxID set at ceilingUS, and the start.
	WithLimits(maxID, ceilingUS, start int64) R
}

// Merge combines two copies of a namespace's settings into what is in force: the settings of the copy
// updated last; the ceiling set last, the lower one when both were set at once or at unknown times (a
// copy written by a ticketd that ignores ceilings, during an upgrade, never raises one); and the
// highest start, since a start only rises.
func Merge[R Record[R]](a, b R) R {
	newer, older := a, b
	if b.UpdatedUS() > a.UpdatedUS() {
		newer, older = b, a
	}
	n, o := newer.Namespace().WithDefaults(), older.Namespace().WithDefaults()
	maxID, at := n.MaxID, newer.CeilingUS()
	if oat := older.CeilingUS(); oat > at || (oat == at && o.MaxID < maxID) {
		maxID, at = o.MaxID, oat
	}
	return newer.WithLimits(maxID, at, max(newer.Namespace().Start, older.Namespace().Start))
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
