package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// rowSettings is one namespace row: the counter of one server (the one of offset) for one namespace,
// and the settings. ns.Start is the highest start the namespace was created or advanced with: no
// counter of it issues below it. A server leases only from its own row; on servers that replicate each
// other, the others' rows are copies it never writes.
type rowSettings struct {
	ns           allocator.Namespace
	next         int64
	step, offset int64
	updatedUS    int64
	ceilingUS    int64 // when max_id was set; 0 when the row was written by a ticketd that did not record it
}

// Namespace is the row's settings.
func (r rowSettings) Namespace() allocator.Namespace { return r.ns }

// UpdatedUS is when the row's settings last changed.
func (r rowSettings) UpdatedUS() int64 { return r.updatedUS }

// CeilingUS is when the row's max_id was set (0: unknown).
func (r rowSettings) CeilingUS() int64 { return r.ceilingUS }

// WithLimits is the row's settings with another ceiling and start (see failover.Merge).
func (r rowSettings) WithLimits(maxID, ceilingUS, start int64) rowSettings {
	r.ns.MaxID, r.ceilingUS, r.ns.Start = maxID, ceilingUS, start
	return r
}

// change is the row a namespace change writes: its settings, made at updatedUS, the ceiling too.
func change(ns allocator.Namespace, updatedUS int64) rowSettings {
	return rowSettings{ns: ns, updatedUS: updatedUS, ceilingUS: updatedUS}
}

const rowColumns = "name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, max_id, updated_us, max_id_us"

func scanRow(sc interface{ Scan(...any) error }) (rowSettings, error) {
	var r rowSettings
	var ttlMS int64
	err := sc.Scan(&r.ns.Name, &r.next, &r.step, &r.offset, &r.ns.Start, &r.ns.BlockSize, &r.ns.MaxBlockSize, &ttlMS, &r.ns.MaxID, &r.updatedUS, &r.ceilingUS)
	r.ns.LeaseTTL = time.Duration(ttlMS) * time.Millisecond
	return r, err
}

// readRows reads every namespace row the server holds: its own, and on servers that replicate each
// other the copies of its peers' rows.
func (s *server) readRows(ctx context.Context) ([]rowSettings, error) {
	return s.queryRows(ctx, s.ctl, "SELECT "+rowColumns+" FROM ticketd_namespaces ORDER BY name, id_offset")
}

// ownRows reads the rows of the server of the given offset: the ones it leases from. With causal (on
// a Galera node) the read first waits until the node has committed every write the cluster ordered
// before it (wsrep_sync_wait): the cluster orders a lease before the node that took it commits it, so
// a peer can apply it first, and a peer's copy read just before can be ahead of the row read without
// the wait. The wait also lasts while the cluster's writes do (a node dying, not yet evicted), so it is
// only taken to confirm what would fence the node.
func (s *server) ownRows(ctx context.Context, offset int64, causal bool) ([]rowSettings, error) {
	query := "SELECT " + rowColumns + " FROM ticketd_namespaces WHERE id_offset = ? ORDER BY name"
	if !causal {
		return s.queryRows(ctx, s.ctl, query, offset)
	}
	// MariaDB alone has SET STATEMENT … FOR; Galera for MySQL 8 (Percona XtraDB Cluster) has it not.
	// Both take the session variable, set on one connection around the read and then put back.
	conn, err := s.ctl.Conn(ctx)
	if err != nil {
		return nil, err
	}
	restored := false
	defer func() {
		if !restored { // the connection is not given back to the pool still waiting before each read
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}()
	var was int64
	if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.wsrep_sync_wait").Scan(&was); err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1"); err != nil {
		return nil, err
	}
	rows, err := s.queryRows(ctx, conn, query, offset)
	if err != nil {
		return nil, err
	}
	_, err = conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = ?", was)
	restored = err == nil
	return rows, err
}

// querier is a pool or one of its connections.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *server) queryRows(ctx context.Context, q querier, query string, args ...any) ([]rowSettings, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
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

// readRow reads the namespace's row of the server of the given offset.
func (s *server) readRow(ctx context.Context, name string, offset int64) (rowSettings, error) {
	r, err := scanRow(s.ctl.QueryRowContext(ctx, "SELECT "+rowColumns+" FROM ticketd_namespaces WHERE name = ? AND id_offset = ?", name, offset))
	if errors.Is(err, sql.ErrNoRows) {
		return r, errRowMissing
	}
	return r, err
}

// ReadRecord reads the namespace's newest settings among the rows the server holds; found is false
// when it holds none.
func (s *server) ReadRecord(ctx context.Context, name string) (rowSettings, bool, error) {
	r, err := scanRow(s.ctl.QueryRowContext(ctx, "SELECT "+rowColumns+" FROM ticketd_namespaces WHERE name = ? ORDER BY updated_us DESC LIMIT 1", name))
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// ReadRecords reads every namespace row.
func (s *server) ReadRecords(ctx context.Context) ([]rowSettings, error) { return s.readRows(ctx) }

// EachRecord calls fn with every namespace row, one at a time (see failover.RecordStreamer): a listing
// keeps no list of the server's rows.
func (s *server) EachRecord(ctx context.Context, fn func(rowSettings)) error {
	rows, err := s.ctl.QueryContext(ctx, "SELECT "+rowColumns+" FROM ticketd_namespaces ORDER BY name, id_offset")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return err
		}
		fn(r)
	}
	return rows.Err()
}

