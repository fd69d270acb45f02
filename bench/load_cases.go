package bench

import (
	"context"
	"fmt"
)

// leaseSizes are the block sizes the lease cases lease, straight from a backend and over HTTP.
var leaseSizes = []int64{1, 100, 10_000}

// loadCases lists the cases this run can measure, in the report's order, and says why the others are
// skipped: leases straight from the MySQL backend (load_backend.go), leases over HTTP and the SDK on
// them (load_http.go, sdk.go), the URL shortener and the Redis backend when a Redis is given
// (shortener.go, load_backend.go), and Flickr's baseline (tickets.go). Flickr's REPLACE INTO comes
// last: under many clients it leaves lock waits behind on the servers.
func loadCases(ctx context.Context, opts Options, env *mysqlEnv, m *Machine) ([]loadCase, []string, error) {
	servers := fmt.Sprintf("pair of %d", len(env.dsns))
	if len(env.dsns) == 1 {
		servers = "one server"
	}
	cases, skipped, err := mysqlLeaseCases(ctx, opts, env, servers)
	if err != nil {
		return nil, nil, err
	}
	cases = append(cases, httpLeaseCases(env)...)
	more, why := sdkLoadCases(env)
	cases, skipped = append(cases, more...), append(skipped, why...)
	if opts.Redis == "" {
		skipped = append(skipped, "MySQL vs Redis: no --redis address given", "the URL shortener (it keeps links in Redis): no --redis address given")
	} else {
		if err := loopbackOnly("Redis", opts.Redis); err != nil {
			return nil, nil, err
		}
		cases = append(cases, shortenerCases(env, opts.Redis)...)
		m.Redis = redisVersion(ctx, opts.Redis)
		cases = append(cases, redisLeaseCase(env, opts.Redis))
	}
	cases = append(cases, flickrLoadCase(env, servers))
	return cases, skipped, nil
}
