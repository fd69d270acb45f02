package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/embedded"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/internal/cliflag"
)

// backendFlags choose and open the ticket backend: the MySQL pair when --mysql is given, Redis
// instances when --redis is given, otherwise the embedded store in --data-dir.
type backendFlags struct {
	mysql          string
	redis          string
	allowVolatile  bool
	dataDir        string
	timeout        time.Duration
	attemptTimeout time.Duration
	migrate        bool
	create         string

	// reads is set by the commands that only read: with no server configured they never make an
	// embedded store, and say there is none. writes is set by those that lease or create: they say
	// on stderr which embedded store they use.
	reads, writes bool
}

// backendUse says which backend flags a command takes beyond --mysql: a command's help lists only the
// flags it uses.
type backendUse uint8

const (
	useRedis    backendUse = 1 << iota // it runs on Redis too: --redis, --allow-volatile-redis
	useEmbedded                        // it runs on the embedded store: --data-dir
	useTimeouts                        // it leases or reads through the servers: --lease-timeout, --attempt-timeout
	useMigrate                         // it opens the pair: --auto-migrate
	useCreate                          // it leases: --create-namespaces
)

// useStore is what every command that reads or writes namespaces on any backend takes.
const useStore = useRedis | useEmbedded | useTimeouts | useMigrate

func (b *backendFlags) register(fs *flag.FlagSet, use backendUse) {
	b.dataDir, b.timeout, b.attemptTimeout, b.create = "ticketd-data", 5*time.Second, 2*time.Second, "auto"
	fs.StringVar(&b.mysql, "mysql", "", "comma-separated DSNs of the MySQL/MariaDB ticket servers, e.g. 'ticketd:pw@tcp(db-a:3306)/ticketd,ticketd:pw@tcp(db-b:3306)/ticketd'"+
		map[bool]string{true: "; empty uses the embedded store", false: ""}[use&useEmbedded != 0])
	if use&useRedis != 0 {
		fs.StringVar(&b.redis, "redis", "", "comma-separated Redis instances (host:port or redis://[user:password@]host:port[/db]), e.g. 'redis-a:6379,redis-b:6379'; instance i issues IDs ≡ i (mod the number of instances)")
		fs.BoolVar(&b.allowVolatile, "allow-volatile-redis", false, "open Redis instances that can lose acknowledged writes (appendonly not yes or appendfsync not always): a restart may then reissue IDs")
	}
	if use&useEmbedded != 0 {
		fs.StringVar(&b.dataDir, "data-dir", "ticketd-data", "directory of the embedded store, used when neither --mysql nor --redis is given")
	}
	if use&useTimeouts != 0 {
		fs.DurationVar(&b.timeout, "lease-timeout", 5*time.Second, "how long a lease may take, failover to the other ticket servers included")
		fs.DurationVar(&b.attemptTimeout, "attempt-timeout", 2*time.Second, "how long one attempt on one ticket server may take")
	}
	if use&useCreate != 0 {
		fs.StringVar(&b.create, "create-namespaces", "auto", "create a missing namespace with default settings at its first lease: on, off, or auto (on for the embedded store, off with --mysql or --redis)")
	}
	if use&useMigrate != 0 {
		fs.BoolVar(&b.migrate, "auto-migrate", false, "apply the schema on each ticket server when it is first checked (otherwise run 'ticketd migrate' once)")
	}
}

func (b *backendFlags) validate() error {
	if b.timeout < 10*time.Millisecond || b.timeout > 10*time.Minute {
		return usagef("--lease-timeout %s must be between 10ms and 10m", b.timeout)
	}
	if b.attemptTimeout < 10*time.Millisecond || b.attemptTimeout > b.timeout {
		return usagef("--attempt-timeout %s must be between 10ms and --lease-timeout (%s)", b.attemptTimeout, b.timeout)
	}
	switch b.create {
	case "auto", "on", "off":
	default:
		return usagef("--create-namespaces %q must be on, off or auto", b.create)
	}
	if b.mysql != "" && b.redis != "" {
		return usagef("--mysql and --redis both given; choose one ticket backend")
	}
	if b.redis != "" && len(cliflag.SplitList(b.redis)) == 0 {
		return usagef("--redis %q names no instance", b.redis)
	}
	if b.kind() == "embedded" && strings.TrimSpace(b.dataDir) == "" {
		return usagef("--data-dir must not be empty when neither --mysql nor --redis is given")
	}
	return nil
}

// kind names the chosen backend: mysql, redis or embedded.
func (b *backendFlags) kind() string {
	switch {
	case b.mysql != "":
		return "mysql"
	case b.redis != "":
		return "redis"
	}
	return "embedded"
}

func (b *backendFlags) dsns() []string { return cliflag.SplitList(b.mysql) }

// createOnLease reports whether a lease may create its namespace.
func (b *backendFlags) createOnLease() bool {
	return b.create == "on" || (b.create == "auto" && b.kind() == "embedded")
}

// mysqlConfig is the pair's configuration from the flags.
func (b *backendFlags) mysqlConfig(logger *slog.Logger, obs allocator.Observer) mysql.Config {
	return mysql.Config{DSNs: b.dsns(), Failover: b.failover(),
		Migrate: b.migrate, Logger: logger, Observer: obs}
}

// redisConfig is the Redis store's configuration from the flags.
func (b *backendFlags) redisConfig(logger *slog.Logger, obs allocator.Observer) redis.Config {
	return redis.Config{Addrs: cliflag.SplitList(b.redis), AllowVolatile: b.allowVolatile,
		Failover: b.failover(), Logger: logger, Observer: obs}
}

// failover is the timeouts from the flags, the same for every backend of several servers.
func (b *backendFlags) failover() allocator.Failover {
	return allocator.Failover{Timeout: b.timeout, AttemptTimeout: b.attemptTimeout}
}

// routeClientLogs sends the chosen backend's client library logs (the MySQL driver's, go-redis's) to
// logger, at debug level, before any connection is made: otherwise they print raw lines of their own
// ("redis: … pool.go:…") ahead of ticketd's error, which says the same once and clearly.
func (b *backendFlags) routeClientLogs(logger *slog.Logger) {
	switch b.kind() {
	case "mysql":
		mysql.RouteDriverLogs(logger)
	case "redis":
		redis.RouteClientLogs(logger)
	}
}

// open opens the chosen backend and registers it to be closed with m.
func (b *backendFlags) open(ctx context.Context, m *Main, logger *slog.Logger, obs allocator.Observer) (allocator.Backend, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	b.routeClientLogs(logger)
	var be allocator.Backend
	switch b.kind() {
	case "mysql":
		p, err := mysql.Open(ctx, b.mysqlConfig(logger, obs))
		if err != nil {
			return nil, err
		}
		be = p
	case "redis":
		s, err := redis.Open(ctx, b.redisConfig(logger, obs))
		if err != nil {
			return nil, err
		}
		be = s
	default:
		path := filepath.Join(b.dataDir, embedded.FileName)
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		if _, err := os.Stat(path); b.reads && errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no ticket servers given (--mysql, --redis or $TICKETD_MYSQL, $TICKETD_REDIS), and no embedded store at %s: "+
				"give the servers, or --data-dir where a store is (ticketd lease and ticketd serve make one when no server is given)", path)
		}
		if b.writes {
			fmt.Fprintf(m.Stderr, "ticketd: no ticket servers given (--mysql or --redis): using the embedded store %s\n", path)
		}
		s, err := embedded.Open(embedded.Config{Dir: b.dataDir})
		if err != nil {
			return nil, err
		}
		be = s
	}
	m.onClose(be.Close)
	return be, nil
}
