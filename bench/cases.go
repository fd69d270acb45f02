package bench

import (
	"context"
	"fmt"

	"github.com/ticketd/ticketd/allocator"
)

// leaseSizes are the block sizes the load cases lease.
var leaseSizes = []int64{1, 100, 10_000}

// leaseCase leases blocks of size from a backend; open makes the backend and returns a cleanup.
func leaseCase(name string, size int64, env *mysqlEnv, open func(ctx context.Context) (allocator.Backend, func(), error)) loadCase {
	return loadCase{name: name, open: func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
		b, done, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		ns, err := env.namespace(ctx, b, "load", size)
		if err != nil {
			done()
			return nil, nil, err
		}
		return func(ctx context.Context) (int64, error) {
			blk, err := b.Lease(ctx, ns, size)
			return blk.Size, err
		}, done, nil
	}}
}

// freshPair opens a pair of its own for one case, so that no server state carried over from an
// earlier case (a server marked down after timeouts, a cached setting) changes this one's numbers.
func freshPair(env *mysqlEnv, dsns []string) func(ctx context.Context) (allocator.Backend, func(), error) {
	return func(ctx context.Context) (allocator.Backend, func(), error) {
		p, err := env.openPair(ctx, dsns)
		if err != nil {
			return nil, nil, err
		}
		return p, func() { _ = p.Close() }, nil
	}
}

// loadCases lists the cases this run can measure, and says why the others are skipped. Flickr's
// REPLACE INTO comes last: under many clients it leaves lock waits behind on the servers.
func loadCases(ctx context.Context, opts Options, env *mysqlEnv, m *Machine) ([]loadCase, []string, error) {
	servers := fmt.Sprintf("pair of %d", len(env.dsns))
	if len(env.dsns) == 1 {
		servers = "one server"
	}
	var cases []loadCase
	for _, size := range leaseSizes {
		cases = append(cases, leaseCase(fmt.Sprintf("MySQL lease n=%s (%s)", count(size), servers), size, env, freshPair(env, env.dsns)))
	}
	var skipped []string
	if len(env.dsns) > 1 {
		cases = append(cases, leaseCase("MySQL lease n=100 (one server)", 100, env, freshPair(env, env.dsns[:1])))
	} else {
		skipped = append(skipped, "single server vs pair: --mysql names one server")
	}
	if len(opts.Galera) > 0 {
		genv, err := openMySQL(ctx, Options{MySQL: opts.Galera})
		if err != nil {
			return nil, nil, fmt.Errorf("the Galera cluster: %w", err)
		}
		env.also = append(env.also, genv)
		cases = append(cases, leaseCase(fmt.Sprintf("MySQL lease n=100 (Galera cluster of %d)", len(genv.dsns)), 100, genv, freshPair(genv, genv.dsns)))
	} else {
		skipped = append(skipped, "the pair vs a Galera cluster: no --galera DSNs given")
	}
	more, why, err := extraLoadCases(ctx, opts, env, m)
	if err != nil {
		return nil, nil, err
	}
	cases, skipped = append(cases, more...), append(skipped, why...)
	cases = append(cases, loadCase{
		name: "Flickr REPLACE INTO, one ID per call (" + servers + ")",
		open: func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
			f, err := openFlickrTickets(ctx, env.dsns, maxConns, opTimeout)
			if err != nil {
				return nil, nil, err
			}
			return func(ctx context.Context) (int64, error) {
				_, _, err := f.Ticket(ctx)
				return 1, err
			}, f.Close, nil
		},
	})
	return cases, skipped, nil
}
