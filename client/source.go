package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ticketd/ticketd/allocator"
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
	lease(ctx context.Context, size int64, r *route, hedge bool) (allocator.Block, error)
	// paths is how many URLs a hedge can choose from; with one, refills are not hedged.
	paths() int
	// settings returns the namespace's settings, when the source can tell.
	settings(ctx context.Context) (allocator.Namespace, error)
	// endpoints describes each URL's health; nil for in-process sources.
	endpoints() []Endpoint
	close()
}

// FromBackend is a Source that leases from a backend in the caller's process (the MySQL pair, the
// embedded store), with no HTTP hop. The Client does not close the backend.
func FromBackend(b allocator.Backend) Source { return backendSource{b} }

type backendSource struct{ b allocator.Backend }

func (s backendSource) open(namespace string, cfg *config) (leaser, error) {
	if s.b == nil {
		return nil, errors.New("client: FromBackend(nil): a backend is required")
	}
	return &backendLeaser{b: s.b, ns: namespace, timeout: cfg.requestTimeout}, nil
}

type backendLeaser struct {
	b       allocator.Backend
	ns      string
	timeout time.Duration
}

func (l *backendLeaser) lease(ctx context.Context, size int64, _ *route, _ bool) (allocator.Block, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	blk, err := l.b.Lease(ctx, l.ns, size)
	if err != nil {
		return allocator.Block{}, fmt.Errorf("lease %d from %s: %w", size, l.ns, err)
	}
	return blk, nil
}

func (l *backendLeaser) settings(ctx context.Context) (allocator.Namespace, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return l.b.Namespace(ctx, l.ns)
}

func (l *backendLeaser) paths() int { return 1 }

func (l *backendLeaser) endpoints() []Endpoint { return nil }

func (l *backendLeaser) close() {}
