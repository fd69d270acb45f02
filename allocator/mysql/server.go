package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
	"github.com/ticketd/ticketd/schema"
)

// errRowMissing means the server has no row for a namespace that exists on another server.
var errRowMissing = errors.New("mysql: namespace row missing on this server")

// serverVars are the settings that decide which IDs a server may issue and whether they survive a crash.
type serverVars struct {
	increment, offset int64
	flushAtCommit     int64
	logBin            bool
	syncBinlog        int64
	version           string
	readOnly          bool
	// galera is whether the server is a Galera node (wsrep_on), autoIncrementControl whether Galera
	// sets the auto_increment settings itself (wsrep_auto_increment_control).
	galera, autoIncrementControl bool
	// identity tells this server from another at its address: its @@server_id, which a replica must
	// have of its own to replicate, so a replica promoted in the server's place answers with another.
	identity string
}

// server is one ticket server and what the pair knows of it. Safe for concurrent use.
type server struct {
	*failover.Member // in rotation or not, and why: the failover state every backend keeps alike

	db   *sql.DB // leases; every new connection is verified first (see verifySince)
	ctl  *sql.DB // checks, settings and water marks; never hooked, so checks cannot deadlock on db
	pair *Store

	verifyMu   sync.Mutex // one verification at a time
	verifiedAt time.Time  // when the last successful verification started
	verifiedOK bool
	// run is the run of the server (see incarnation) the last verification in full passed on, or one
	// a connection's check found it still in since; nil when none is known.
	run *incarnation

	// checked holds the settings the last passed verification established: a lease takes them once and
	// builds its statement and its blocks from them, and the statement itself requires the row to still
	// have that step and offset. Replaced only when a verification with other settings passes.
	checked atomic.Pointer[serverVars]

	mu       sync.Mutex
	seen     serverVars // the settings as last read, passed or not (for health and the checks at Open)
	haveSeen bool
	repl     replication // how the server replicates, as last read
	fence    failover.Fence

	marks  failover.Floors     // the highest counters seen on this server, here and by the peers
	stored failover.MarkWrites // whether this process's marks of the other servers reach this one

	co coalescer // concurrent leases of one namespace share one UPDATE
}

// vars returns the settings as last read.
func (s *server) vars() (serverVars, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen, s.haveSeen
}

func (s *server) inspected() bool {
	_, ok := s.vars()
	return ok
}

// view returns the settings the last passed verification established, or nil before the first.
func (s *server) view() *serverVars { return s.checked.Load() }

// publish makes v the settings leases use, keeping the current view when nothing changed (so that a
// lease group formed under it still runs).
func (s *server) publish(v serverVars) {
	if cur := s.checked.Load(); cur == nil || *cur != v {
		s.checked.Store(&v)
	}
}

// Health reports the server's state with its auto_increment settings and whether it is fenced.
func (s *server) Health() allocator.ServerHealth {
	h := s.Member.Health()
	v, _ := s.vars()
	if c := s.view(); c != nil {
		v = *c
	}
	s.mu.Lock()
	h.Step, h.Offset, h.Replication = v.increment, v.offset, s.repl.String()
	s.mu.Unlock()
	s.fence.Report(&h)
	h.Marks = s.stored.Problem()
	return h
}

// marksWritten notes the outcome of writing the marks of the server named about into this one.
func (s *server) marksWritten(about string, err error, now time.Time) { s.stored.Note(about, err, now) }

// reachable reports whether the server answers: in rotation, or out of it because it is fenced (a
// fenced server still holds valid water marks of its peers).
func (s *server) reachable() bool { return s.Usable() || s.fence.Fenced() }

// Revive checks a down server again (settings, peers, schema, rows, water marks) and puts it back in
// rotation.
func (s *server) Revive(ctx context.Context) error {
	return s.ReviveWith(ctx, func(ctx context.Context) error { return s.verifySince(ctx, s.pair.cfg.now()) })
}

// verifyingConnector checks the server behind every new lease connection before the connection is used.
// A server that restarted — perhaps restored from a backup, perhaps with other settings — is only
// reached through new connections, so this is where a stale view of it is caught (the lesson of Vitess's
// overlapping sequences after a failover). A change behind connections that stay open is caught by
// the lease statement itself (see leaseUpdate) and by the background check (see Store.guard).
type verifyingConnector struct {
	driver.Connector
	s *server
}

