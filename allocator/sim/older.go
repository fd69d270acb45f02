package sim

import (
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
	"github.com/ticketd/ticketd/allocator/mysql"
)

// A rolling upgrade. In a quarter of the schedules (drawn from a generator of their own, so that the
// other schedules stay as they were) one or two processes start as ticketd 0.1.0, the release before
// schema 6, and are replaced by processes of this release as the seed draws. Such a process is not the
// old code: it sends the statements 0.1.0 sent (taken from its source), so that the simulated servers
// answer them as the real ones would:
//
//   - the lease UPDATE bounded by its row's max_id alone (no ceiling known from the settings), and
//     the last lease before the ceiling;
//   - the settings read, the newest row by updated_us, from every server it reaches, every settingsTTL;
//   - the floors: the highest end it leased from a server, raised to the peers' marks and row copies
//     of it, read before each lease (0.1.0 read them every water-mark interval: reading them more often
//     keeps the model within the guard's own limit of the last interval);
//   - every water-mark interval and when it stops, the marks of what it leased (no identity: an empty
//     one) and its lease rate, with its own clock's time in updated_us, into each peer it reaches; the
//     rates of an interval whose writes fail are lost, as 0.1.0 lost them.
//
// It does not create rows for a server that missed the namespace (the schedules create it on every
// server), change settings or repair.
//
// The envelope: a change that sets a ceiling binds an older process only when, as it begins, a server
// the admin's check reads (in its rotation, up and reached) holds a lease-rate report of that process
// from within olderLeaseWindow (see seenOlder): what the product can see, and refuses. The leases it made
// after its last report that reached such a server (up to one water-mark interval, longer while its
// reports reach none) are outside it: a change made then is the operator's, as the upgrade procedure
// says (replace every older process before setting a ceiling), and the process may lease above it.

// olderLeaseWindow is mysql's: a lease-rate report of an older release within it keeps a ceiling from
// being set.
const olderLeaseWindow = time.Minute

// releaseBefore6 is the release whose statements the older processes send.
const releaseBefore6 = "0.1.0"

// The statements of 0.1.0, as it sent them.
const (
	oldLeaseSQL = `UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(GREATEST(next_id, ?) + ? * ?)
	WHERE name = ? AND step = ? AND id_offset = ? AND next_id >= ? AND MOD(next_id, ?) = ?
	AND ? <= max_block_size AND GREATEST(next_id, ?) <= 9223372036854775807 - ? * ?
	AND GREATEST(next_id, ?) <= max_id - (? - 1) * ?`
	oldLastLeaseSQL = `UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(?)
	WHERE name = ? AND step = ? AND id_offset = ? AND next_id = ? AND next_id >= ? AND max_id = ?
	AND ? <= max_block_size`
	oldRowColumns = "name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, max_id, updated_us"
	oldMarkSQL    = `INSERT INTO ticketd_watermarks (namespace, peer_offset, high_water, updated_us)
			VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE high_water = GREATEST(high_water, VALUES(high_water)), updated_us = VALUES(updated_us)`
	oldRateSQL = `INSERT INTO ticketd_lease_rates (namespace, peer_offset, peak_per_s, updated_us)
			VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE peak_per_s = GREATEST(peak_per_s, VALUES(peak_per_s)), updated_us = VALUES(updated_us)`
	oldVarsSQL = "SELECT @@GLOBAL.auto_increment_increment, @@GLOBAL.auto_increment_offset"
)

// oldProc is a process of the release before schema 6.
type oldProc struct {
	name  string
	dbs   map[string]*sql.DB // by server
	tasks []*task
	stop  chan struct{}
	// seen is the highest end it leased from each server; written, what of it each peer holds
	// (peer/server); floor, what it requires of each server's counter.
	seen, floor map[string]int64
	written     map[string]int64
	// units is what it leased from each server since its rates were last taken, and taken when.
	units map[string]int64
	taken time.Time
	// settings are those it leases by, read at settingsAt.
	settings   row
	settingsAt time.Time
	// leases are the times it leased (see covering; what binds it is its reports, see seenOlder).
	leases []time.Time
}

