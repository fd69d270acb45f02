// Package mysql leases blocks of IDs from a Flickr-style set of MySQL/MariaDB ticket servers: server i
// issues only IDs ≡ offset_i (mod increment), where increment and offset are the server's own
// auto_increment settings, so two servers never issue the same ID and either can serve alone.
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
	"github.com/ticketd/ticketd/schema"
)

// Config configures a Store. The zero value of each field means its default; a negative
// number is refused with allocator.ErrInvalidConfig naming the field.
type Config struct {
	// DSNs are go-sql-driver DSNs, one per ticket server (two for the Flickr pair). Required.
	// interpolateParams=true is added so that a lease is a single round trip.
	DSNs []string
	// Names are the servers' names in blocks, logs and metrics. Default: each DSN's host:port.
	Names []string
	// Failover holds the fields every backend of several servers shares: timeouts, backoff, the
	// intervals of the background checks and the water marks, the settings cache and the pool size.
	allocator.Failover
	// Migrate applies the schema on each server when it is first checked. Default false: run
	// `ticketd migrate` (schema.Migrate) once instead.
	Migrate bool
	// Logger receives warnings about servers going down and coming back. Default slog.Default().
	Logger *slog.Logger
	// Observer, if set, sees every lease attempt.
	Observer allocator.Observer
	// Connectors, when set, reach the servers instead of DSNs, one per server in the same order, with
	// Names: a seam for a simulation of the servers, which answers the statements of this package.
	Connectors []driver.Connector
	// Runtime is the clock, randomness and background work of the servers' failover set and of
	// every wait (see allocator.Runtime). Default the real ones.
	Runtime allocator.Runtime

	now func() time.Time
	// beforeChange runs before each server takes a namespace change (see failover.Config), and
	// marksWriting as each background write of the water marks begins: seams for tests.
	beforeChange func(server string)
	marksWriting func()
}

