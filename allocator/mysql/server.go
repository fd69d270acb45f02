package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/multi"
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
}

// server is one ticket server and what the pair knows of it. Safe for concurrent use.
type server struct {
	*multi.Member // in rotation or not, and why: the failover state every backend keeps alike

	db   *sql.DB // leases; every new connection is verified first (see verifySince)
	ctl  *sql.DB // checks, settings and water marks; never hooked, so checks cannot deadlock on db
	pair *Pair

	verifyMu   sync.Mutex // one verification at a time
	verifiedAt time.Time  // when the last successful verification started
	verifiedOK bool

	mu       sync.Mutex
	v        serverVars
	haveVars bool     // variables read and checked at least once
	fenced   []string // namespaces below a peer's water mark

	marks marks // highest counters seen here, for the peers' water marks

	co coalescer // concurrent leases of one namespace share one UPDATE
}

func (s *server) vars() (serverVars, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.haveVars
}

func (s *server) inspected() bool {
	_, ok := s.vars()
	return ok
}

// Health reports the server's state with its auto_increment settings and whether it is fenced.
func (s *server) Health() allocator.ServerHealth {
	h := s.Member.Health()
	s.mu.Lock()
	defer s.mu.Unlock()
	h.Step, h.Offset, h.Fenced = s.v.increment, s.v.offset, len(s.fenced) > 0
	return h
}

// Revive checks a down server again (variables, peers, rows, water marks) and puts it back in rotation.
func (s *server) Revive(ctx context.Context) error {
	return s.ReviveWith(ctx, func(ctx context.Context) error { return s.verifySince(ctx, time.Now()) })
}

// verifyingConnector checks the server behind every new lease connection before the connection is used.
// A server that restarted — perhaps restored from a backup, perhaps with other settings — is only
// reached through new connections, so this is where a stale view of it is caught (the lesson of Vitess's
// overlapping sequences after a failover).
type verifyingConnector struct {
	driver.Connector
	s *server
}

func (c verifyingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.s.verifySince(ctx, time.Now()); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// verifySince makes sure a verification that started after t has passed, running one if needed.
// Connections opened together share one verification.
func (s *server) verifySince(ctx context.Context, t time.Time) error {
	s.verifyMu.Lock()
	defer s.verifyMu.Unlock()
	if s.verifiedOK && s.verifiedAt.After(t) {
		return nil
	}
	start := time.Now()
	err := s.verify(ctx)
	s.verifiedAt, s.verifiedOK = start, err == nil
	if err != nil {
		s.MarkDown(err)
	}
	return err
}

// verify runs every check a server must pass before it serves: its settings, its settings against the
// servers in rotation, its namespace rows, and its counters against the water marks its peers hold.
func (s *server) verify(ctx context.Context) error {
	if err := s.inspect(ctx); err != nil {
		return err
	}
	if err := s.pair.crossCheck(s); err != nil {
		return err
	}
	return s.checkRows(ctx)
}

// inspect reads and checks the server's own settings. A misconfiguration is ErrMisconfigured; a
// server that does not answer returns its connection error.
func (s *server) inspect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.pair.cfg.AttemptTimeout)
	defer cancel()
	v, err := readVars(ctx, s.ctl)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name(), err)
	}
	if err := errors.Join(v.problems(s.Name())...); err != nil {
		s.NoteError(err)
		return err
	}
	s.mu.Lock()
	s.v, s.haveVars = v, true
	s.mu.Unlock()
	return nil
}

// admit verifies the server afresh and puts it in rotation.
func (s *server) admit(ctx context.Context) error {
	if err := s.verifySince(ctx, time.Now()); err != nil {
		return err
	}
	s.MarkUsable()
	return nil
}

