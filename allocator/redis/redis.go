// Package redis leases blocks of IDs from one or more Redis instances: one counter per namespace, moved
// by INCRBY inside a short Lua script. Instance i issues only IDs ≡ offset_i (mod stride), so two
// instances never issue the same ID and any one of them can serve alone, as in Flickr's ticket pair.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// MaxStride bounds Config.Stride.
const MaxStride = 1024

// DefaultKeyPrefix starts every key when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "ticketd:"

// Config configures a Store. The zero value of each field means its default; a negative
// number is refused with allocator.ErrInvalidConfig naming the field.
type Config struct {
	// Addrs are the Redis instances, each "host:port" or a "redis://[user:password@]host:port[/db]"
	// URL. Required. Standalone instances only: each is its own ticket server, never a replica or a
	// Cluster node.
	Addrs []string
	// Names are the instances' names in blocks, logs and metrics. Default: each address's host:port
	// (host:port/db for a database other than 0).
	Names []string
	// Offsets give each instance its residue: instance i issues only IDs ≡ Offsets[i] (mod Stride).
	// Each must be in 1..Stride, and no two alike. Default 1, 2, …, len(Addrs) in the order of Addrs.
	// An instance remembers the offset and stride it first served with and refuses any other.
	Offsets []int64
	// Stride is the distance between two IDs of one instance. Default len(Addrs); at least len(Addrs)
	// and at most MaxStride. A larger stride leaves offsets free for instances added later.
	Stride int64
	// KeyPrefix starts every key the store reads or writes. Default DefaultKeyPrefix.
	KeyPrefix string
	// AllowVolatile opens instances that can lose acknowledged writes: without appendonly yes and
	// appendfsync always, a restart can move a counter back and reissue IDs (so can a maxmemory-policy
	// that evicts any key). Default false: such instances are refused. When true, each is logged.
	AllowVolatile bool
	// Failover holds the fields every backend of several servers shares: timeouts, backoff, the
	// intervals of the background checks and the water marks, the settings cache and the pool size
	// (each instance's).
	allocator.Failover
	// Logger receives warnings about instances going down, coming back, or being volatile.
	// Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, sees every lease attempt.
	Observer allocator.Observer

	now func() time.Time
	// beforeChange runs before each instance takes a namespace change (see failover.Config), and
	// marksWriting as each background write of the water marks begins: seams for tests.
	beforeChange func(server string)
	marksWriting func()
}