func (c Config) withDefaults() Config {
	c.Failover = c.Failover.WithDefaults()
	allocator.Default(&c.Logger, slog.Default())
	if c.now == nil {
		c.now = c.Runtime.Now
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.Runtime.Now = c.now
	c.Runtime = c.Runtime.WithDefaults()
	return c
}

// validate checks what withDefaults cannot fill in: the servers, and no negative field.
func (c Config) validate() error {
	if len(c.Connectors) > 0 {
		if len(c.DSNs) != 0 || len(c.Names) != len(c.Connectors) {
			return fmt.Errorf("%w: mysql: %d connectors need as many names and no DSN (%d names, %d DSNs)",
				allocator.ErrInvalidConfig, len(c.Connectors), len(c.Names), len(c.DSNs))
		}
		return c.Failover.Check("mysql.Config")
	}
	if len(c.DSNs) == 0 {
		return fmt.Errorf("%w: mysql: no ticket server DSN given", allocator.ErrInvalidConfig)
	}
	if len(c.Names) != 0 && len(c.Names) != len(c.DSNs) {
		return fmt.Errorf("%w: mysql: %d names for %d servers", allocator.ErrInvalidConfig, len(c.Names), len(c.DSNs))
	}
	return c.Failover.Check("mysql.Config")
}

// Store is a set of ticket servers (two for Flickr's odd/even pair) behind the allocator.Backend
// interface. Leases go round-robin across usable servers; a failed server is skipped with backoff,
// checked again before its next lease, and any server alone can serve. Safe for concurrent use.
//
// Lease, LeaseFrom, Namespace, Settings, Namespaces, Servers and Health come from the servers' failover
// set (failover.Front): each lease attempt is one UPDATE, and a server that lacks a namespace's row is
// given it first.
type Store struct {
	failover.Front[*server, rowSettings]
	cfg Config
	set *failover.Set[*server, rowSettings] // the servers, their health, failover and cached settings
	// kickGuard runs the restored-backup guard soon (see guard); nil until Open starts it.
	kickGuard func()
}

var _ allocator.Backend = (*Store)(nil)
var _ allocator.HealthReporter = (*Store)(nil)
var _ allocator.SettingsReader = (*Store)(nil)

// Open connects to every server, checks each reachable one (see server.verify), and refuses to start
// when the servers' settings conflict (they could issue the same ID). A server that is down, fenced,
// or refused for its own settings is left out with the reason, and checked again before its first
// lease; the others serve. Open fails with ErrUnavailable (wrapping each server's reason) when no
// server can serve.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	p, err := build(cfg)
	if err != nil {
		return nil, err
	}
	cfg = p.cfg

	// Check every server in parallel; a server that does not answer is left for later, and one whose own
	// settings are wrong (or, on Galera, that is not Synced) is left out with the reason while the
	// others serve. Settings that conflict between servers refuse the whole set: which one is wrong is
	// for an operator to say.
	errs := p.set.InParallel(func(s *server) error { _, err := s.inspect(ctx); return err })
	reachable := 0
	for i, s := range p.set.All() {
		switch {
		case errs[i] == nil:
			reachable++
		case errors.Is(errs[i], allocator.ErrMisconfigured), errors.Is(errs[i], errNotSynced):
			cfg.Logger.Warn("ticket server refused at start; serving from the others", "server", s.Name(), "err", errs[i])
			s.MarkDown(errs[i])
		default:
			cfg.Logger.Warn("ticket server unreachable at start; serving from the others", "server", s.Name(), "err", errs[i])
			s.MarkDown(errs[i])
		}
	}
	if err := p.crossCheck(nil, serverVars{}, errs); err != nil {
		p.closeDBs()
		return nil, err
	}
	if reachable == 0 {
		p.closeDBs()
		return nil, fmt.Errorf("%w: no server of %s answered and passed its checks: %w", allocator.ErrUnavailable, p.names(), errors.Join(errs...))
	}
	// Each server is checked twice: a server checked early could not see the rows of those checked
	// after it, nor take its missed changes from them.
	failed := make([]error, len(p.set.All()))
	for pass := range 2 {
		for i, s := range p.set.All() {
			if errs[i] != nil || (pass == 1 && !s.Usable()) {
				continue
			}
			err := s.admit(ctx)
			failed[i] = err
			switch {
			case err == nil:
			case errors.Is(err, allocator.ErrFenced), errors.Is(err, allocator.ErrMisconfigured):
				// A fenced or misconfigured server does not stop the process: the others serve, and its
				// health says why it is out, so that an operator can look. (Settings that conflict
				// between servers were refused above.)
			default:
				cfg.Logger.Warn("ticket server failed its checks at start; serving from the others", "server", s.Name(), "err", err)
			}
		}
	}
	usable, fenced := 0, 0
	for _, s := range p.set.All() {
		if s.Usable() {
			usable++
		} else if s.reachable() {
			fenced++
		}
	}
	if usable+fenced == 0 {
		p.closeDBs()
		return nil, fmt.Errorf("%w: no ticket server of %s passed its checks: %w", allocator.ErrUnavailable, p.names(), errors.Join(append(failed, errs...)...))
	}
	p.set.Every(p.cfg.ProbeInterval, p.probe)
	p.kickGuard = p.set.Every(p.cfg.WatermarkInterval, p.guard)
	return p, nil
}

func (p *Store) names() string { return strings.Join(p.set.Names(), ", ") }

// crossCheck compares auto_increment settings: one increment for all, a distinct offset each, and an
// increment no smaller than the number of servers. With a candidate, its settings v are compared with
// the settings every other server last passed its checks with — also a server that is down now, since
// it comes back with its offset. Without one (at Open), the settings of every server that answered are
// compared, but for those refused for their own settings (refused[i] non-nil): those are left out until
// they pass.
func (p *Store) crossCheck(candidate *server, v serverVars, refused []error) error {
	var list []namedVars
	if candidate != nil {
		list = append(list, namedVars{candidate.Name(), v})
	}
	for i, s := range p.set.All() {
		if s == candidate || (candidate == nil && refused[i] != nil) {
			continue
		}
		if c := s.view(); c != nil && candidate != nil {
			list = append(list, namedVars{s.Name() + " (as it last passed its checks)", *c})
		} else if c != nil {
			list = append(list, namedVars{s.Name(), *c})
		} else if seen, ok := s.vars(); ok && candidate == nil {
			list = append(list, namedVars{s.Name(), seen})
		}
	}
	return errors.Join(crossProblems(list, len(p.set.All()))...)
}

