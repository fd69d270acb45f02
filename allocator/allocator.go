// Package allocator is the domain of ticketd: blocks of unique 64-bit IDs leased from ticket servers.
// It holds the types every backend, the HTTP service and the client share, and does no I/O.
package allocator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"
)

// Sentinel errors. Backends wrap them with %w; callers test with errors.Is.
var (
	// ErrInvalidNamespace means a namespace name does not match NamePattern.
	ErrInvalidNamespace = errors.New("allocator: invalid namespace name")
	// ErrInvalidSize means a lease size is below 1 or above the namespace's maximum.
	ErrInvalidSize = errors.New("allocator: invalid block size")
	// ErrInvalidSettings means namespace settings are out of range (sizes, TTL, start).
	ErrInvalidSettings = errors.New("allocator: invalid namespace settings")
	// ErrNotFound means the namespace does not exist.
	ErrNotFound = errors.New("allocator: namespace not found")
	// ErrExists means a namespace with that name already exists.
	ErrExists = errors.New("allocator: namespace already exists")
	// ErrUnavailable means no ticket server could serve the request.
	ErrUnavailable = errors.New("allocator: no ticket server available")
	// ErrExhausted means the namespace has no ID left below its ceiling (its MaxID, at most
	// math.MaxInt64) on any ticket server. Counters never wrap.
	ErrExhausted = errors.New("allocator: ID space exhausted")
	// ErrOutOfRange means an index or ID lies outside a block.
	ErrOutOfRange = errors.New("allocator: index out of block range")
	// ErrMisconfigured means a ticket server's settings could issue duplicate IDs; it is refused.
	ErrMisconfigured = errors.New("allocator: ticket server misconfigured")
	// ErrFenced means a ticket server's counter is below the high-water mark its peer recorded, as after
	// a restore from an old backup; it serves nothing until repaired.
	ErrFenced = errors.New("allocator: ticket server fenced")
	// ErrClosed means the backend has been closed.
	ErrClosed = errors.New("allocator: backend closed")
)

// Limits and defaults shared by every backend.
const (
	// DefaultBlockSize is the lease size when a namespace does not set one.
	DefaultBlockSize = 1000
	// DefaultMaxBlockSize is the largest lease a namespace allows when it does not set one.
	DefaultMaxBlockSize = 1_000_000
	// MaxBlockSizeLimit bounds any namespace's MaxBlockSize.
	MaxBlockSizeLimit = 1 << 32
	// MaxNameLength is the longest namespace name.
	MaxNameLength = 64
	// MaxLeaseTTL bounds a namespace's lease TTL.
	MaxLeaseTTL = 365 * 24 * time.Hour
	// DefaultMaxID is a namespace's ceiling when it does not set one: the largest BIGINT.
	DefaultMaxID = math.MaxInt64
)