func (c Config) withDefaults() Config {
	allocator.Default(&c.Stride, int64(len(c.Addrs)))
	if len(c.Offsets) == 0 {
		for i := range c.Addrs {
			c.Offsets = append(c.Offsets, int64(i+1))
		}
	}
	allocator.Default(&c.KeyPrefix, DefaultKeyPrefix)
	c.Failover = c.Failover.WithDefaults()
	allocator.Default(&c.Logger, slog.Default())
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// validate checks the instance layout (after withDefaults): offsets distinct and within the stride.
func (c Config) validate() error {
	n := int64(len(c.Addrs))
	switch {
	case n == 0:
		return fmt.Errorf("%w: redis: no instance address given", allocator.ErrInvalidConfig)
	case len(c.Names) != 0 && int64(len(c.Names)) != n:
		return fmt.Errorf("%w: redis: %d names for %d instances", allocator.ErrInvalidConfig, len(c.Names), n)
	case int64(len(c.Offsets)) != n:
		return fmt.Errorf("%w: %d offsets for %d Redis instances; give one offset per instance", allocator.ErrMisconfigured, len(c.Offsets), n)
	case c.Stride < n || c.Stride > MaxStride:
		return fmt.Errorf("%w: stride %d must be between the number of Redis instances (%d) and %d", allocator.ErrMisconfigured, c.Stride, n, MaxStride)
	}
	if err := c.Failover.Check("redis.Config"); err != nil {
		return err
	}
	var errs []error
	byOffset := map[int64]string{}
	for i, off := range c.Offsets {
		addr := strings.TrimSpace(c.Addrs[i])
		if off < 1 || off > c.Stride {
			errs = append(errs, fmt.Errorf("%w: offset %d of Redis instance %d is outside 1..%d; give each instance its own offset in 1..%d",
				allocator.ErrMisconfigured, off, i+1, c.Stride, c.Stride))
			continue
		}
		if other, dup := byOffset[off]; dup {
			errs = append(errs, fmt.Errorf("%w: Redis instances %s and %s share offset %d and would issue the same IDs; give each instance its own offset in 1..%d",
				allocator.ErrMisconfigured, redact(other), redact(addr), off, c.Stride))
		}
		byOffset[off] = addr
	}
	return errors.Join(errs...)
}

// redact hides the user name and password of an address: of a redis:// URL, and of an address
// written without a scheme (:PASSWORD@host:port), which is no valid form but is given.
func redact(addr string) string {
	scheme := ""
	if i := strings.Index(addr, "://"); i >= 0 {
		scheme, addr = addr[:i+3], addr[i+3:]
	}
	if j := strings.LastIndex(addr, "@"); j >= 0 {
		return scheme + "…@" + addr[j+1:]
	}
	return scheme + addr
}

// urlProblem says what is wrong with a redis:// URL that does not parse, without its user name or
// password: the parser's own error quotes the whole URL, and may quote part of the password.
func urlProblem(addr string) string {
	bare := addr
	if i := strings.Index(addr, "://"); i >= 0 {
		if j := strings.LastIndex(addr, "@"); j > i {
			bare = addr[:i+3] + addr[j+1:]
		}
	}
	_, err := goredis.ParseURL(bare)
	if err == nil {
		return "the user name or password part is malformed (percent-encode its special characters)"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// clientOptions turns one configured address into go-redis options with ticketd's timeouts.
func clientOptions(addr string, cfg Config) (*goredis.Options, error) {
	addr = strings.TrimSpace(addr)
	var opt *goredis.Options
	if strings.Contains(addr, "://") {
		o, err := goredis.ParseURL(addr)
		if err != nil {
			return nil, fmt.Errorf("%w: redis: %s: %s", allocator.ErrInvalidConfig, redact(addr), urlProblem(addr))
		}
		opt = o
	} else {
		if strings.Contains(addr, "@") {
			return nil, fmt.Errorf("%w: redis: %s: an address with a user name or password takes the URL form, redis://[USER]:PASSWORD@HOST:PORT (not shown here)",
				allocator.ErrInvalidConfig, redact(addr))
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%w: redis: %q: want host:port or a redis:// URL: %w", allocator.ErrInvalidConfig, addr, err)
		}
		opt = &goredis.Options{Addr: addr}
	}
	opt.DialTimeout = cfg.AttemptTimeout
	opt.ReadTimeout = cfg.AttemptTimeout
	opt.WriteTimeout = cfg.AttemptTimeout
	opt.ContextTimeoutEnabled = true
	// An attempt whose outcome is unknown is never repeated on the same instance: the store fails over
	// and a retry takes a new range.
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.PoolSize = cfg.MaxConns
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, nil
}

// keys names the store's keys under one prefix. Namespace names cannot hold ':', so no key of one
// namespace is a key of another.
type keys struct{ prefix string }

func (k keys) identity() string          { return k.prefix + "instance" }
func (k keys) claims() string            { return k.prefix + "claims" }
func (k keys) marks() string             { return k.prefix + "marks" }
func (k keys) rates() string             { return k.prefix + "rates" }
func (k keys) index() string             { return k.prefix + "namespaces" }
func (k keys) local() string             { return k.prefix + "local" }      // this instance's lease counts, never replicated
func (k keys) localMarks() string        { return k.prefix + "localmarks" } // the peers' highest lease counts
func (k keys) leased() string            { return k.prefix + "leased" }     // what every process leased from a peer
func (k keys) windows() string           { return k.prefix + "windows" }    // where the current rate window began
func (k keys) fleet() string             { return k.prefix + "fleetrates" } // the fastest every process together leased
func (k keys) intervals() string         { return k.prefix + "intervals" }  // the longest water-mark interval of the writers
func (k keys) counter(ns string) string  { return k.prefix + "ns:" + ns + ":next" }
func (k keys) settings(ns string) string { return k.prefix + "ns:" + ns + ":settings" }

// Store is a set of Redis instances behind the allocator.Backend interface. Leases go round-robin
// across usable instances; a failed instance is skipped with backoff and checked again before its
// next lease, and any instance alone can serve. Safe for concurrent use.
//
// Lease, LeaseFrom, Namespace, Settings, Namespaces, Servers (host:port, or host:port/db) and Health
// come from the instances' failover set (failover.Front): each lease attempt is one script call, and an
// instance that lacks a namespace is given it first.
type Store struct {
	failover.Front[*instance, record]
	cfg  Config
	keys keys
	set  *failover.Set[*instance, record] // the instances, their health, failover and cached settings
	// kickGuard runs the restored-state guard soon (see guard); nil until Open starts it.
	kickGuard func()
}

var _ allocator.Backend = (*Store)(nil)
var _ allocator.HealthReporter = (*Store)(nil)
var _ allocator.SettingsReader = (*Store)(nil)

// Open connects to every instance and checks each reachable one (see instance.check): it must keep
// acknowledged writes across a restart (unless AllowVolatile), and serve the offset and stride it
// served before, proven exclusive across the set. Any misconfiguration refuses the whole store with
// ErrMisconfigured. An instance that lost its data, or whose counters went back, is fenced and the
// others serve. Instances that are down are checked when they come back, before their first lease;
// Open fails with ErrUnavailable when none passes its checks.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s, err := build(cfg)
	if err != nil {
		return nil, err
	}
	errs := s.set.InParallel(func(in *instance) error { return in.check(ctx) })
	var refused []error
	for i := range s.set.All() {
		if errors.Is(errs[i], allocator.ErrMisconfigured) {
			refused = append(refused, errs[i])
		}
	}
	if len(refused) > 0 {
		s.closeClients()
		return nil, errors.Join(refused...)
	}
	usable, fenced := 0, 0
	for i, in := range s.set.All() {
		switch {
		case errs[i] == nil:
			in.MarkUsable()
			usable++
		case errors.Is(errs[i], allocator.ErrFenced):
			in.MarkDown(errs[i])
			fenced++
		default:
			cfg.Logger.Warn("Redis instance not usable at start; serving from the others", "server", in.Name(), "err", errs[i])
			in.MarkDown(errs[i])
		}
	}
	if usable+fenced == 0 {
		s.closeClients()
		return nil, fmt.Errorf("%w: no Redis instance of %s passed its checks: %w", allocator.ErrUnavailable, s.names(), errors.Join(errs...))
	}
	// Instances that missed namespace changes while they were away catch up from the others (those
	// checked early could not see the ones checked after them).
	for _, in := range s.set.All() {
		if in.Usable() {
			if err := in.catchUp(ctx); err != nil {
				cfg.Logger.Warn("could not copy namespaces from the other Redis instances", "server", in.Name(), "err", err)
			}
		}
	}
	s.set.Every(cfg.ProbeInterval, s.probe)
	s.kickGuard = s.set.Every(cfg.WatermarkInterval, s.guard)
	return s, nil
}

// build makes a Store with a client per instance and checks nothing.
func build(cfg Config) (*Store, error) {
	s := &Store{cfg: cfg, keys: keys{cfg.KeyPrefix}, set: failover.NewSet[*instance, record](failover.Config{
		Noun: "Redis instance", Every: "every Redis instance",
		Failover: cfg.Failover, ReviveToRead: true, IsFault: isServerFault, Logger: cfg.Logger, Observer: cfg.Observer, Now: cfg.now,
		BeforeChange: cfg.beforeChange,
	})}
	s.Front = failover.NewFront(s.set, func(ctx context.Context, in *instance, rec record, size int64) (allocator.Block, error) {
		return in.lease(ctx, rec, size)
	}, func(ctx context.Context, in *instance, rec record) error { return in.ensure(ctx, rec) }, errMissing, s.serverStates)
	seen := map[string]bool{}
	for i, addr := range cfg.Addrs {
		opt, err := clientOptions(addr, cfg)
		if err != nil {
			s.closeClients()
			return nil, err
		}
		name := opt.Addr
		if opt.DB != 0 {
			name = fmt.Sprintf("%s/%d", opt.Addr, opt.DB)
		}
		if len(cfg.Names) > 0 {
			name = cfg.Names[i]
		}
		if seen[name] {
			s.closeClients()
			return nil, fmt.Errorf("%w: redis: instance %s is listed twice; list each instance once", allocator.ErrInvalidConfig, name)
		}
		seen[name] = true
		s.set.Add(&instance{Member: s.set.NewMember(name), client: goredis.NewClient(opt), offset: cfg.Offsets[i], store: s})
	}
	return s, nil
}

func (s *Store) names() string { return strings.Join(s.set.Names(), ", ") }

// probe retries instances that are down, so that health recovers without lease traffic.
func (s *Store) probe() {
	for _, in := range s.set.All() {
		if in.Usable() || !in.Due(s.cfg.now()) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*s.cfg.AttemptTimeout)
		_ = in.Revive(ctx)
		cancel()
	}
}

// Close stops background checks, writes the water marks one last time and closes every connection
// pool. Safe to call twice.
func (s *Store) Close() error {
	s.set.CloseRecording(s.writeMarks, s.closeClients)
	return nil
}

func (s *Store) closeClients() {
	for _, in := range s.set.All() {
		_ = in.client.Close()
	}
}

// isServerFault reports whether err says the instance (or the way to it) failed, rather than the
// request. Lacking a namespace is not a fault: the instance is given it (see failover.Front).
func isServerFault(err error) bool {
	return !errors.Is(err, errMissing) && failover.IsServerFault(err)
}

// CreateNamespace creates the namespace on every usable instance. An instance that is down gets it
// when it comes back (or at its first lease). ErrExists when every instance that answered had it.
func (s *Store) CreateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	ns.Servers = nil
	return s.set.CreateNamespace(ctx, ns, func(ctx context.Context, in *instance) bool {
		return in.Usable() || (in.Due(s.cfg.now()) && in.Revive(ctx) == nil) // else it gets the namespace when it comes back
	}, func(ctx context.Context, in *instance, c failover.Change[record]) (bool, error) {
		return in.create(ctx, change(c.Namespace, 0, c.UpdatedUS), 0)
	})
}

