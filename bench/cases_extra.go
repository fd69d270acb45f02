package bench

import "context"

// extraLoadCases are the cases that need the Redis backend and the HTTP service.
func extraLoadCases(_ context.Context, opts Options, _ *mysqlEnv, _ *Machine) ([]loadCase, []string, error) {
	skipped := []string{
		"HTTP leases, cache on and off: the HTTP service is not in this build",
	}
	if opts.Redis == "" {
		skipped = append(skipped, "MySQL vs Redis: no --redis address given")
	} else {
		skipped = append(skipped, "MySQL vs Redis: the Redis backend is not in this build")
	}
	return nil, skipped, nil
}
