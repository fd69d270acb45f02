package bench

import (
	"context"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/inprocess"
)

// ticketRowName names the ticket row of the generation table.
const ticketRowName = "ticketd SDK, cached block"

// newTicketSource returns the source the ticket rows use: the SDK on blocks of ns, leased in-process
// from b (size 0: the SDK's own choice, from the namespace's block size up).
func newTicketSource(_ context.Context, b allocator.Backend, ns string, size int64) (idSource, func(), error) {
	var opts []client.Option
	if size > 0 {
		opts = append(opts, client.WithMinBlockSize(size))
	}
	c, err := client.New(inprocess.Source(b), ns, opts...)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}

// sdkLoadCases are the load cases that go through the SDK.
func sdkLoadCases(env *mysqlEnv) ([]loadCase, []string) {
	return []loadCase{sdkOverHTTPCase(env)}, nil
}

// sdkOverHTTPCase takes one ID per call from the SDK, which leases its blocks over HTTP.
func sdkOverHTTPCase(env *mysqlEnv) loadCase {
	return loadCase{name: "SDK over HTTP, one ID per Next (server cache on)", open: func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
		b, base, stop, err := httpServer(ctx, env, true)
		if err != nil {
			return nil, nil, err
		}
		ns, err := env.namespace(ctx, b, "sdk", 1000)
		if err != nil {
			stop()
			return nil, nil, err
		}
		c, err := client.New(client.HTTP(base), ns)
		if err != nil {
			stop()
			return nil, nil, err
		}
		return func(ctx context.Context) (int64, error) {
			_, err := c.Next(ctx)
			return 1, err
		}, func() { _ = c.Close(); stop() }, nil
	}}
}