// checkRows runs the checks that need the schema (every namespace row matches this server's increment
// and offset), creates rows that were made while the server was down, and compares the counters with
// the peers' water marks.
func (s *server) checkRows(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 4*s.pair.cfg.AttemptTimeout)
	defer cancel()
	if s.pair.cfg.Migrate {
		if _, err := schema.Migrate(ctx, s.ctl); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	rows, err := s.readRows(ctx)
	if err != nil {
		var missing *missingSchemaError
		if errors.As(err, &missing) {
			return fmt.Errorf("%w: %s has no ticketd schema; run `ticketd migrate` first", allocator.ErrMisconfigured, s.Name())
		}
		return err
	}
	v, _ := s.vars()
	var errs []error
	mine := map[string]bool{}
	for _, r := range rows {
		mine[r.ns.Name] = true
		if r.step != v.increment || r.offset != v.offset || r.next%r.step != v.offset%v.increment {
			errs = append(errs, fmt.Errorf("%w: namespace %q on %s was created with step %d offset %d (next %d) but the server now runs with auto_increment_increment %d offset %d; restore the server's settings",
				allocator.ErrMisconfigured, r.ns.Name, s.Name(), r.step, r.offset, r.next, v.increment, v.offset))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := s.syncFromPeers(ctx, mine); err != nil {
		return err
	}
	return s.pair.checkFence(ctx, s)
}

// syncFromPeers creates the rows of namespaces that the servers in rotation have and this one lacks
// (created while it was away). mine names the rows it has; nil means read them.
func (s *server) syncFromPeers(ctx context.Context, mine map[string]bool) error {
	if mine == nil {
		rows, err := s.readRows(ctx)
		if err != nil {
			return err
		}
		mine = map[string]bool{}
		for _, r := range rows {
			mine[r.ns.Name] = true
		}
	}
	// A missing row starts above every peer's counter: the server's residue class alone keeps its IDs
	// apart from theirs, and starting high keeps them roughly in time order with the peers' IDs.
	missing := map[string]rowSettings{}
	for _, peer := range s.pair.set.All() {
		if peer == s || !peer.Usable() {
			continue
		}
		prows, err := peer.readRows(ctx)
		if err != nil {
			continue
		}
		for _, r := range prows {
			if m, seen := missing[r.ns.Name]; !mine[r.ns.Name] && (!seen || r.next > m.next) {
				missing[r.ns.Name] = r
			}
		}
	}
	for name, r := range missing {
		if err := s.ensureRow(ctx, r.ns, r.next); err != nil {
			return err
		}
		mine[name] = true
	}
	return nil
}

type missingSchemaError struct{ err error }

func (e *missingSchemaError) Error() string { return e.err.Error() }
func (e *missingSchemaError) Unwrap() error { return e.err }

// rowSettings is one namespace row.
type rowSettings struct {
	ns           allocator.Namespace
	next         int64
	step, offset int64
	updatedUS    int64
}

// Namespace is the row's settings.
func (r rowSettings) Namespace() allocator.Namespace { return r.ns }

// UpdatedUS is when the row's settings last changed.
func (r rowSettings) UpdatedUS() int64 { return r.updatedUS }

const rowColumns = "name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, updated_us"

func scanRow(sc interface{ Scan(...any) error }) (rowSettings, error) {
	var r rowSettings
	var ttlMS int64
	err := sc.Scan(&r.ns.Name, &r.next, &r.step, &r.offset, &r.ns.Start, &r.ns.BlockSize, &r.ns.MaxBlockSize, &ttlMS, &r.updatedUS)
	r.ns.LeaseTTL = time.Duration(ttlMS) * time.Millisecond
	return r, err
}

func (s *server) readRows(ctx context.Context) ([]rowSettings, error) {
	rows, err := s.ctl.QueryContext(ctx, "SELECT "+rowColumns+" FROM ticketd_namespaces ORDER BY name")
	if err != nil {
		if isNoSuchTable(err) {
			return nil, &missingSchemaError{err}
		}
		return nil, err
	}
	defer rows.Close()
	var out []rowSettings
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *server) readRow(ctx context.Context, name string) (rowSettings, error) {
	r, err := scanRow(s.ctl.QueryRowContext(ctx, "SELECT "+rowColumns+" FROM ticketd_namespaces WHERE name = ?", name))
	if errors.Is(err, sql.ErrNoRows) {
		return r, errRowMissing
	}
	return r, err
}

// ReadRecord reads the namespace's row; found is false when this server has none.
func (s *server) ReadRecord(ctx context.Context, name string) (rowSettings, bool, error) {
	r, err := s.readRow(ctx, name)
	if errors.Is(err, errRowMissing) {
		return r, false, nil
	}
	return r, err == nil, err
}

// ReadRecords reads every namespace row.
func (s *server) ReadRecords(ctx context.Context) ([]rowSettings, error) { return s.readRows(ctx) }

// leaseUpdate is the one-statement, one-round-trip lease of total IDs: the UPDATE moves the counter and
// LAST_INSERT_ID(expr) makes the OK packet carry its new value, the exclusive end of the range. The
// range is cut into one block per size, in order (several callers' leases may share one UPDATE: see
// coalescer). largest is checked against the namespace's max_block_size.
func (s *server) leaseUpdate(ctx context.Context, ns allocator.Namespace, sizes []int64) ([]allocator.Block, error) {
	var total, largest int64
	for _, n := range sizes {
		total += n
		largest = max(largest, n)
	}
	res, err := s.db.ExecContext(ctx,
		`UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(next_id + ? * step)
		WHERE name = ? AND ? <= max_block_size AND next_id <= 9223372036854775807 - ? * step`,
		total, ns.Name, largest, total)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, s.whyNoLease(ctx, ns.Name, largest, total)
	}
	end, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	v, _ := s.vars()
	if end%v.increment != v.offset%v.increment {
		// Only a row edited by hand gets here; refuse rather than risk the other server's IDs.
		return nil, fmt.Errorf("%w: %s returned counter %d, not ≡ offset %d (mod %d); namespace %q's row was changed outside ticketd",
			allocator.ErrMisconfigured, s.Name(), end, v.offset, v.increment, ns.Name)
	}
	whole, err := allocator.BlockEnding(ns.Name, s.Name(), end, v.increment, total, allocator.ExpiryFor(s.pair.cfg.now(), ns.LeaseTTL))
	if err != nil {
		return nil, err
	}
	s.marks.observe(ns.Name, end)
	blocks := make([]allocator.Block, len(sizes))
	var from int64
	for i, n := range sizes {
		if blocks[i], err = whole.Slice(from, n); err != nil {
			return nil, err
		}
		from += n
	}
	return blocks, nil
}

// whyNoLease explains an UPDATE that matched no row.
func (s *server) whyNoLease(ctx context.Context, name string, largest, total int64) error {
	r, err := s.readRow(ctx, name)
	if err != nil {
		return err
	}
	if largest > r.ns.MaxBlockSize {
		return fmt.Errorf("%w: %d is above namespace %q's max_block_size %d", allocator.ErrInvalidSize, largest, name, r.ns.MaxBlockSize)
	}
	return fmt.Errorf("%w: %s's counter for %q is %d; %d more IDs of step %d would pass %d",
		allocator.ErrExhausted, s.Name(), name, r.next, total, r.step, int64(math.MaxInt64))
}

// insertRow creates the namespace's row unless it exists; ok reports whether it was created. The
// counter starts at the first ID of this server's residue at or above both ns.Start and from.
func (s *server) insertRow(ctx context.Context, ns allocator.Namespace, from, nowUS int64) (bool, error) {
	v, _ := s.vars()
	first, ok := multi.FirstAtLeast(max(ns.Start, from), v.increment, v.offset)
	if !ok {
		return false, fmt.Errorf("%w: start %d leaves no ID for %s (offset %d of %d)", allocator.ErrExhausted, ns.Start, s.Name(), v.offset, v.increment)
	}
	res, err := s.ctl.ExecContext(ctx, `INSERT IGNORE INTO ticketd_namespaces
		(name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, created_us, updated_us)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ns.Name, first, v.increment, v.offset, ns.Start, ns.BlockSize, ns.MaxBlockSize, ns.LeaseTTL.Milliseconds(), nowUS, nowUS)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ensureRow creates the row with the given settings, its counter at or above from, if it is missing.
func (s *server) ensureRow(ctx context.Context, ns allocator.Namespace, from int64) error {
	_, err := s.insertRow(ctx, ns, from, s.pair.cfg.now().UnixMicro())
	if err == nil {
		s.pair.cfg.Logger.Info("namespace row created on a server that missed it", "server", s.Name(), "namespace", ns.Name)
	}
	return err
}

// updateRow writes settings and advances the counter to at least advance (never back).
func (s *server) updateRow(ctx context.Context, ns allocator.Namespace, advance, nowUS int64) error {
	v, _ := s.vars()
	floor := int64(1)
	if advance > 0 {
		f, ok := multi.FirstAtLeast(advance, v.increment, v.offset)
		if !ok {
			return fmt.Errorf("%w: start %d leaves no ID for %s", allocator.ErrExhausted, advance, s.Name())
		}
		floor = f
	}
	res, err := s.ctl.ExecContext(ctx, `UPDATE ticketd_namespaces SET block_size = ?, max_block_size = ?, lease_ttl_ms = ?,
		updated_us = ?, next_id = GREATEST(next_id, ?) WHERE name = ?`,
		ns.BlockSize, ns.MaxBlockSize, ns.LeaseTTL.Milliseconds(), nowUS, floor, ns.Name)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		// Unchanged settings also affect no row; tell the two apart.
		if _, err := s.readRow(ctx, ns.Name); err != nil {
			return err
		}
	}
	return nil
}

func isNoSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}