// probe retries servers that are down, so that health (and /readyz) recovers without lease traffic, and
// pings the servers that are up: a server that restarted is only reached through new connections, and
// each new connection is verified (see verifyingConnector), so a restart — or a restore — is noticed
// even when no lease is asking.
func (p *Store) probe() {
	for _, s := range p.set.All() {
		ctx, cancel := p.cfg.Runtime.Timeout(context.Background(), p.cfg.AttemptTimeout)
		switch {
		case s.Usable():
			if err := s.db.PingContext(ctx); err != nil && !p.set.Closed() {
				s.MarkDown(err)
			}
		case s.Due(p.cfg.now()):
			_ = s.Revive(ctx)
		}
		cancel()
	}
}

// Close stops background checks, writes the water marks one last time and closes every connection
// pool. Safe to call twice.
func (p *Store) Close() error {
	p.set.CloseRecording(p.writeWatermarks, p.closeDBs)
	return nil
}

func (p *Store) closeDBs() {
	for _, s := range p.set.All() {
		_ = s.db.Close()
		_ = s.ctl.Close()
	}
}

// ensureRow creates a namespace's row, with the settings of rec, on a checked server that lacks it.
func (s *server) ensureRow(ctx context.Context, rec rowSettings) error {
	v := s.view()
	if v == nil {
		return fmt.Errorf("%s: %w", s.Name(), errNotChecked)
	}
	created, err := s.insertRow(ctx, *v, rec, 0)
	if created {
		s.pair.cfg.Logger.Info("namespace row created on a server that missed it", "server", s.Name(), "namespace", rec.ns.Name)
	}
	return err
}

// CreateNamespace creates the namespace's row on every usable server. A server that is down gets its
// row when it comes back (or at its first lease). ErrExists when every server that answered had it.
func (p *Store) CreateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	return p.set.CreateNamespace(ctx, ns, func(ctx context.Context, s *server) bool {
		return s.Usable() || s.Revive(ctx) == nil // a server in backoff is checked again now
	}, func(ctx context.Context, s *server, c failover.Change[rowSettings]) (bool, error) {
		v := s.view()
		if v == nil {
			return false, fmt.Errorf("%s: %w", s.Name(), errNotChecked)
		}
		return s.insertRow(ctx, *v, change(c.Namespace, c.UpdatedUS), 0)
	})
}

// UpdateNamespace replaces the namespace's settings (zero fields mean their defaults) on every usable
// server. A Start above the namespace's own becomes its start and advances every counter below it;
// counters never move back. A server that is down catches up when it comes back.
func (p *Store) UpdateNamespace(ctx context.Context, ns allocator.Namespace) (allocator.Namespace, error) {
	return p.set.UpdateNamespace(ctx, ns, p.serverStates, func(ctx context.Context, s *server, c failover.Change[rowSettings]) error {
		v := s.view()
		if v == nil {
			return fmt.Errorf("%s: %w", s.Name(), errNotChecked)
		}
		start := max(c.Namespace.Start, c.Advance)
		rec := change(c.Namespace, c.UpdatedUS)
		err := s.updateRow(ctx, *v, rec, start)
		if errors.Is(err, errRowMissing) {
			// Created while this server was down: create it now with the new settings.
			if err = s.ensureRow(ctx, rec); err == nil {
				err = s.updateRow(ctx, *v, rec, start)
			}
		}
		return err
	})
}

// serverStates reads each server's counter of each namespace, one query per server and namespace.
func (p *Store) serverStates(ctx context.Context, names []string) map[string][]allocator.ServerState {
	out := make(map[string][]allocator.ServerState, len(names))
	servers := p.set.All()
	all := make([]allocator.ServerState, 0, len(names)*len(servers)) // one array: a slice of it per name
	for i, name := range names {
		out[name] = all[i*len(servers) : i*len(servers) : (i+1)*len(servers)]
	}
	for _, s := range servers {
		h := s.Health()
		base := allocator.ServerState{Server: s.Name(), Step: h.Step, Offset: h.Offset, Healthy: h.Healthy, Error: h.Error, Replication: h.Replication}
		var next []int64 // the server's counters of names, read at once; nil when not read
		var found []bool
		var rerr error
		if h.Healthy {
			next, found, rerr = s.countersOf(ctx, names, h.Offset)
		}
		for i, name := range names {
			st := base
			if h.Healthy {
				switch {
				case rerr != nil:
					st.Healthy, st.Error = false, rerr.Error()
				case found[i]:
					st.Next = next[i]
				default:
					st.Error = "no row for this namespace yet (created at its first lease)"
				}
			}
			out[name] = append(out[name], st)
		}
	}
	return out
}

