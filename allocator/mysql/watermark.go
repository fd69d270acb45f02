package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// The restored-backup guard. A ticket server restored from an old backup (or a dump reloaded into it,
// or a rebuild that lost its data) comes back with counters that went back in time, and would issue
// again every ID since. Three things catch it:
//
//   - Every lease statement requires the counter to be at or above the floor: the highest counter this
//     process has seen on the server, raised to what the peers' water marks say (see leaseSQL). A
//     process that leased past the restored point, or read a mark past it, refuses the server at its
//     next lease, even on connections that stayed open.
//   - The pair writes each server's highest counter seen (its high-water mark) into the other servers'
//     ticketd_watermarks table, with the pace of its leases, every WatermarkInterval and on Close; and
//     every WatermarkInterval it reads the marks back and compares them with each server's counters.
//   - Every check of a server (at start, on a new connection, when it comes back) does the same.
//
// A server below a mark is fenced: it serves nothing until `ticketd repair` advances it. What this
// cannot see: leases of the last WatermarkInterval or so that no mark holds yet, by processes other
// than the one checking.

// writeWatermarks writes every server's unwritten marks, and what this process leased there since
// the last write, into each usable peer.
func (p *Store) writeWatermarks(ctx context.Context) error {
	var errs []error
	now := p.cfg.now()
	for _, s := range p.set.All() {
		v := s.view()
		if v == nil {
			continue
		}
		pace := s.marks.TakePace(now)
		for _, peer := range p.set.All() {
			// A fenced peer keeps marks too: what it holds of the others does not depend on its
			// own counters, and a process that ends before the peer is repaired would take the
			// marks it could write there with it.
			if peer == s || !(peer.Usable() || peer.fence.Fenced()) {
				continue
			}
			err := p.writeTo(ctx, s, peer, *v, pace, now)
			peer.marksWritten(s.Name(), err, now)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// markSQL raises water marks, one row per namespace (see markRows): many namespaces' marks in one
// statement. The identity recorded is that of the highest mark: a mark taken on another server (before
// a failover, say) gives way to a higher one, and an unknown identity never replaces a known one.
//
// The rows are a derived table (mark) that the update refers to, where VALUES(col) would do on
// MariaDB: MySQL 8.0.20 and later warn on every VALUES(col).
const markSQL = `INSERT INTO ticketd_watermarks (namespace, peer_offset, high_water, updated_us, server_identity)
	SELECT * FROM (%s) AS mark ON DUPLICATE KEY UPDATE
	server_identity = IF(mark.server_identity <> '' AND (mark.high_water > ticketd_watermarks.high_water OR ticketd_watermarks.server_identity = ''),
		mark.server_identity, ticketd_watermarks.server_identity),
	high_water = GREATEST(ticketd_watermarks.high_water, mark.high_water), updated_us = mark.updated_us`

// markRows are the rows of markSQL: the first names the columns. Parameters: namespace, offset, mark,
// now, identity. Numbers are cast, so that a parameter is never compared as a string.
var markRows = derivedRows{
	"SELECT ? AS namespace, CAST(? AS SIGNED) AS peer_offset, CAST(? AS SIGNED) AS high_water, CAST(? AS SIGNED) AS updated_us, ? AS server_identity",
	"SELECT ?, CAST(? AS SIGNED), CAST(? AS SIGNED), CAST(? AS SIGNED), ?"}

// serverUS is the ticket server's own clock in microseconds: the time of a statement, alike for every
// process that writes the same row, whatever their clocks say.
const serverUS = "CAST(@@timestamp * 1000000 AS SIGNED)"

// paceSQL records what one process leased from a peer since its last write, one row per namespace
// (see paceRows): its rate, the highest rate of one process (peak_per_s); the counter units added to
// the peer's sum of every process's leases (leased); and, once a window of at least one water-mark
// interval of the server's own clock has passed, the rate of that sum over it, the highest of which is
// fleet_peak_per_s. It leaves updated_us alone: processes of older releases set it (see checkCeiling).
//
// The process's own water-mark interval raises interval_us: a repair's margin covers the longest.
//
// Parameters after the rows: window, window, window.
const paceSQL = `INSERT INTO ticketd_lease_rates
	(namespace, peer_offset, peak_per_s, updated_us, written_us, leased, window_leased, window_us, fleet_peak_per_s, interval_us)
	SELECT * FROM (%s) AS rate ON DUPLICATE KEY UPDATE
	fleet_peak_per_s = IF(` + serverUS + ` - ticketd_lease_rates.window_us >= ?,
		GREATEST(ticketd_lease_rates.fleet_peak_per_s, CAST(CAST(ticketd_lease_rates.leased + rate.leased - ticketd_lease_rates.window_leased AS DECIMAL(30, 0)) * 1000000 / (` + serverUS + ` - ticketd_lease_rates.window_us) AS SIGNED)),
		ticketd_lease_rates.fleet_peak_per_s),
	window_leased = IF(` + serverUS + ` - ticketd_lease_rates.window_us >= ?, ticketd_lease_rates.leased + rate.leased, ticketd_lease_rates.window_leased),
	window_us = IF(` + serverUS + ` - ticketd_lease_rates.window_us >= ?, ` + serverUS + `, ticketd_lease_rates.window_us),
	leased = ticketd_lease_rates.leased + rate.leased,
	peak_per_s = GREATEST(ticketd_lease_rates.peak_per_s, rate.peak_per_s),
	written_us = rate.written_us,
	interval_us = GREATEST(ticketd_lease_rates.interval_us, rate.interval_us)`

// paceRows are the rows of paceSQL: the first names the columns. Parameters: namespace, offset, rate,
// now, span, span, interval.
var paceRows = derivedRows{
	"SELECT ? AS namespace, CAST(? AS SIGNED) AS peer_offset, CAST(? AS SIGNED) AS peak_per_s, 0 AS updated_us, CAST(? AS SIGNED) AS written_us, " +
		"CAST(? AS SIGNED) AS leased, CAST(? AS SIGNED) AS window_leased, " + serverUS + " AS window_us, 0 AS fleet_peak_per_s, CAST(? AS SIGNED) AS interval_us",
	"SELECT ?, CAST(? AS SIGNED), CAST(? AS SIGNED), 0, CAST(? AS SIGNED), CAST(? AS SIGNED), CAST(? AS SIGNED), " + serverUS + ", 0, CAST(? AS SIGNED)"}

// markBatch is the most namespaces one statement writes: the background work of a process is one
// statement of marks and one of lease rates per peer and water-mark interval for up to this many
// namespaces leased from in the interval, however many it knows.
const markBatch = 2000

// derivedRows is how a statement's derived table is written: its first row, which names the columns,
// and every other row.
type derivedRows struct{ first, next string }

// batchSQL is stmt with n rows of r in place of its %s.
func batchSQL(stmt string, r derivedRows, n int) string {
	return fmt.Sprintf(stmt, r.first+strings.Repeat(" UNION ALL "+r.next, n-1))
}

// writeTo writes s's unwritten marks and what this process leased there into peer, within one
// attempt's time, markBatch namespaces to a statement: a peer that hangs holds up the writes to the
// others no longer than that. On a Galera cluster the marks replicate, so writers (processes closing
// together, or one process writing a server's marks to two nodes) meet on the same rows: a statement
// rolled back for that runs again (see retryConflicts), and only that statement, since adding a
// process's leases twice would count them twice.
func (p *Store) writeTo(ctx context.Context, s, peer *server, v serverVars, pace map[string]failover.Pace, now time.Time) error {
	ctx, cancel := p.cfg.Runtime.Timeout(ctx, p.cfg.AttemptTimeout)
	defer cancel()
	nowUS := now.UnixMicro()
	pending := s.marks.Pending(peer.Name())
	names := make([]string, 0, len(pending))
	for ns := range pending {
		names = append(names, ns)
	}
	sort.Strings(names) // rows locked in one order by every writer
	for chunk := range slices.Chunk(names, markBatch) {
		args := make([]any, 0, 5*len(chunk))
		for _, ns := range chunk {
			m := pending[ns]
			args = append(args, ns, v.offset, m.Value, nowUS, m.Identity)
		}
		query := batchSQL(markSQL, markRows, len(chunk))
		if err := retryConflicts(ctx, p.cfg.Runtime.Sleep, func() error { _, err := peer.ctl.ExecContext(ctx, query, args...); return err }); err != nil {
			return fmt.Errorf("water marks of %s on %s: %w", s.Name(), peer.Name(), err)
		}
		for _, ns := range chunk {
			s.marks.Wrote(peer.Name(), ns, pending[ns].Value)
		}
	}
	window := p.cfg.WatermarkInterval.Microseconds()
	names = names[:0]
	for ns, pc := range pace {
		if pc.Span > 0 {
			names = append(names, ns)
		}
	}
	sort.Strings(names)
	for chunk := range slices.Chunk(names, markBatch) {
		args := make([]any, 0, 7*len(chunk)+3)
		for _, ns := range chunk {
			pc := pace[ns]
			args = append(args, ns, v.offset, pc.PerSecond, nowUS, pc.Span, pc.Span, window)
		}
		args = append(args, window, window, window)
		query := batchSQL(paceSQL, paceRows, len(chunk))
		if err := retryConflicts(ctx, p.cfg.Runtime.Sleep, func() error { _, err := peer.ctl.ExecContext(ctx, query, args...); return err }); err != nil {
			return fmt.Errorf("lease rates of %s on %s: %w", s.Name(), peer.Name(), err)
		}
	}
	return nil
}

// guard runs every WatermarkInterval, and at once when a server is fenced: it writes the marks to the
// peers, reads theirs back into the floors, takes out of rotation a server whose settings changed
// while it served, and fences one whose counters went below the floors — also when no lease is asking.
func (p *Store) guard() {
	// Each step has a time of its own: a peer that hangs spends the writes' time, not the time of the
	// checks of the servers that answer.
	budget := 4 * p.cfg.AttemptTimeout
	ctx, cancel := p.cfg.Runtime.Timeout(context.Background(), budget)
	if p.cfg.marksWriting != nil {
		p.cfg.marksWriting()
	}
	if err := p.writeWatermarks(ctx); err != nil && !p.set.Closed() {
		p.cfg.Logger.Warn("could not record high-water marks", "err", err)
	}
	cancel()
	for _, s := range p.set.All() {
		v := s.view()
		if v == nil || !s.Usable() {
			continue
		}
		ctx, cancel := p.cfg.Runtime.Timeout(context.Background(), budget)
		p.guardServer(ctx, s, *v)
		cancel()
	}
}

// guardServer takes s, checked with the settings v, out of rotation when its settings changed while it
// served, or when its counters went below the floors. A server that does not answer the guard stays in
// rotation: its leases' own failures take it out.
func (p *Store) guardServer(ctx context.Context, s *server, v serverVars) {
	// The peers' marks raise s's floors whatever s answers now: a lease that reaches s when the guard
	// did not (a flaky link) proves s against them.
	marks := p.peerMarks(ctx, s, v.offset)
	// A setting changed on the running server takes it out of rotation until it is checked again in
	// full (its revival), without waiting for a new connection.
	now, err := s.inspect(ctx)
	changed := err == nil && now != v
	if changed {
		err = fmt.Errorf("%s's settings changed while it served (auto_increment_increment %d, offset %d, innodb_flush_log_at_trx_commit %d, sync_binlog %d, now %d, %d, %d, %d): checking it again",
			s.Name(), v.increment, v.offset, v.flushAtCommit, v.syncBinlog, now.increment, now.offset, now.flushAtCommit, now.syncBinlog)
	}
	if err != nil {
		if changed || errors.Is(err, allocator.ErrMisconfigured) || errors.Is(err, errNotSynced) {
			s.MarkDown(err)
		}
		return
	}
	if err := p.checkFence(ctx, s, v, marks); errors.Is(err, allocator.ErrFenced) {
		s.MarkDown(err)
	}
}

// peerMarks returns, per namespace, the highest counter any reachable peer's water marks or this
// process hold for the server of the given offset, and raises s's floors to them. A peer that is
// fenced itself still holds valid marks about s. A peer that cannot be read is left out: that says
// nothing about s (the peer's own checks take it out of rotation, and refuse it when it lacks the
// water-mark table).
func (p *Store) peerMarks(ctx context.Context, s *server, offset int64) map[string]failover.Mark {
	for _, peer := range p.set.All() {
		if peer == s || !(peer.reachable() || (peer.inspected() && peer.view() == nil)) {
			continue
		}
		if err := p.readMarks(ctx, peer, s, offset); err != nil {
			p.cfg.Logger.Debug("could not read water marks", "peer", peer.Name(), "server", s.Name(), "err", err)
		}
	}
	return s.marks.Snapshot()
}

// readMarks reads into s's floors what peer holds of the server of offset: the water marks it
// recorded, and, when the two replicate each other, its copies of the server's own rows — a mark that
// replication keeps for free (a node rebuilt from its peers gets its counter back; one restored from an
// old backup outside the cluster is below them).
func (p *Store) readMarks(ctx context.Context, peer, s *server, offset int64) error {
	qctx, cancel := p.cfg.Runtime.Timeout(ctx, p.cfg.AttemptTimeout)
	defer cancel()
	for _, q := range []struct{ query, holder string }{
		{"SELECT namespace, high_water, server_identity FROM ticketd_watermarks WHERE peer_offset = ?", peer.Name()},
		{"SELECT name, next_id, '' FROM ticketd_namespaces WHERE id_offset = ?", "its row's copy on " + peer.Name()},
	} {
		rows, err := peer.ctl.QueryContext(qctx, q.query, offset)
		if err != nil {
			return err
		}
		for rows.Next() {
			var ns string
			m := failover.Mark{Holder: q.holder}
			if err := rows.Scan(&ns, &m.Value, &m.Identity); err != nil {
				rows.Close()
				return err
			}
			s.marks.Observe(ns, m)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// checkFence compares s's counters (made for the settings v) with marks, read before them. A counter
// below a mark, a row missing although a mark says the server issued from it, or a mark taken on
// another server than the one that answers now (see serverVars.identity), fences s. On a Galera
// node a peer's copy can be ahead of the node's own row for a moment (see ownRows): what would fence
// it is read again, after the node has caught up, and only what still holds fences it.
func (p *Store) checkFence(ctx context.Context, s *server, v serverVars, marks map[string]failover.Mark) error {
	fenced, details, err := s.ownBelowMarks(ctx, v.offset, marks, v.identity)
	if err != nil {
		return err
	}
	if len(fenced) > 0 && v.galera {
		rows, err := s.ownRows(ctx, v.offset, true)
		if err != nil {
			return err
		}
		fenced, details = belowMarks(rows, marks, v.identity)
	}
	if len(fenced) == 0 {
		s.fence.Clear()
		return nil
	}
	return p.fence(s, fenced, details)
}

// ownBelowMarks is belowMarks over the rows of the server of the given offset (see ownRows), read one
// at a time: the guard reads every namespace's row every interval, and a list of them would be two
// allocations a namespace each time. Only when a mark has no row (which fences the server) are the
// rows read again as a list, to name the namespaces. The driver still hands each column of a row over
// in an interface (an allocation each); a list cost ten allocations a row.
func (s *server) ownBelowMarks(ctx context.Context, offset int64, marks map[string]failover.Mark, identity string) (fenced, details []string, err error) {
	marked := 0 // rows with a mark above 0
	err = s.eachCounter(ctx, offset, func(name sql.RawBytes, next int64) {
		w, ok := marks[string(name)]
		if !ok {
			return
		}
		if w.Value > 0 {
			marked++
		}
		switch {
		case w.Replaced(identity):
			fenced = append(fenced, string(name))
			details = append(details, failover.IdentityChanged(string(name), w, identity))
		case next < w.Value:
			fenced = append(fenced, string(name))
			details = append(details, fmt.Sprintf("namespace %q counter %d is below %d seen by %s", name, next, w.Value, w.Holder))
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for _, w := range marks {
		if w.Value > 0 {
			marked--
		}
	}
	if marked < 0 { // a mark without a row
		list, err := s.ownRows(ctx, offset, false)
		if err != nil {
			return nil, nil, err
		}
		fenced, details = belowMarks(list, marks, identity)
	}
	return fenced, details, nil
}

// belowMarks names the namespaces whose row is below its mark, or missing although a mark says the
// server issued from it, or whose mark was taken on another server than the one of identity, and says
// why for each.
func belowMarks(rows []rowSettings, marks map[string]failover.Mark, identity string) (fenced, details []string) {
	have := map[string]bool{}
	for _, r := range rows {
		have[r.ns.Name] = true
		switch w := marks[r.ns.Name]; {
		case w.Replaced(identity):
			fenced = append(fenced, r.ns.Name)
			details = append(details, failover.IdentityChanged(r.ns.Name, w, identity))
		case r.next < w.Value:
			fenced = append(fenced, r.ns.Name)
			details = append(details, fmt.Sprintf("namespace %q counter %d is below %d seen by %s", r.ns.Name, r.next, w.Value, w.Holder))
		}
	}
	for ns, w := range marks {
		if !have[ns] && w.Value > 0 {
			fenced = append(fenced, ns)
			details = append(details, fmt.Sprintf("namespace %q has no row but %s saw its counter at %d", ns, w.Holder, w.Value))
		}
	}
	return fenced, details
}

// fence records that s went back in time for the namespaces named (see failover.Set.Fence).
func (p *Store) fence(s *server, namespaces, details []string) error {
	// The marks s kept of the others went back with it: they are written there again.
	for _, o := range p.set.All() {
		if o != s {
			o.marks.Unwrite(s.Name())
		}
	}
	return p.set.Fence(s, &s.fence, namespaces, details, p.kickGuard)
}

// Repair advances a fenced server's counter for a namespace past the highest water mark its peers (and
// this process) hold, plus a margin for leases issued after the last mark was written, then checks the
// server again. opts.Margin zero sizes the margin from the marks' history (see defaultMargin). A server
// that is not fenced for the namespace is refused unless opts.Force. Run it only after checking why
// the server went back — it makes the server serve again.
func (p *Store) Repair(ctx context.Context, namespace, serverName string, opts allocator.RepairOptions) (allocator.RepairResult, error) {
	if err := allocator.ValidateName(namespace); err != nil {
		return allocator.RepairResult{}, err
	}
	if opts.Margin < 0 {
		return allocator.RepairResult{}, fmt.Errorf("%w: margin %d must not be negative", allocator.ErrInvalidSettings, opts.Margin)
	}
	var s *server
	for _, c := range p.set.All() {
		if c.Name() == serverName {
			s = c
		}
	}
	if s == nil {
		return allocator.RepairResult{}, fmt.Errorf("no ticket server named %q; the servers are %s", serverName, p.names())
	}
	v, err := s.inspect(ctx)
	if err != nil {
		return allocator.RepairResult{}, err
	}
	w := p.peerMarks(ctx, s, v.offset)[namespace]
	res := allocator.RepairResult{Server: s.Name(), Namespace: namespace, Watermark: w.Value, Holder: w.Holder}
	row, err := s.readRow(ctx, namespace, v.offset)
	missing := errors.Is(err, errRowMissing)
	switch {
	case missing && w.Value > 0:
		res.Fenced, res.Reason = true, fmt.Sprintf("no row for %q, but %s saw its counter at %d", namespace, w.Holder, w.Value)
	case missing:
	case err != nil:
		return res, err
	case row.step != v.increment || row.offset != v.offset:
		return res, fmt.Errorf("%w: namespace %q on %s has step %d offset %d but the server runs with auto_increment_increment %d offset %d; restore the server's settings before any repair",
			allocator.ErrMisconfigured, namespace, s.Name(), row.step, row.offset, v.increment, v.offset)
	case w.Replaced(v.identity):
		res.Fenced, res.Reason = true, failover.IdentityChanged(namespace, w, v.identity)
	case row.next < w.Value:
		res.Fenced, res.Reason = true, fmt.Sprintf("counter %d is below %d seen by %s", row.next, w.Value, w.Holder)
	}
	if !missing {
		res.Before = row.next
	}
	if !res.Fenced && !opts.Force {
		return res, fmt.Errorf("%w: %s is not fenced for namespace %q (its counter %d is at or above every water mark, the highest %d): there is nothing to repair. Check the server name; to move the counter anyway, give --force",
			allocator.ErrMisconfigured, s.Name(), namespace, res.Before, res.Watermark)
	}
	settings := row
	if missing {
		if settings, err = p.set.Latest(ctx, namespace); err != nil {
			return res, err
		}
	}
	res.Margin, res.MarginWhy = opts.Margin, "given"
	if opts.Margin == 0 {
		res.Margin, res.MarginWhy = p.defaultMargin(ctx, s, v, namespace, settings.ns.MaxBlockSize)
	}
	// The newest settings the servers hold: the margin stops at the higher of their ceiling and the
	// row's own, and the repaired row takes theirs (see failover.NoCeiling).
	start, maxID := settings.ns.Start, failover.NoCeiling
	newest, newestErr := p.set.Latest(ctx, namespace)
	if newestErr == nil {
		start, maxID = max(start, newest.ns.Start), max(settings.ns.WithDefaults().MaxID, newest.ns.WithDefaults().MaxID)
	}
	base, from := failover.RepairBase(res.Watermark, res.Before, start)
	if from != "" {
		res.MarginWhy += "; " + from
	}
	target, clamped := failover.RepairTarget(base, res.Margin, v.increment, v.offset, maxID)
	if clamped {
		res.MarginWhy += "; " + failover.ClampedMargin(s.Name(), maxID)
	}
	switch {
	case missing:
		_, err = s.insertRow(ctx, v, settings, target)
	case newestErr == nil:
		// The ceiling set last, by its time, as a namespace change writes it; a row restored from
		// before a lowering would otherwise serve up to its old ceiling to a process that has not read
		// the settings since. (The counter may end above it: the server then has nothing to issue.)
		_, err = s.ctl.ExecContext(ctx, `UPDATE ticketd_namespaces SET next_id = GREATEST(next_id, ?),
			max_id = IF(? > max_id_us OR (? = max_id_us AND ? < max_id), ?, max_id), max_id_us = GREATEST(max_id_us, ?)
			WHERE name = ? AND step = ? AND id_offset = ?`,
			target, newest.ceilingUS, newest.ceilingUS, newest.ns.WithDefaults().MaxID, newest.ns.WithDefaults().MaxID, newest.ceilingUS, namespace, v.increment, v.offset)
	default:
		_, err = s.ctl.ExecContext(ctx, "UPDATE ticketd_namespaces SET next_id = GREATEST(next_id, ?) WHERE name = ? AND step = ? AND id_offset = ?",
			target, namespace, v.increment, v.offset)
	}
	if err != nil {
		return res, err
	}
	if row, err = s.readRow(ctx, namespace, v.offset); err != nil {
		return res, err
	}
	res.After, res.Margin = row.next, row.next-base
	s.marks.Observe(namespace, failover.Mark{Value: row.next, Holder: "ticketd repair", Identity: v.identity})
	p.cfg.Logger.Warn("ticket server repaired", "server", s.Name(), "namespace", namespace, "before", res.Before,
		"watermark", res.Watermark, "margin", res.Margin, "after", res.After, "why", res.MarginWhy)
	if !s.Usable() {
		if err := s.Revive(ctx); err != nil && !errors.Is(err, allocator.ErrFenced) {
			return res, err
		}
	}
	return res, nil
}

// defaultMargin sizes a repair's margin from the highest lease rates the peers recorded: of every
// process together, from every server (any of which can take the whole fleet's demand when the others
// are cut off; see failover.ShiftedPeak), and of the fastest one process.
func (p *Store) defaultMargin(ctx context.Context, s *server, v serverVars, namespace string, maxBlock int64) (int64, string) {
	var peaks failover.Peaks
	fleet := map[int64]int64{}
	for _, peer := range p.set.All() {
		if peer == s {
			continue
		}
		qctx, cancel := p.cfg.Runtime.Timeout(ctx, p.cfg.AttemptTimeout)
		rows, err := peer.ctl.QueryContext(qctx, "SELECT peer_offset, fleet_peak_per_s, peak_per_s, interval_us FROM ticketd_lease_rates WHERE namespace = ?", namespace)
		if err == nil {
			for rows.Next() {
				var offset, fleetPeak, processPeak, intervalUS int64
				if rows.Scan(&offset, &fleetPeak, &processPeak, &intervalUS) != nil {
					break
				}
				fleet[offset] = max(fleet[offset], fleetPeak)
				peaks.Process = max(peaks.Process, processPeak)
				peaks.Interval = max(peaks.Interval, time.Duration(intervalUS)*time.Microsecond)
			}
			rows.Close()
		}
		cancel()
	}
	peaks.Fleet = failover.ShiftedPeak(fleet, len(p.set.All()))
	return failover.RepairMargin(peaks, p.cfg.WatermarkInterval, maxBlock, v.increment)
}