func (c verifyingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.s.verifyConnection(ctx, c.s.pair.cfg.now()); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// verifySince makes sure a verification in full that started after t has passed, running one if
// needed; t and the start are read from the Store's clock. Connections opened together share one
// verification.
func (s *server) verifySince(ctx context.Context, t time.Time) error {
	s.verifyMu.Lock()
	defer s.verifyMu.Unlock()
	if s.verifiedOK && s.verifiedAt.After(t) {
		return nil
	}
	return s.verifyLocked(ctx)
}

// verifyConnection is the check of a new lease connection: a verification that started after t, as
// verifySince, but one that reads the server's rows only when the server may not be the one the last
// verification in full passed on. A server in rotation whose settings are those leases use, with the
// same identity, still in the same run (it did not restart: see incarnation), holds rows that only
// statements since then changed, and the lease statement's own proof and the guard's check of every
// counter each interval cover those; a restart (a physical restore, a lost data directory, another
// server behind the address) is checked in full before the connection is used. So a pool that opens
// connections reads every namespace's row once per run of the server, not once per connection.
func (s *server) verifyConnection(ctx context.Context, t time.Time) error {
	s.verifyMu.Lock()
	defer s.verifyMu.Unlock()
	if s.verifiedOK && s.verifiedAt.After(t) {
		return nil
	}
	if s.verifiedOK && s.run != nil && s.Usable() && !s.fence.Fenced() {
		start := s.pair.cfg.now()
		v, err := s.inspect(ctx)
		if err != nil {
			s.verifiedOK = false
			s.MarkDown(err)
			return err
		}
		if c := s.view(); c != nil && *c == v && s.pair.crossCheck(s, v, nil) == nil {
			if run, err := s.readIncarnation(ctx, v); err == nil && s.run.continues(run) {
				s.run, s.verifiedAt = &run, start
				return nil
			}
		}
	}
	return s.verifyLocked(ctx)
}

// verifyLocked runs a verification in full; verifyMu is held.
func (s *server) verifyLocked(ctx context.Context) error {
	start := s.pair.cfg.now()
	run, err := s.verify(ctx)
	s.verifiedAt, s.verifiedOK, s.run = start, err == nil, run
	if err != nil {
		s.MarkDown(err)
	}
	return err
}

// incarnation is what tells one run of a server (from its start to its stop) from the next, as far as
// MySQL shows it: the server's uptime, which grows with time only while it runs, and its count of
// connections, which only grows while it runs; with its identity, which tells another server at the
// same address. A physical restore, a lost data directory or a replica put in a server's place all
// need a start of the server, or another server.
type incarnation struct {
	identity    string
	uptime      time.Duration // the server's Uptime, whole seconds
	connections int64         // the server's Connections
	at          time.Time     // when it was read, on the Store's clock
}

// readIncarnation reads the run of the server whose settings inspect read as v.
func (s *server) readIncarnation(ctx context.Context, v serverVars) (incarnation, error) {
	ctx, cancel := s.pair.cfg.Runtime.Timeout(ctx, s.pair.cfg.AttemptTimeout)
	defer cancel()
	var r incarnation
	st, err := nameValues(ctx, s.ctl, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Uptime', 'Connections')")
	if err != nil {
		return r, err
	}
	up, err1 := strconv.ParseInt(st["uptime"], 10, 64)
	conns, err2 := strconv.ParseInt(st["connections"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return r, fmt.Errorf("%s: reading Uptime and Connections: %w", s.Name(), err)
	}
	r.identity, r.uptime, r.connections, r.at = v.identity, time.Duration(up)*time.Second, conns, s.pair.cfg.now()
	return r, nil
}

// continues reports whether next was read in the same run of the same server as r. A restart since r
// leaves an uptime no longer than the time since r; the same run has r's uptime plus that time. The
// tolerance covers the whole seconds of Uptime, the time the readings took and the drift of the two
// clocks (a thousandth); a run younger than it when r was read is not told from a new one, and a
// server whose clock stepped back is taken for a new run: both are only checked in full again.
func (r *incarnation) continues(next incarnation) bool {
	elapsed := next.at.Sub(r.at)
	tolerance := 2*time.Second + elapsed/1000
	return next.identity == r.identity && elapsed >= 0 && next.connections >= r.connections &&
		r.uptime > tolerance && next.uptime+tolerance >= r.uptime+elapsed
}

// verify runs every check a server must pass before it serves — its settings, its settings against
// the other servers', its schema, its namespace rows, and its counters against every water mark — and
// only when all pass makes its settings the ones leases use: the checks and the settings they
// establish change together. It returns the run of the server the checks passed on, nil when the
// server did not say.
func (s *server) verify(ctx context.Context) (*incarnation, error) {
	v, err := s.inspect(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.pair.crossCheck(s, v, nil); err != nil {
		s.NoteError(err)
		return nil, err
	}
	// The run is read before the rows: a restart between the two leaves the next connection's check
	// a run that does not continue this one, and so a check in full. A server that does not say is
	// checked in full at every new connection.
	run, runErr := s.readIncarnation(ctx, v)
	if err := s.checkRows(ctx, v); err != nil {
		return nil, err
	}
	s.publish(v)
	if runErr != nil {
		return nil, nil
	}
	return &run, nil
}

// inspect reads and checks the server's own settings, from the server's global variables (a pooled
// session keeps the values of the moment it connected), and its replication state. A misconfiguration
// is ErrMisconfigured; a Galera node that may not serve now, errNotSynced; a server that does not
// answer returns its connection error.
func (s *server) inspect(ctx context.Context) (serverVars, error) {
	ctx, cancel := s.pair.cfg.Runtime.Timeout(ctx, s.pair.cfg.AttemptTimeout)
	defer cancel()
	v, err := readVars(ctx, s.ctl)
	if err != nil {
		return v, fmt.Errorf("%s: %w", s.Name(), err)
	}
	r, err := readReplication(ctx, s.ctl, v)
	if err != nil {
		return v, fmt.Errorf("%s: %w", s.Name(), err)
	}
	s.mu.Lock()
	s.seen, s.haveSeen, s.repl = v, true, r
	s.mu.Unlock()
	if err := errors.Join(v.problems(s.Name())...); err != nil {
		s.NoteError(err)
		return v, err
	}
	if err := r.usable(s.Name(), v); err != nil {
		err = fmt.Errorf("%w: %w", errNotSynced, err)
		s.NoteError(err)
		return v, err
	}
	return v, nil
}

// errNotSynced means a Galera node may not serve now (a donor, a joiner, outside the primary
// component); it is checked again later.
var errNotSynced = errors.New("mysql: Galera node not Synced")

// replication returns how the server replicates, as last read.
func (s *server) replication() replication {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repl
}

// admit verifies the server afresh and puts it in rotation.
func (s *server) admit(ctx context.Context) error {
	if err := s.verifySince(ctx, s.pair.cfg.now()); err != nil {
		return err
	}
	s.MarkUsable()
	return nil
}

// checkRows runs the checks that need the schema: it is as new as this ticketd's, every namespace row
// was made for the settings v, and no counter is below a water mark; then rows of namespaces changed or
// created while the server was away catch up.
func (s *server) checkRows(ctx context.Context, v serverVars) error {
	ctx, cancel := s.pair.cfg.Runtime.Timeout(ctx, 4*s.pair.cfg.AttemptTimeout)
	defer cancel()
	if s.pair.cfg.Migrate {
		if _, err := schema.Migrate(ctx, s.ctl); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	if err := s.checkSchema(ctx); err != nil {
		return err
	}
	// Its own rows must match its settings. A row of another offset is a copy of a peer's row when the
	// server replicates, or when that offset is another configured server's (a server that replicated
	// once, restored from a backup of those days); any other row was made under other settings.
	rows, err := s.readRows(ctx)
	if err != nil {
		return err
	}
	replicated := s.replication().replicates(v)
	peers := s.pair.peerOffsets(s)
	var errs []error
	for _, r := range rows {
		if r.offset != v.offset && r.step == v.increment && (replicated || peers[r.offset]) {
			continue
		}
		if r.step != v.increment || r.offset != v.offset || r.next%r.step != v.offset%v.increment {
			errs = append(errs, fmt.Errorf("%w: namespace %q on %s was created with step %d offset %d (next %d) but the server now runs with auto_increment_increment %d offset %d; restore the server's settings",
				allocator.ErrMisconfigured, r.ns.Name, s.Name(), r.step, r.offset, r.next, v.increment, v.offset))
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.NoteError(err)
		return err
	}
	marks := s.pair.peerMarks(ctx, s, v.offset)
	own := rows[:0:0]
	for _, r := range rows {
		if r.offset == v.offset {
			own = append(own, r)
		}
	}
	// The counters are compared with the marks before anything is written: catching up raises a
	// counter to the namespace's start, which on a server restored from a copy older than a start
	// advance would lift it over what it issued from that start, past the marks that show it went back.
	if err := s.pair.checkFence(ctx, s, v, marks); err != nil {
		return err
	}
	return s.catchUp(ctx, v, own, marks)
}

// peerOffsets are the offsets the other servers of the set were last seen with.
func (p *Store) peerOffsets(s *server) map[int64]bool {
	out := map[int64]bool{}
	for _, o := range p.set.All() {
		if o == s {
			continue
		}
		if c := o.view(); c != nil {
			out[c.offset] = true
		} else if v, ok := o.vars(); ok {
			out[v.offset] = true
		}
	}
	return out
}

// checkSchema refuses a server whose schema is older than this ticketd's: without the water-mark table
// the restored-backup guard would silently be off.
func (s *server) checkSchema(ctx context.Context) error {
	var version sql.NullInt64
	err := s.ctl.QueryRowContext(ctx, "SELECT MAX(version) FROM ticketd_schema_migrations").Scan(&version)
	switch {
	case isNoSuchTable(err):
		err = fmt.Errorf("%w: %s has no ticketd schema; run `ticketd migrate` first", allocator.ErrMisconfigured, s.Name())
	case err != nil:
		return err
	case version.Int64 < int64(schema.Latest()):
		err = fmt.Errorf("%w: %s has schema version %d but this ticketd needs %d (without it the restored-backup guard cannot keep its water marks there); run `ticketd migrate`",
			allocator.ErrMisconfigured, s.Name(), version.Int64, schema.Latest())
	default:
		return nil
	}
	s.NoteError(err)
	return schemaError{err}
}

// catchUp brings the server's rows up to the newest settings of every namespace, as the servers in
// rotation and this process know them: a missing row is created above every peer's counter, and an
// older row takes the newer settings and has its counter raised to the namespace's start. A row that
// is missing although a water mark says the server issued IDs from it is not created: the server lost
// its data, and checkFence fences it. A newer ceiling below an ID the row already issued is not written
// (updateRow refuses it): the row keeps its own, and every lease of a process that knows the newer one
// stays below it anyway (see leaseSQL).
func (s *server) catchUp(ctx context.Context, v serverVars, rows []rowSettings, marks map[string]failover.Mark) error {
	mine := make(map[string]rowSettings, len(rows))
	for _, r := range rows {
		mine[r.ns.Name] = r
	}
	latest := map[string]rowSettings{}
	highest := map[string]int64{} // the peers' highest counters, where a missing row starts
	for _, peer := range s.pair.set.All() {
		if peer == s || !peer.Usable() {
			continue
		}
		prows, err := peer.readRows(ctx)
		if err != nil {
			continue
		}
		for _, r := range prows {
			failover.KeepLatest(latest, r)
			highest[r.ns.Name] = max(highest[r.ns.Name], r.next)
		}
	}
	for _, r := range s.pair.set.Known() {
		failover.KeepLatest(latest, r)
	}
	for name, r := range latest {
		m, ok := mine[name]
		switch {
		case !ok && marks[name].Value > 0:
			// Lost: fenced below, never recreated from nothing.
		case !ok:
			if _, err := s.insertRow(ctx, v, r, highest[name]); err != nil {
				return err
			}
			s.pair.cfg.Logger.Info("namespace row created on a server that missed it", "server", s.Name(), "namespace", name)
		case r.updatedUS > m.updatedUS || r.ns.Start > m.ns.Start || r.ceilingUS > m.ceilingUS:
			err := s.updateRow(ctx, v, r, r.ns.Start)
			if errors.Is(err, allocator.ErrInvalidSettings) {
				s.pair.cfg.Logger.Warn("a newer max_id of a namespace is below what a server already issued; the server keeps its own, and leases stay below the newer one",
					"server", s.Name(), "namespace", name, "err", err)
				continue
			}
			if err != nil {
				return err
			}
			s.pair.cfg.Logger.Info("namespace settings caught up on a server that missed a change", "server", s.Name(), "namespace", name)
		}
	}
	return nil
}

// schemaError is a refusal of a server whose schema is missing or behind: an operator fixes it with
// `ticketd migrate` while the other servers serve.
type schemaError struct{ error }

func (e schemaError) Unwrap() error { return e.error }

func isNoSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}
