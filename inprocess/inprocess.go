// Package inprocess lets the Go SDK lease from a ticketd backend in the same process (the MySQL pair,
// Redis, the embedded store), with no server and no HTTP hop in between. Source(b) is what
// client.FromBackend takes for a ticketd backend.
package inprocess

import (
	"context"
	"errors"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/client"
)

// Source is a client Source that leases from b. The Client does not close b. Its errors match both the
// backend's sentinel errors (allocator.ErrNotFound, …) and the SDK's (client.ErrNotFound, …) with
// errors.Is.
func Source(b allocator.Backend) client.Source {
	if b == nil {
		return client.FromBackend(nil)
	}
	return client.FromBackend(backend{b})
}

// backend adapts an allocator.Backend to the SDK's client.Backend.
type backend struct{ b allocator.Backend }

var _ client.Backend = backend{}

// Lease takes a block from the backend.
func (a backend) Lease(ctx context.Context, namespace string, size int64) (client.Block, error) {
	blk, err := a.b.Lease(ctx, namespace, size)
	if err != nil {
		return client.Block{}, sdkError(err)
	}
	return client.Block{Namespace: blk.Namespace, Server: blk.Server, Start: blk.Start, Step: blk.Step,
		Size: blk.Size, ExpiresAt: blk.ExpiresAt}, nil
}

// Settings reads the namespace's settings: only them when the backend can (allocator.SettingsReader),
// else with each server's counter.
func (a backend) Settings(ctx context.Context, namespace string) (client.Settings, error) {
	var ns allocator.Namespace
	var err error
	if r, ok := a.b.(allocator.SettingsReader); ok {
		ns, err = r.Settings(ctx, namespace)
	} else {
		ns, err = a.b.Namespace(ctx, namespace)
	}
	if err != nil {
		return client.Settings{}, sdkError(err)
	}
	return client.Settings{BlockSize: ns.BlockSize, MaxBlockSize: ns.MaxBlockSize, LeaseTTL: ns.LeaseTTL}, nil
}

// sentinels pairs the backend's sentinel errors with the SDK's.
var sentinels = []struct{ backend, sdk error }{
	{allocator.ErrNotFound, client.ErrNotFound},
	{allocator.ErrInvalidNamespace, client.ErrInvalidNamespace},
	{allocator.ErrInvalidSize, client.ErrInvalidSize},
	{allocator.ErrExhausted, client.ErrExhausted},
	{allocator.ErrMisconfigured, client.ErrMisconfigured},
	{allocator.ErrUnavailable, client.ErrServerUnavailable},
	{allocator.ErrFenced, client.ErrServerUnavailable},
	{allocator.ErrClosed, client.ErrClosed},
}

// sdkError makes err match the SDK's sentinel error of the backend's one, keeping its message.
func sdkError(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s.backend) {
			return both{err, s.sdk}
		}
	}
	return err
}

// both is an error that matches its own chain and an SDK sentinel error.
type both struct{ err, sdk error }

func (e both) Error() string   { return e.err.Error() }
func (e both) Unwrap() []error { return []error{e.err, e.sdk} }