// insertRow creates the namespace's row for the settings v unless it exists, with the settings of rec
// and their times (a row a server missed carries the times of the settings it copies, never newer
// ones); ok reports whether it was created. The counter starts at the first ID of v's residue at or
// above both the namespace's start and from.
func (s *server) insertRow(ctx context.Context, v serverVars, rec rowSettings, from int64) (bool, error) {
	ns := rec.ns
	first, ok := failover.FirstAtLeast(max(ns.Start, from), v.increment, v.offset)
	if !ok {
		return false, fmt.Errorf("%w: start %d leaves no ID for %s (offset %d of %d)", allocator.ErrExhausted, max(ns.Start, from), s.Name(), v.offset, v.increment)
	}
	res, err := s.ctl.ExecContext(ctx, `INSERT IGNORE INTO ticketd_namespaces
		(name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, max_id, created_us, updated_us, max_id_us)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		ns.Name, first, v.increment, v.offset, ns.Start, ns.BlockSize, ns.MaxBlockSize, ns.LeaseTTL.Milliseconds(), ns.WithDefaults().MaxID,
		s.pair.cfg.now().UnixMicro(), rec.updatedUS, rec.ceilingUS)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// updateRow writes the settings of rec unless the row holds newer ones (the ceiling by its own time),
// and raises the namespace's start and the counter to at least start (never lower). The row must be
// the one made for v, with a counter at or above this process's floor for it (below it, the server
// went back in time and is fenced, as a lease would find). A ceiling below an ID the row issued is
// never written: the statement that would write it changes nothing, and the error
// (ErrInvalidSettings) names the highest ID issued.
func (s *server) updateRow(ctx context.Context, v serverVars, rec rowSettings, start int64) error {
	ns := rec.ns.WithDefaults()
	floor := int64(1)
	if start > 0 {
		f, ok := failover.FirstAtLeast(start, v.increment, v.offset)
		if !ok {
			return fmt.Errorf("%w: start %d leaves no ID for %s", allocator.ErrExhausted, start, s.Name())
		}
		floor = f
	}
	// Like a lease, the change carries the proof that the server did not go back in time: raising the
	// counter of a server restored from an old copy to the start would lift it over the floor that
	// shows it went back, and over IDs it issued.
	mark := s.marks.Get(ns.Name)
	// Assignments run left to right: each time changes after the settings compared with it. The last
	// line of the WHERE clause lets a ceiling through only when the row issued nothing above it, or
	// already has one at or below it, or holds a ceiling set later (which the change leaves).
	res, err := s.ctl.ExecContext(ctx, `UPDATE ticketd_namespaces SET
		block_size = IF(? > updated_us, ?, block_size),
		max_block_size = IF(? > updated_us, ?, max_block_size),
		lease_ttl_ms = IF(? > updated_us, ?, lease_ttl_ms),
		max_id = IF(? > max_id_us OR (? = max_id_us AND ? < max_id), ?, max_id),
		max_id_us = GREATEST(max_id_us, ?),
		start_id = GREATEST(start_id, ?),
		next_id = GREATEST(next_id, ?),
		updated_us = GREATEST(updated_us, ?)
		WHERE name = ? AND step = ? AND id_offset = ? AND next_id >= ?
		AND (next_id - step <= ? OR max_id <= ? OR ? < max_id_us OR (? = max_id_us AND ? >= max_id))`,
		rec.updatedUS, ns.BlockSize, rec.updatedUS, ns.MaxBlockSize, rec.updatedUS, ns.LeaseTTL.Milliseconds(),
		rec.ceilingUS, rec.ceilingUS, ns.MaxID, ns.MaxID,
		rec.ceilingUS,
		start, floor, rec.updatedUS,
		ns.Name, v.increment, v.offset, mark.Value,
		ns.MaxID, ns.MaxID, rec.ceilingUS, rec.ceilingUS, ns.MaxID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		// Unchanged settings also affect no row; tell the two apart.
		r, err := s.readRow(ctx, ns.Name, v.offset)
		if err != nil {
			return err
		}
		if r.step != v.increment || r.offset != v.offset {
			return fmt.Errorf("%w: namespace %q on %s has step %d offset %d, not the step %d offset %d it was checked with",
				allocator.ErrMisconfigured, ns.Name, s.Name(), r.step, r.offset, v.increment, v.offset)
		}
		if r.next < mark.Value {
			return s.fenceBelow(ns.Name, r.next, mark)
		}
		if lowers(r, rec) {
			if err := allocator.CheckLowering(ns.Name, ns.MaxID, r.next-r.step); err != nil {
				return err
			}
		}
	}
	return nil
}

// lowers reports whether writing rec's ceiling into the row r would lower the row's: rec's ceiling is
// below it and newer (or set at the same time).
func lowers(r, rec rowSettings) bool {
	maxID := rec.ns.WithDefaults().MaxID
	return maxID < r.ns.MaxID && (rec.ceilingUS > r.ceilingUS || rec.ceilingUS == r.ceilingUS)
}