// NamePattern is what a namespace name must match.
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidateName returns ErrInvalidNamespace (wrapped, with the reason) unless name matches NamePattern.
// Backends call it before building any query.
func ValidateName(name string) error {
	if len(name) > MaxNameLength || !NamePattern.MatchString(name) {
		return fmt.Errorf("%w: %q must match %s (lower-case letters, digits, '_', '.', '-'; 1 to 64 characters)",
			ErrInvalidNamespace, truncate(name, 80), NamePattern.String())
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Namespace is an independent ID sequence and its settings.
// The zero value of each setting means its default.
type Namespace struct {
	// Name matches NamePattern.
	Name string
	// BlockSize is the lease size when a caller does not ask for one. Default DefaultBlockSize.
	BlockSize int64
	// MaxBlockSize is the largest lease. Default DefaultMaxBlockSize; at most MaxBlockSizeLimit.
	MaxBlockSize int64
	// LeaseTTL is how long a leased block may be used. Zero means blocks never expire.
	LeaseTTL time.Duration
	// Start is the lowest ID the namespace issues (at create), or the value every counter is advanced to
	// (at update; counters never move back). Zero means 1 at create and "leave counters alone" at update.
	Start int64
	// MaxID is the ceiling, inclusive: no ID above it is ever issued, on any ticket server (an INT
	// column's 2^31-1, JavaScript's 2^53-1). Default DefaultMaxID. It may not fall below an ID already
	// issued.
	MaxID int64
	// Servers is each ticket server's view of the namespace; filled by Backend.Namespace.
	Servers []ServerState
}

// ServerState is one ticket server's counter for a namespace.
type ServerState struct {
	Server  string `json:"server"`
	Next    int64  `json:"next,string"` // the next ID this server will issue
	Step    int64  `json:"step"`
	Offset  int64  `json:"offset"`
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
	// Replication says how the server replicates, when it does: the Galera cluster it is a node of, or
	// the source it replicates from.
	Replication string `json:"replication,omitempty"`
}

// WithDefaults returns n with zero settings replaced by their defaults.
func (n Namespace) WithDefaults() Namespace {
	if n.BlockSize == 0 {
		n.BlockSize = DefaultBlockSize
	}
	if n.MaxBlockSize == 0 {
		n.MaxBlockSize = max(DefaultMaxBlockSize, n.BlockSize)
	}
	if n.Start == 0 {
		n.Start = 1
	}
	if n.MaxID == 0 {
		n.MaxID = DefaultMaxID
	}
	return n
}

// Validate checks the name and settings of n (after WithDefaults).
func (n Namespace) Validate() error {
	if err := ValidateName(n.Name); err != nil {
		return err
	}
	switch {
	case n.MaxBlockSize < 1 || n.MaxBlockSize > MaxBlockSizeLimit:
		return fmt.Errorf("%w: max_block_size %d must be between 1 and %d", ErrInvalidSettings, n.MaxBlockSize, int64(MaxBlockSizeLimit))
	case n.BlockSize < 1 || n.BlockSize > n.MaxBlockSize:
		return fmt.Errorf("%w: block_size %d must be between 1 and max_block_size %d", ErrInvalidSettings, n.BlockSize, n.MaxBlockSize)
	case n.LeaseTTL < 0 || n.LeaseTTL > MaxLeaseTTL:
		return fmt.Errorf("%w: lease_ttl %s must be between 0 (never expires) and %s", ErrInvalidSettings, n.LeaseTTL, MaxLeaseTTL)
	case n.LeaseTTL > 0 && n.LeaseTTL < time.Second:
		return fmt.Errorf("%w: lease_ttl %s is shorter than 1s; use 0 for blocks that never expire", ErrInvalidSettings, n.LeaseTTL)
	case n.Start < 0:
		return fmt.Errorf("%w: start %d must be 1 or more", ErrInvalidSettings, n.Start)
	case n.MaxID < max(n.Start, 1):
		return fmt.Errorf("%w: max_id %d must be at least start %d", ErrInvalidSettings, n.MaxID, max(n.Start, 1))
	}
	return nil
}

// ValidateSize returns ErrInvalidSize unless 1 ≤ size ≤ maxSize.
func ValidateSize(size, maxSize int64) error {
	if size < 1 || size > maxSize {
		return fmt.Errorf("%w: %d must be between 1 and %d", ErrInvalidSize, size, maxSize)
	}
	return nil
}

// ExpiryFor is when a block leased at now expires under ttl; zero when ttl is zero.
func ExpiryFor(now time.Time, ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

// Backend leases blocks of IDs. Every implementation is safe for concurrent use and never returns two
// blocks that share an ID, across processes and restarts.
type Backend interface {
	// Lease takes a new block of size IDs from the namespace. size must be between 1 and the namespace's
	// MaxBlockSize. A lease whose outcome is unknown is never reused: a retry takes a new range.
	Lease(ctx context.Context, namespace string, size int64) (Block, error)
	// CreateNamespace creates a namespace; ErrExists when it exists.
	CreateNamespace(ctx context.Context, ns Namespace) (Namespace, error)
	// UpdateNamespace changes the settings of an existing namespace; ErrNotFound when it does not exist.
	UpdateNamespace(ctx context.Context, ns Namespace) (Namespace, error)
	// Namespace returns a namespace with its settings and each server's counter.
	Namespace(ctx context.Context, name string) (Namespace, error)
	// Namespaces lists every namespace, sorted by name.
	Namespaces(ctx context.Context) ([]Namespace, error)
	// Close releases resources. It is safe to call more than once.
	Close() error
}

// SettingsReader is implemented by backends whose Namespace reads more than the settings (each server's
// counter): Settings reads only the namespace's settings, Servers left empty, for a caller that needs
// no counter, such as a cache that refreshes the settings it leases by.
type SettingsReader interface {
	Settings(ctx context.Context, name string) (Namespace, error)
}

// SharedSettingsReader is implemented by backends that keep every namespace's settings and read them
// from the servers together: SharedSettings returns a copy at most the backend's settings TTL old
// (Failover.SettingsTTL), for a caller that refreshes many namespaces' settings often (a cache), at a
// read per server and TTL however many namespaces. SettingsReader is for a caller that must see a
// change at once.
type SharedSettingsReader interface {
	SharedSettings(ctx context.Context, name string) (Namespace, error)
}

// ServerHealth is one ticket server's state as a backend sees it.
type ServerHealth struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	Step    int64  `json:"step"`
	Offset  int64  `json:"offset"`
	// Fenced means the server answers but its counter is below what a peer recorded (a restored backup):
	// no lease comes from it until an operator repairs it. Error says which namespaces and how.
	Fenced bool `json:"fenced,omitempty"`
	// Error says why the server is not usable; empty when it is.
	Error string `json:"error,omitempty"`
	// Replication says how the server replicates, when it does (see ServerState.Replication).
	Replication string `json:"replication,omitempty"`
	// Marks says why this process's water marks do not reach the server, when they do not: the
	// server still serves, but the restored-state guard forgets what this process saw when it stops.
	Marks string `json:"marks,omitempty"`
}

// HealthReporter is implemented by backends that can say which of their ticket servers are usable.
type HealthReporter interface {
	Health() []ServerHealth
}

// Observer receives one call per attempt to lease from a ticket server, for metrics and logs.
// took is the attempt's duration; err is nil on success. It must be safe for concurrent use and fast.
type Observer interface {
	ObserveLease(server string, took time.Duration, err error)
	// ObserveFailover is called when a lease moves on from a failed server to the next one.
	ObserveFailover(from string)
}

// LeaseOrCreate leases from a namespace, first creating it with default settings if it does not exist.
// It is for the embedded default and local development, where a typo creating a sequence harms no one.
func LeaseOrCreate(ctx context.Context, b Backend, namespace string, size int64) (Block, error) {
	blk, err := b.Lease(ctx, namespace, size)
	if !errors.Is(err, ErrNotFound) {
		return blk, err
	}
	if _, err := b.CreateNamespace(ctx, Namespace{Name: namespace}); err != nil && !errors.Is(err, ErrExists) {
		return Block{}, err
	}
	return b.Lease(ctx, namespace, size)
}

// RepairOptions tunes Repairer.Repair.
type RepairOptions struct {
	// Margin is how many IDs (of the server's own step) to skip beyond the highest water mark, for
	// leases that may have been issued after the last mark was written. Zero sizes it from the marks'
	// history (see the backend's Repair).
	Margin int64
	// Force repairs a server that is not fenced. Without it such a server is refused: moving a healthy
	// counter is almost always a mistake (a wrong server name, say).
	Force bool
}

// RepairResult says what a repair changed, and why it chose the counter it did.
type RepairResult struct {
	Server    string `json:"server"`
	Namespace string `json:"namespace"`
	// Fenced is whether the server was fenced for the namespace before the repair.
	Fenced bool `json:"fenced"`
	// Reason is why it was fenced (empty when it was not).
	Reason string `json:"reason,omitempty"`
	// Before is the counter before the repair (0 when the server had lost the namespace).
	Before int64 `json:"before,string"`
	// Watermark is the highest counter any peer (or this process) recorded for the server, and Holder
	// who recorded it.
	Watermark int64  `json:"watermark,string"`
	Holder    string `json:"holder,omitempty"`
	// Margin is the IDs skipped beyond the mark, and MarginWhy how it was sized.
	Margin    int64  `json:"margin,string"`
	MarginWhy string `json:"margin_why"`
	// After is the counter now.
	After int64 `json:"after,string"`
}

// Repairer is implemented by backends that fence a ticket server whose counters went back (a restored
// backup, lost data): Repair advances the server's counter for a namespace past what its peers
// recorded, plus a margin, and lets it serve again. Run it only after checking why the server went
// back. ErrMisconfigured (wrapped) when the server is not fenced and opts.Force is false.
type Repairer interface {
	Repair(ctx context.Context, namespace, server string, opts RepairOptions) (RepairResult, error)
}
