package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// A Source is where a Client leases its blocks: HTTP for ticketd servers over the network, FromBackend
// for a backend in the same process.
type Source interface {
	open(namespace string, cfg *config) (leaser, error)
}

// leaser is an opened Source, used by one Client's lease goroutines, several at once (and Stats).
type leaser interface {
	// lease takes a block of size IDs (0: the namespace's block size) for a refill, whose requests share
	// r: the first (hedge false) notes in r where it waits, a hedge asks elsewhere first, and neither
	// fails over once r is settled.
	lease(ctx context.Context, size int64, r *route, hedge bool) (Block, error)
	// paths is how many URLs a hedge can choose from; with one, refills are not hedged.
	paths() int
	// settings returns the namespace's settings, when the source can tell.
	settings(ctx context.Context) (Settings, error)
	// endpoints describes each URL's health; nil for in-process sources.
	endpoints() []Endpoint
	close()
}

// Block is a block of IDs leased from a Backend: Start, Start+Step, …, Start+(Size-1)*Step.
type Block struct {
	Namespace string
	// Server names the ticket server that issued the block.
	Server string
	Start  int64
	Step   int64
	Size   int64
	// ExpiresAt is when the block must no longer be used; zero means never.
	ExpiresAt time.Time
}

// Settings are the settings of a namespace that a Client sizes its leases by. Zero means not known.
type Settings struct {
	// BlockSize is the size of a lease that asks for none; MaxBlockSize the largest lease.
	BlockSize, MaxBlockSize int64
	// LeaseTTL is how long a leased block may be used; zero means blocks never expire.
	LeaseTTL time.Duration
}

// Backend is a source of blocks in the caller's process, for FromBackend. The ticketd module's package
// inprocess adapts its backends (the MySQL pair, Redis, the embedded store) to it; a test may implement
// it to run a Client without a server. It must be safe for concurrent use, and never return two blocks
// that share an ID.
type Backend interface {
	// Lease takes a new block of size IDs of the namespace; size 0 means the namespace's block size.
	// Its errors should wrap this package's sentinel errors where one applies (ErrNotFound,
	// ErrInvalidSize, ErrExhausted, ErrServerUnavailable, …): the Client stops waiting on the ones that
	// waiting will not cure.
	Lease(ctx context.Context, namespace string, size int64) (Block, error)
	// Settings returns the namespace's settings.
	Settings(ctx context.Context, namespace string) (Settings, error)
}

// FromBackend is a Source that leases from a Backend in the caller's process, with no HTTP hop. The
// Client does not close the backend.
func FromBackend(b Backend) Source { return backendSource{b} }

type backendSource struct{ b Backend }

func (s backendSource) open(namespace string, cfg *config) (leaser, error) {
	if s.b == nil {
		return nil, errors.New("client: FromBackend(nil): a backend is required")
	}
	return &backendLeaser{b: s.b, ns: namespace, timeout: cfg.requestTimeout}, nil
}

type backendLeaser struct {
	b       Backend
	ns      string
	timeout time.Duration
}

func (l *backendLeaser) lease(ctx context.Context, size int64, _ *route, _ bool) (Block, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	blk, err := l.b.Lease(ctx, l.ns, size)
	if err != nil {
		return Block{}, fmt.Errorf("lease %d from %s: %w", size, l.ns, err)
	}
	return blk, nil
}

func (l *backendLeaser) settings(ctx context.Context) (Settings, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return l.b.Settings(ctx, l.ns)
}

func (l *backendLeaser) paths() int { return 1 }

func (l *backendLeaser) endpoints() []Endpoint { return nil }

func (l *backendLeaser) close() {}

// last returns the block's last ID, or ok=false when the block is malformed: a start, step or size
// below 1, or a last ID past the largest int64.
func (b Block) last() (id int64, ok bool) {
	if b.Start < 1 || b.Step < 1 || b.Size < 1 {
		return 0, false
	}
	hi, span := bits.Mul64(uint64(b.Size-1), uint64(b.Step))
	if hi != 0 || span > math.MaxInt64-uint64(b.Start) {
		return 0, false
	}
	return b.Start + int64(span), true
}

// validate refuses a malformed block.
func (b Block) validate() error {
	if _, ok := b.last(); !ok {
		return fmt.Errorf("block from %d of %d IDs of step %d: start, step and size must be positive and the last ID at most %d",
			b.Start, b.Size, b.Step, int64(math.MaxInt64))
	}
	return nil
}

// String describes the block for logs.
func (b Block) String() string {
	last, _ := b.last()
	return fmt.Sprintf("%s[%d..%d step %d, %d IDs from %s]", b.Namespace, b.Start, last, b.Step, b.Size, b.Server)
}