// countersOf reads the server's counters (of the given offset) of the namespaces named: next[i] is
// names[i]'s, when found[i]. One statement for one namespace, or for all of them (a listing reads every
// row at once, never one statement per namespace), the name and counter of one row at a time: the
// headroom of /metrics reads every namespace's every 10 s.
func (s *server) countersOf(ctx context.Context, names []string, offset int64) (next []int64, found []bool, err error) {
	next, found = make([]int64, len(names)), make([]bool, len(names))
	if len(names) == 1 {
		r, err := s.readRow(ctx, names[0], offset)
		switch {
		case errors.Is(err, errRowMissing):
			return next, found, nil
		case err != nil:
			return nil, nil, err
		}
		next[0], found[0] = r.next, true
		return next, found, nil
	}
	index := make(map[string]int, len(names))
	for i, name := range names {
		index[name] = i
	}
	err = s.eachCounter(ctx, offset, func(name sql.RawBytes, counter int64) {
		if i, ok := index[string(name)]; ok {
			next[i], found[i] = counter, true
		}
	})
	return next, found, err
}

// eachCounter calls fn with the name and counter of every row of the server of the given offset, in
// the order of their names, one row at a time: name is the driver's bytes, valid until fn returns (a
// string scanned would be a copy, and a list of rows allocations a namespace).
func (s *server) eachCounter(ctx context.Context, offset int64, fn func(name sql.RawBytes, next int64)) error {
	rows, err := s.ctl.QueryContext(ctx, "SELECT name, next_id FROM ticketd_namespaces WHERE id_offset = ? ORDER BY name", offset)
	if err != nil {
		return err
	}
	defer rows.Close()
	var name sql.RawBytes
	var next int64
	for rows.Next() {
		if err := rows.Scan(&name, &next); err != nil {
			return err
		}
		fn(name, next)
	}
	return rows.Err()
}

// Migrate applies the schema on every server; all must answer.
func (p *Store) Migrate(ctx context.Context) error {
	for _, s := range p.set.All() {
		if _, err := schema.Migrate(ctx, s.ctl); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	return nil
}

// ServerName is the name a server gets from its DSN when Config.Names is empty: its host:port.
func ServerName(dsn string) string {
	mc, err := mysql.ParseDSN(strings.TrimSpace(dsn))
	if err != nil {
		return "?"
	}
	return mc.Addr
}

// MigrateDSN applies the schema to the database of one DSN.
func MigrateDSN(ctx context.Context, dsn string) ([]int, error) {
	db, err := sql.Open("mysql", strings.TrimSpace(dsn))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ServerName(dsn), err)
	}
	defer db.Close()
	applied, err := schema.Migrate(ctx, db)
	if err != nil {
		return applied, fmt.Errorf("%s: %w", ServerName(dsn), err)
	}
	return applied, nil
}

// build makes a Store with a connection pool per server and checks nothing.
func build(cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Store{cfg: cfg}
	p.set = failover.NewSet[*server, rowSettings](failover.Config{
		Noun: "ticket server", Every: "every server",
		Failover: cfg.Failover, IsFault: failover.IsServerFault, Logger: cfg.Logger, Observer: cfg.Observer, Now: cfg.now,
		Runtime: cfg.Runtime, CheckCeiling: p.checkCeiling, BeforeChange: cfg.beforeChange,
	})
	p.Front = failover.NewFront(p.set, func(ctx context.Context, s *server, r rowSettings, size int64) (allocator.Block, error) {
		return s.lease(ctx, r.ns, size)
	}, func(ctx context.Context, s *server, r rowSettings) error { return s.ensureRow(ctx, r) }, errRowMissing, p.serverStates)
	if len(cfg.Connectors) > 0 {
		for i, conn := range cfg.Connectors {
			p.add(cfg.Names[i], conn)
		}
		return p, nil
	}
	seen := map[string]bool{}
	for i, dsn := range cfg.DSNs {
		mc, err := mysql.ParseDSN(strings.TrimSpace(dsn))
		if err != nil {
			p.closeDBs()
			return nil, fmt.Errorf("%w: mysql: server %d: bad DSN: %w", allocator.ErrInvalidConfig, i+1, err)
		}
		name := mc.Addr
		if len(cfg.Names) > 0 {
			name = cfg.Names[i]
		}
		if seen[name] {
			p.closeDBs()
			return nil, fmt.Errorf("%w: mysql: server %q is listed twice; each ticket server once", allocator.ErrInvalidConfig, name)
		}
		seen[name] = true
		mc.InterpolateParams = true // one round trip per lease (no prepare/execute/close)
		allocator.Default(&mc.Timeout, cfg.AttemptTimeout)
		allocator.Default(&mc.ReadTimeout, 2*cfg.AttemptTimeout)
		allocator.Default(&mc.WriteTimeout, 2*cfg.AttemptTimeout)
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			p.closeDBs()
			return nil, fmt.Errorf("mysql: server %s: %w", name, err)
		}
		p.add(name, conn)
	}
	return p, nil
}