// upgradeRand draws whether a schedule is a rolling upgrade, and how many older processes it has,
// apart from the schedule's own generator: the other schedules stay exactly as they were.
func upgradeRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^0x5bd1e9955bd1e995, seed+0x27d4eb2f165667c5))
}

func (w *World) startOld() {
	o := &oldProc{name: fmt.Sprintf("old%d.%d", len(w.olds)+1, incarnation(w)), dbs: map[string]*sql.DB{}, stop: make(chan struct{}),
		seen: map[string]int64{}, floor: map[string]int64{}, written: map[string]int64{}, units: map[string]int64{}, taken: w.now}
	for _, s := range w.servers {
		db := sql.OpenDB(connector{w: w, from: o.name, srv: s, link: o.name + "/" + s.name})
		db.SetMaxIdleConns(1)
		o.dbs[s.name] = db
	}
	o.tasks = []*task{{every: interval, next: w.now.Add(interval), fn: func() { w.oldWrite(o) }, stop: o.stop}}
	w.olds = append(w.olds, o)
	w.logf("start %s (release %s, before schema 6: leases below its row's max_id alone)", o.name, releaseBefore6)
}

// stopOld ends an older process: a stop writes its last marks and rates (0.1.0 did at Close), a crash
// loses them.
func (w *World) stopOld(i int, marks bool) {
	o := w.olds[i]
	if marks {
		w.oldWrite(o)
	}
	close(o.stop)
	o.tasks = nil
	for _, db := range o.dbs {
		_ = db.Close()
	}
	w.olds = append(w.olds[:i], w.olds[i+1:]...)
	for _, s := range w.servers {
		delete(w.links, o.name+"/"+s.name)
	}
	w.logf("%s %s", o.name, map[bool]string{true: "stops (writes its last marks and rates)", false: "crashes (its last marks and rates lost)"}[marks])
}

// upgrade replaces an older process by one of this release, as a rolling upgrade does.
func (w *World) upgrade() {
	if len(w.olds) == 0 {
		return
	}
	i := w.rng.IntN(len(w.olds))
	w.stopOld(i, w.rng.IntN(4) != 0)
	w.procs = append(w.procs, nil)
	w.startProc(len(w.procs) - 1)
}

// oldWrite is the background work of 0.1.0 every water-mark interval: the marks of what it leased from
// each server and its lease rate there, into each peer it reaches.
func (w *World) oldWrite(o *oldProc) {
	now := w.now
	elapsed := now.Sub(o.taken)
	o.taken = now
	for _, s := range w.servers {
		units := o.units[s.name]
		o.units[s.name] = 0
		var rate int64
		if units > 0 {
			rate = max(1, int64(math.Round(float64(units)/max(elapsed.Seconds(), 1e-3))))
		}
		for _, peer := range w.servers {
			if peer == s {
				continue
			}
			db := o.dbs[peer.name]
			key := peer.name + "/" + s.name
			if high := o.seen[s.name]; high > o.written[key] {
				if _, err := db.ExecContext(w.ctx, oldMarkSQL, namespace, s.offset, high, now.UnixMicro()); err != nil {
					continue
				}
				o.written[key] = high
			}
			if rate > 0 {
				_, _ = db.ExecContext(w.ctx, oldRateSQL, namespace, s.offset, rate, now.UnixMicro())
			}
		}
	}
}

// oldRow reads a row as 0.1.0 did.
func oldRow(db *sql.DB, w *World, where string, args ...any) (row, bool) {
	var r row
	err := db.QueryRowContext(w.ctx, "SELECT "+oldRowColumns+" FROM ticketd_namespaces "+where, args...).Scan(
		&r.name, &r.next, &r.step, &r.offset, &r.start, &r.block, &r.maxBlock, &r.ttlMS, &r.maxID, &r.updatedUS)
	return r, err == nil
}

