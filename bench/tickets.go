package bench

import "context"

// idSource hands out ticket IDs one at a time; safe for concurrent use. The SDK's Client is one.
type idSource interface {
	Next(ctx context.Context) (int64, error)
}