// add appends the server named, reached through conn.
func (p *Store) add(name string, conn driver.Connector) {
	s := &server{Member: p.set.NewMember(name), pair: p}
	s.db = sql.OpenDB(verifyingConnector{Connector: conn, s: s})
	s.db.SetMaxOpenConns(p.cfg.MaxConns)
	s.db.SetMaxIdleConns(p.cfg.MaxConns)
	s.db.SetConnMaxLifetime(30 * time.Minute)
	s.ctl = sql.OpenDB(conn)
	s.ctl.SetMaxOpenConns(4)
	s.ctl.SetMaxIdleConns(2)
	s.ctl.SetConnMaxLifetime(30 * time.Minute)
	p.set.Add(s)
}

// RouteDriverLogs sends go-sql-driver's own log lines (dropped connections and the like, which the pair
// already reports as server health) to l at debug level instead of stderr. The driver keeps one logger
// per process, so a program calls this, never a library.
func RouteDriverLogs(l *slog.Logger) { _ = mysql.SetLogger(driverLog{l}) }

type driverLog struct{ l *slog.Logger }

func (d driverLog) Print(v ...any) {
	d.l.Debug(strings.TrimSpace(fmt.Sprint(v...)), "source", "go-sql-driver")
}

// olderLeaseWindow is how far back a lease by a process of an older release keeps a ceiling from being
// set: such a process writes its lease rates every water-mark interval while it leases.
const olderLeaseWindow = time.Minute

// checkCeiling refuses to set a ceiling (a namespace created with one, or a lower one) while a ticketd
// of an older release leases the namespace: it writes ticketd_lease_rates.updated_us, which this
// release leaves alone, and ignores max_id (before schema 5) or keeps only its own row's (before 6).
// Every server that answers is asked.
func (p *Store) checkCeiling(ctx context.Context, namespace string) error {
	since := p.cfg.now().Add(-olderLeaseWindow).UnixMicro()
	var seen []string
	for _, s := range p.set.All() {
		if !s.reachable() {
			continue
		}
		var n int
		var last sql.NullInt64
		err := s.ctl.QueryRowContext(ctx, "SELECT COUNT(*), MAX(updated_us) FROM ticketd_lease_rates WHERE namespace = ? AND updated_us > ?",
			namespace, since).Scan(&n, &last)
		if err != nil {
			return fmt.Errorf("%w: setting a ceiling on %q needs every ticket server in rotation to answer, to see whether a ticketd of an older release leases it, and %s did not: %w; run the change again once it answers",
				allocator.ErrUnavailable, namespace, s.Name(), err)
		}
		if n > 0 {
			seen = append(seen, fmt.Sprintf("%s (last at %s)", s.Name(), time.UnixMicro(last.Int64).UTC().Format(time.RFC3339)))
		}
	}
	if len(seen) == 0 {
		return nil
	}
	return fmt.Errorf("%w: a ticketd of an older release leased namespace %q within the last %s (its lease rates on %s): it does not keep leases below max_id, so no ceiling is set while it runs; replace every ticketd process with this release first (see the upgrade procedure in the docs), then set the ceiling",
		allocator.ErrUnavailable, namespace, olderLeaseWindow, strings.Join(seen, ", "))
}

// Pool is one of a ticket server's connection pools: Use is "lease" (the leases) or "control" (checks,
// settings and water marks).
type Pool struct {
	Server, Use string
	DB          *sql.DB
}

// Pools returns every server's connection pools, for their statistics (sql.DB.Stats).
func (p *Store) Pools() []Pool {
	var out []Pool
	for _, s := range p.set.All() {
		out = append(out, Pool{Server: s.Name(), Use: "lease", DB: s.db}, Pool{Server: s.Name(), Use: "control", DB: s.ctl})
	}
	return out
}
