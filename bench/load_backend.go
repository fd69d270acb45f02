package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/redis"
)

// mysqlLeaseCases lease straight from the MySQL backend, in this process: the pair (or the one
// server --mysql names) at each of leaseSizes, one server of the pair alone, and a Galera cluster when
// --galera names one. servers says what --mysql names, for the cases' names.
func mysqlLeaseCases(ctx context.Context, opts Options, env *mysqlEnv, servers string) ([]loadCase, []string, error) {
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
	return cases, skipped, nil
}

// redisLeaseCase leases blocks of 100 straight from the Redis backend on the instance at addr, under
// a key prefix of its own.
func redisLeaseCase(env *mysqlEnv, addr string) loadCase {
	return leaseCase("Redis lease n=100 (one instance)", 100, env, func(ctx context.Context) (allocator.Backend, func(), error) {
		var r [3]byte
		_, _ = rand.Read(r[:])
		st, err := redis.Open(ctx, redis.Config{Addrs: []string{addr}, KeyPrefix: fmt.Sprintf("ticketd-bench-%x:", r), Logger: env.quiet,
			Failover: allocator.Failover{MaxConns: 128, Timeout: opTimeout, AttemptTimeout: opTimeout / 2}})
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	})
}

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

// redisVersion is the version the Redis server at addr reports, or "" when it does not answer.
func redisVersion(ctx context.Context, addr string) string {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}