// oldLease is one lease of an older process: from the preferred server, or the first that serves.
func (w *World) oldLease(o *oldProc) {
	prefer, size := w.drawLease()
	// The settings: the newest row of every server it reaches, read again once settingsTTL passed.
	if o.settingsAt.IsZero() || w.now.Sub(o.settingsAt) >= settingsTTL {
		found := false
		for _, s := range w.servers {
			if r, ok := oldRow(o.dbs[s.name], w, "WHERE name = ? ORDER BY updated_us DESC LIMIT 1", namespace); ok && (!found || r.updatedUS > o.settings.updatedUS) {
				o.settings, found = r, true
			}
		}
		if found {
			o.settingsAt = w.now
		}
	}
	settings := o.settings
	if o.settingsAt.IsZero() {
		w.logf("%s lease: no settings read", o.name)
		return
	}
	if size == 0 {
		size = settings.block
	}
	order := make([]*Server, 0, len(w.servers))
	for _, s := range w.servers {
		if s.name == prefer {
			order = append([]*Server{s}, order...)
		} else {
			order = append(order, s)
		}
	}
	for _, s := range order {
		f := w.oldInForce(o, settings, s)
		if b, ok := w.oldLeaseFrom(o, s, settings, size); ok {
			o.leases = append(o.leases, w.now)
			o.units[s.name] += b.Size * b.Step
			w.record(o.name, b, f)
			return
		}
	}
	w.logf("%s lease (prefer %q, size %d): no server served", o.name, prefer, size)
}

// oldLeaseFrom leases size IDs from s as 0.1.0 did: false when s does not serve.
func (w *World) oldLeaseFrom(o *oldProc, s *Server, settings row, size int64) (allocator.Block, bool) {
	db := o.dbs[s.name]
	var step, offset int64
	if err := db.QueryRowContext(w.ctx, oldVarsSQL).Scan(&step, &offset); err != nil {
		return allocator.Block{}, false
	}
	// The floor: its own leases there, raised to the peers' marks and copies of the server's row.
	floor := max(o.floor[s.name], o.seen[s.name])
	for _, peer := range w.servers {
		if peer == s {
			continue
		}
		for _, q := range []string{"SELECT namespace, high_water FROM ticketd_watermarks WHERE peer_offset = ?",
			"SELECT name, next_id FROM ticketd_namespaces WHERE id_offset = ?"} {
			rs, err := o.dbs[peer.name].QueryContext(w.ctx, q, offset)
			if err != nil {
				break
			}
			for rs.Next() {
				var ns string
				var h int64
				if rs.Scan(&ns, &h) == nil && ns == namespace {
					floor = max(floor, h)
				}
			}
			_ = rs.Close()
		}
	}
	o.floor[s.name] = floor
	first, ok := failover.FirstAtLeast(settings.start, step, offset)
	if !ok {
		return allocator.Block{}, false
	}
	res, err := db.ExecContext(w.ctx, oldLeaseSQL, first, size, step,
		namespace, step, offset, floor, step, offset%step, size, first, size, step, first, size, step)
	if err != nil {
		return allocator.Block{}, false
	}
	taken := size
	if n, _ := res.RowsAffected(); n == 0 {
		// whyNoLease: a counter below the floor fences the server; one at its row's max_id takes what
		// is left below it.
		r, ok := oldRow(db, w, "WHERE name = ? AND id_offset = ?", namespace, offset)
		if !ok || r.next < floor || r.step != step {
			return allocator.Block{}, false
		}
		base := max(r.next, first)
		if taken = allocator.Fit(base, step, size, min(r.maxID, math.MaxInt64-step)); taken == 0 {
			return allocator.Block{}, false
		}
		if res, err = db.ExecContext(w.ctx, oldLastLeaseSQL, base+taken*step, namespace, step, offset, r.next, floor, r.maxID, size); err != nil {
			return allocator.Block{}, false
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return allocator.Block{}, false
		}
	}
	end, err := res.LastInsertId()
	if err != nil {
		return allocator.Block{}, false
	}
	o.seen[s.name] = max(o.seen[s.name], end)
	return allocator.Block{Namespace: namespace, Server: s.name, Start: end - taken*step, Size: taken, Step: step}, true
}