// UpdateNamespace replaces the namespace's settings (zero fields mean their defaults) on every usable
// instance. A Start above an instance's counter advances the counter; counters never move back.
// Instances that are down catch up when they come back.
func (s *Store) UpdateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	ns.Servers = nil
	return s.set.UpdateNamespace(ctx, ns, s.serverStates, func(ctx context.Context, in *instance, c failover.Change[record]) error {
		return in.update(ctx, change(c.Namespace, max(c.Current.floor, c.Advance), c.UpdatedUS))
	})
}

// serverStates reads each instance's counter of each namespace, one round trip per instance.
func (s *Store) serverStates(ctx context.Context, names []string) map[string][]allocator.ServerState {
	out := make(map[string][]allocator.ServerState, len(names))
	for _, in := range s.set.All() {
		h := in.Health()
		base := allocator.ServerState{Server: in.Name(), Step: s.cfg.Stride, Offset: in.offset, Healthy: h.Healthy, Error: h.Error}
		var counters []*goredis.StringCmd
		var perr error
		if h.Healthy && len(names) > 0 {
			pipe := in.client.Pipeline()
			for _, name := range names {
				counters = append(counters, pipe.Get(ctx, s.keys.counter(name)))
			}
			if _, perr = pipe.Exec(ctx); errors.Is(perr, goredis.Nil) {
				perr = nil // a missing counter is reported per namespace below
			}
		}
		for i, name := range names {
			st := base
			switch {
			case !h.Healthy:
			case perr != nil:
				st.Healthy, st.Error = false, perr.Error()
			default:
				v, err := counters[i].Int64()
				switch {
				case err == nil:
					st.Next = v
				case errors.Is(err, goredis.Nil):
					st.Error = "no counter for this namespace yet (created at its first lease)"
				default:
					st.Healthy, st.Error = false, err.Error()
				}
			}
			out[name] = append(out[name], st)
		}
	}
	return out
}

// RouteClientLogs sends the go-redis client's own log lines (failed dials and the like, which the store
// already reports as instance health) to l at debug level instead of stderr. go-redis keeps one logger
// per process, so a program calls this, never a library.
func RouteClientLogs(l *slog.Logger) { goredis.SetLogger(clientLog{l}) }

type clientLog struct{ l *slog.Logger }

func (c clientLog) Printf(ctx context.Context, format string, v ...any) {
	c.l.DebugContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}

// PoolStats returns each instance's connection pool statistics, by instance name.
func (s *Store) PoolStats() map[string]*goredis.PoolStats {
	out := map[string]*goredis.PoolStats{}
	for _, in := range s.set.All() {
		out[in.Name()] = in.client.PoolStats()
	}
	return out
}