// covering are the older processes that leased within olderLeaseWindow before t. It only counts the
// ceilings set then: whether such a change binds them is what the refusal could see (see seenOlder).
func (w *World) covering(t time.Time) []string {
	var out []string
	for _, o := range w.olds {
		for _, at := range o.leases {
			if !at.After(t) && t.Sub(at) < olderLeaseWindow {
				out = append(out, o.name)
				break
			}
		}
	}
	return out
}

// seenOlder are the older processes that a change to maxID, by the admin named admin through st,
// binds as it begins, as the refusal sees them: none unless it sets a ceiling (below the max_id of a
// row the admin reads); then each process of which a server the admin's check reads (in the admin's
// rotation, up and reached) holds a lease-rate report with updated_us within olderLeaseWindow (0.1.0
// writes one only for an interval in which it leased: each covers the leases before it). The product
// refuses such a change. It sees no more: the leases a process made since its last report that
// reached such a server (up to one water-mark interval; longer while its reports reach none) are not
// seen, and a change made then does not bind it: that is the operator's, as the upgrade procedure says.
func (w *World) seenOlder(admin string, st *mysql.Store, maxID int64) []string {
	rotation := map[string]bool{}
	for _, h := range st.Health() {
		rotation[h.Name] = h.Healthy || h.Fenced
	}
	var read []*Server
	lowers := false
	for _, s := range w.servers {
		if s.up && rotation[s.name] && w.links[admin+"/"+s.name] != linkCut {
			read = append(read, s)
			if r := s.data.rows[rowKey{namespace, s.offset}]; r != nil && maxID < r.maxID {
				lowers = true
			}
		}
	}
	var out []string
	since := w.now.Add(-olderLeaseWindow).UnixMicro()
	for _, o := range w.olds {
		if lowers && slices.ContainsFunc(read, func(s *Server) bool { return s.data.reports[o.name] > since }) {
			out = append(out, o.name)
		}
	}
	return out
}

// held reports whether a server holds the ceiling of l, written by its change (not an older one a
// restore put back): a lowering refused before it wrote set nothing.
func (w *World) held(l advance) bool {
	for _, s := range w.servers {
		if r := s.data.rows[rowKey{namespace, s.offset}]; r != nil && r.maxID == l.start && r.maxIDUS >= l.at.Add(-time.Second).UnixMicro() {
			return true
		}
	}
	return false
}

// oldInForce is what binds a lease of an older process from s that begins now, having read settings:
// the ceilings of this release bind it only through its row's max_id, which every server holds once a
// lowering returned; a ceiling a server lost (a restore from before it) or kept from a lowering that
// failed binds it when the change was made while the admin's check could see a report of its leases
// (see seenOlder): the product refuses such a change, and the upgrade procedure leaves any other to the
// operator. A start advance
// binds it on a server that holds it, and everywhere once it read settings that hold it.
func (w *World) oldInForce(o *oldProc, settings row, s *Server) inForce {
	f := inForce{ceiling: w.ceiling, start: map[string]int64{}}
	for _, l := range w.leftLower {
		if slices.Contains(l.older, o.name) && w.held(l) {
			f.ceiling = min(f.ceiling, l.start)
		}
	}
	here := s.data.rows[rowKey{namespace, s.offset}]
	for _, a := range w.advances {
		if settings.start >= a.start || (here != nil && here.start >= a.start) {
			f.start[s.name] = max(f.start[s.name], a.start)
		}
	}
	return f
}
