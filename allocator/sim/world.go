// Package sim is a deterministic simulation of a ticketd fleet: ticket servers that answer the MySQL
// backend's statements, ticketd processes that run the real backend and failover set on simulated
// time, an admin, and a network, all in one goroutine and drawn from one seed. It explores schedules
// of crashes, restores, replica promotions, settings changes and network faults, and checks after
// every step that no ID was issued twice, above the ceiling in force or below the start.
package sim

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
)

// Off switches guard mechanisms off in the simulation, one at a time, to show that each is needed:
// the simulator must then find a violation.
type Off struct {
	// Floors: the lease statement (and the settings change) ignores the floor.
	Floors bool
	// PeerMarks: the servers answer the reads of the water marks, rates and row copies with nothing.
	PeerMarks bool
	// Identity: a replica promoted in a server's place answers with the old server's @@server_id.
	Identity bool
	// CeilingBound: the lease statement bounds a lease by its row's max_id alone, not by the lower of
	// it and the ceiling the process knows.
	CeilingBound bool
	// RepairMargin: repair moves a fenced server just past the highest mark (a margin of one ID).
	RepairMargin bool
	// OlderRelease: the servers answer the check for a process of an older release (its lease rates
	// of the last olderLeaseWindow) with nothing, so a ceiling is set while one's reports are seen.
	OlderRelease bool
}

// Names are the names of the mechanisms switched off, as ticketd-bench sim --off takes them.
func (o Off) Names() []string {
	var out []string
	for _, m := range []struct {
		on   bool
		name string
	}{{o.Floors, "floors"}, {o.PeerMarks, "peer-marks"}, {o.Identity, "identity"}, {o.CeilingBound, "ceiling-bound"}, {o.RepairMargin, "repair-margin"}, {o.OlderRelease, "older-release"}} {
		if m.on {
			out = append(out, m.name)
		}
	}
	return out
}

func (o Off) flag() string {
	if n := o.Names(); len(n) > 0 {
		return " --off " + strings.Join(n, ",")
	}
	return ""
}

// Link states between a party and a server.
const (
	linkOK = iota
	linkCut
	linkLossy // replies are lost after the statement ran: its outcome is unknown to the caller
	linkSlow  // every statement takes a while
)

const (
	namespace = "ns"
	interval  = 2 * time.Second // the water-mark interval
)

// Server is one simulated ticket server.
type Server struct {
	name         string
	step, offset int64
	serverID     int64 // @@server_id: a promoted replica has its own
	up           bool
	epoch        int // a restart breaks every connection
	// bootAt is when the server last started, and connections how many connections it took since:
	// its Uptime and Connections.
	bootAt      time.Time
	connections int64
	data        *data
	snaps       []snapshot
	// wentBack is when the server last went back in time (restored, lost, replaced) and was not
	// repaired since; zero when it did not.
	wentBack time.Time
	// cleanSince is when the server was last repaired or, never having gone back, zero.
	cleanSince time.Time
	// steadySince is when the server last came up, went back, or had a link change.
	steadySince time.Time
	// peak is the highest counter the server ever had for the namespace: what it issued below.
	peak int64
	// unmarked is the highest counter after a lease made by a process that had reached none of the
	// server's peers (down, cut off, replies lost) for more than a water-mark interval: its marks
	// could not be written until it reached one again, or ever, when it ended first, and a repair's
	// margin covers only a few intervals of leases. The guarantees leave a server that goes back in
	// time before a peer's mark passes it to the operator (see legal). Leases of a shorter cut, such as
	// a fleet's that loses its way to a peer and crashes within the interval, are the margin's.
	unmarked int64
	// hist is the server's counter after each lease, in time order: how fast the fleet leased there.
	hist []counterAt
}

type counterAt struct {
	at  time.Time
	c   int64 // the counter after the lease
	cum int64 // what every lease from the server took so far, in counter units (a repair or a start advance that moves the counter takes nothing)
}

// burst says whether what s issued above its peers' highest mark (marked) is more than a repair's
// margin covers at the fleet's own pace: three water-mark intervals at the most it ever leased there
// in one interval (averaged over two) before it passed that mark, or ten of the largest blocks. A fleet
// that leases far faster in its last seconds than it ever did before outruns any margin sized from its
// past, which the guarantees leave out.
func (s *Server) burst(marked, maxBlock int64) (unmarked, allowed int64) {
	h := s.hist
	first := len(h)
	for i, e := range h {
		if e.c > marked {
			first = i
			break
		}
	}
	if first == len(h) {
		return 0, 0
	}
	// The pace the peers can have measured: what was leased within two intervals, by the interval,
	// once a first interval had passed (a process's first report of its pace carries no rate).
	var peak int64
	lo := 0
	for j := 0; j < first; j++ {
		if h[j].at.Sub(h[0].at) < interval {
			continue
		}
		for h[j].at.Sub(h[lo].at) >= 2*interval {
			lo++
		}
		var base int64 // what was taken before h[lo]
		if lo > 0 {
			base = h[lo-1].cum
		}
		peak = max(peak, (h[j].cum-base)/2)
	}
	for _, e := range h[first:] {
		unmarked = max(unmarked, e.c-marked)
	}
	return unmarked, max(3*peak, 10*maxBlock*s.step)
}

// markedHigh is the highest mark the peers of s hold for it now.
func (s *Server) markedHigh(servers []*Server) int64 {
	var h int64
	for _, o := range servers {
		if o == s {
			continue
		}
		if m := o.data.marks[peerKey{namespace, s.offset}]; m != nil {
			h = max(h, m.high)
		}
	}
	return h
}

// peerless is how long the process has reached none of the peers of s, where it writes the marks of
// what it leases from s: zero while it reaches one (a slow link reaches), and otherwise since the last
// of them went down or had its link to the process fail.
func (w *World) peerless(party string, s *Server) time.Duration {
	var since time.Time
	for _, o := range w.servers {
		if o == s {
			continue
		}
		k := party + "/" + o.name
		st := w.links[k]
		if o.up && (st == linkOK || st == linkSlow) {
			return 0
		}
		t := w.faultAt[k]
		if !o.up {
			t = o.steadySince
		}
		if t.After(since) {
			since = t
		}
	}
	return w.now.Sub(since)
}

type snapshot struct {
	at   time.Time
	data *data
}

func (s *Server) notePeak() {
	if r := s.data.rows[rowKey{namespace, s.offset}]; r != nil {
		s.peak = max(s.peak, r.next)
	}
}

func (s *Server) identity(w *World) int64 {
	if w.Off.Identity {
		return s.offset
	}
	return s.serverID
}

// Proc is one simulated ticketd process.
type Proc struct {
	name  string
	store *mysql.Store
	tasks []*task
	order []int // the servers in the order its configuration lists them
	rate  int   // leases per lease event
	// asked is when it last began a lease: a lease reads the settings again when they are older than
	// settingsTTL, for the leases after it.
	// refreshed is when a lease of its last read the settings again (a lease does when they are
	// older than settingsTTL, for the leases after it), and read the rows that read got: from the
	// servers in its rotation (and the fenced ones) that it reached, steady, then.
	refreshed time.Time
	read      map[string]row
}

type task struct {
	every  time.Duration
	next   time.Time
	fn     func()
	kicked bool
	stop   <-chan struct{}
}

func (t *task) stopped() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// World is one schedule's simulated fleet. Not safe for concurrent use: it runs in one goroutine.
type World struct {
	Off   Off
	seed  uint64
	rng   *rand.Rand
	now   time.Time
	start time.Time

	servers []*Server
	procs   []*Proc // nil entries are processes that are down
	// olds are the processes of an older release still running, in a rolling upgrade (see older.go).
	olds      []*oldProc
	upgrading bool
	noUpgrade bool // no schedule is a rolling upgrade (see run)
	links     map[string]int
	faultAt   map[string]time.Time // when each link last became faulty
	// writesLeft cuts a party off after that many more writes (an admin cut off half-way).
	writesLeft map[string]int
	nextID     int64

	// What the invariants compare with.
	issued  map[int64][][2]int64 // by residue: the ranges issued
	ceiling int64                // the highest max_id a lease beginning now may reach
	// ceilingAt is when the admin last set max_id (zero: at the start).
	ceilingAt time.Time
	advances  []advance // the start advances that returned
	// leftLower are lowerings of max_id that failed but left the lower ceiling on some server (the
	// admin cut off before it could put it back): in force for a process once it read the settings
	// from a server that holds it, as for a start advance a server missed. The next change of the
	// settings, which writes newer ones, ends them.
	leftLower []advance
	// ceilingOlder are the older processes the ceiling in force binds (see seenOlder).
	ceilingOlder []string
	ns           allocator.Namespace // the settings the admin last set
	highest      int64

	trace     []line
	counts    map[string]int
	violation string
	ctx       context.Context
}

// logf appends a line to the trace. Its arguments are values (no pointers), kept as they are now and
// formatted only when the trace is read: most schedules pass, and their traces are never read.
func (w *World) logf(format string, args ...any) {
	w.trace = append(w.trace, line{at: w.now.Sub(w.start), format: format, args: args})
}

// line is one line of a trace, not yet formatted.
type line struct {
	at     time.Duration // since the schedule began
	format string
	args   []any
}

func (l line) String() string {
	return fmt.Sprintf("%8.3fs ", l.at.Seconds()) + fmt.Sprintf(l.format, l.args...)
}

func (w *World) fail(format string, args ...any) {
	if w.violation == "" {
		w.violation = fmt.Sprintf(format, args...)
		w.logf("VIOLATION: %s", w.violation)
	}
}

// reach reports whether a party reaches the server s over link (party/server) now; a slow link
// takes time.
func (w *World) reach(link string, s *Server) error {
	if !s.up {
		return fmt.Errorf("sim: %s: connection refused", s.name)
	}
	switch w.links[link] {
	case linkCut:
		return errNetwork
	case linkSlow:
		w.now = w.now.Add(time.Duration(50+w.rng.IntN(250)) * time.Millisecond)
	}
	return nil
}

func (w *World) replyLost(link string) bool {
	return w.links[link] == linkLossy && w.rng.IntN(2) == 0
}

// wrote counts a write by from, and cuts it off from every server once its budget is spent.
func (w *World) wrote(from string) {
	n, ok := w.writesLeft[from]
	if !ok {
		return
	}
	if n <= 0 {
		return
	}
	w.writesLeft[from] = n - 1
	if n-1 == 0 {
		for _, s := range w.servers {
			w.links[from+"/"+s.name] = linkCut
		}
	}
}

// runtime is what a process's failover set runs on: the world's clock and randomness; waits move the
// clock; background work is stepped by the world.
func (w *World) runtime(p *Proc) allocator.Runtime {
	return allocator.Runtime{
		Now:     func() time.Time { return w.now },
		Float64: func() float64 { return w.rng.Float64() },
		Sleep: func(ctx context.Context, d time.Duration) bool {
			if ctx.Err() != nil {
				return false
			}
			w.now = w.now.Add(d)
			return true
		},
		Go: func(fn func()) { fn() },
		// The simulated servers answer at once: no real deadline passes within a schedule, and a
		// simulated wait (a slow link) is on the world's clock. The bounds are left out, so a call's
		// context is the caller's and no statement waits on a timer or a watching goroutine.
		Timeout: func(ctx context.Context, _ time.Duration) (context.Context, context.CancelFunc) {
			return ctx, func() {}
		},
		Every: func(d time.Duration, stop <-chan struct{}, fn func()) func() {
			if p == nil {
				return func() {}
			}
			t := &task{every: d, next: w.now.Add(d), fn: fn, stop: stop}
			p.tasks = append(p.tasks, t)
			return func() { t.kicked = true }
		},
	}
}

func (w *World) open(name string, order []int, p *Proc) (*mysql.Store, error) {
	cfg := mysql.Config{
		Failover: allocator.Failover{AttemptTimeout: 2 * time.Second, Timeout: 5 * time.Second, MinBackoff: 100 * time.Millisecond,
			MaxBackoff: 2 * time.Second, ProbeInterval: time.Second, WatermarkInterval: interval, SettingsTTL: 2 * time.Second, MaxConns: 4},
		Logger:  slog.New(slog.DiscardHandler),
		Runtime: w.runtime(p),
	}
	for _, i := range order {
		s := w.servers[i]
		cfg.Names = append(cfg.Names, s.name)
		cfg.Connectors = append(cfg.Connectors, connector{w: w, from: name, srv: s, link: name + "/" + s.name})
	}
	return mysql.Open(w.ctx, cfg)
}

// advance moves the clock by d, running each process's background work when it is due.
func (w *World) advance(d time.Duration) {
	target := w.now.Add(d)
	for i := 0; i < 10000; i++ {
		var next *task
		due := func(tasks []*task) {
			for _, t := range tasks {
				if !t.stopped() && !t.next.After(target) && (next == nil || t.next.Before(next.next)) {
					next = t
				}
			}
		}
		for _, p := range w.procs {
			if p != nil {
				due(p.tasks)
			}
		}
		for _, o := range w.olds {
			due(o.tasks)
		}
		if next == nil {
			break
		}
		if next.next.After(w.now) {
			w.now = next.next
		}
		w.runTask(next)
		w.kicks()
	}
	if target.After(w.now) {
		w.now = target
	}
	w.snapshot()
}

func (w *World) runTask(t *task) {
	t.kicked = false
	t.next = w.now.Add(t.every)
	t.fn()
}

// kicks runs the background work that was asked for soon.
func (w *World) kicks() {
	for round := 0; round < 4; round++ {
		ran := false
		for _, p := range w.procs {
			if p == nil {
				continue
			}
			for _, t := range p.tasks {
				if t.kicked && !t.stopped() {
					w.runTask(t)
					ran = true
				}
			}
		}
		if !ran {
			return
		}
	}
}

// snapshot keeps a copy of each server's data every half second, the last few seconds of it.
func (w *World) snapshot() {
	for _, s := range w.servers {
		s.notePeak()
		if !s.up {
			continue
		}
		if n := len(s.snaps); n > 0 && w.now.Sub(s.snaps[n-1].at) < 500*time.Millisecond {
			continue
		}
		s.snaps = append(s.snaps, snapshot{at: w.now, data: s.data.clone()})
		if len(s.snaps) > 16 {
			s.snaps = s.snaps[1:]
		}
	}
}

type advance struct {
	start int64
	at    time.Time
	// older are the processes of an older release the admin's check could see when a ceiling was set
	// (or a lowering tried): it binds them (see seenOlder, oldInForce).
	older []string
}

// settingsTTL is how long a process leases by the settings it read.
const settingsTTL = 2 * time.Second

// inForce is what binds a lease that begins now: the ceiling, and each server's start. A lower max_id
// is in force once the update returned (it returns only once every server holds it); a raise, also
// one that failed, may be used at once. A start advance that returned is in force at once on each
// server that holds it, and on the others from each process's next read of the settings: on every
// server once settingsTTL passed, while a server that holds it is up and reached by the process, and
// has been long enough to be back in its rotation and read (when none is, a process that did not read
// it cannot know it: the settings live on the servers).
type inForce struct {
	ceiling int64
	start   map[string]int64
}

func (w *World) inForce(p *Proc) inForce {
	f := inForce{ceiling: w.ceiling, start: map[string]int64{}}
	holds := func(r *row, a advance) bool { return r != nil && r.start >= a.start }
	here := func(s *Server) *row { return s.data.rows[rowKey{namespace, s.offset}] }
	prev, read := p.refreshed, p.read
	if w.now.Sub(p.refreshed) >= settingsTTL { // this lease reads them again, for the next ones
		p.refreshed, p.read = w.now, map[string]row{}
		rotation := map[string]bool{}
		for _, h := range p.store.Health() {
			rotation[h.Name] = h.Healthy || h.Fenced
		}
		for _, o := range w.servers {
			st := w.links[p.name+"/"+o.name]
			if r := here(o); r != nil && o.up && (st == linkOK || st == linkSlow) && rotation[o.name] && !w.now.Before(o.steadySince.Add(2*time.Second)) {
				p.read[o.name] = *r
			}
		}
	}
	// knows: a read of the settings since the change got a row that holds it. (A read at the same
	// instant as the change may have come first.)
	knows := func(holds func(*row) bool, at time.Time) bool {
		if !prev.After(at) {
			return false
		}
		for _, r := range read {
			if holds(&r) {
				return true
			}
		}
		return false
	}
	for _, s := range w.servers {
		for _, a := range w.advances {
			if knows(func(r *row) bool { return holds(r, a) }, a.at) || holds(here(s), a) {
				f.start[s.name] = max(f.start[s.name], a.start)
			}
		}
	}
	for _, l := range w.leftLower {
		lower := func(r *row) bool { // the lowering's own write, not an older ceiling a restore put back
			return r.maxID == l.start && r.maxIDUS >= l.at.Add(-time.Second).UnixMicro()
		}
		if knows(lower, l.at) {
			f.ceiling = min(f.ceiling, l.start)
		}
	}
	return f
}

// record checks a block against every invariant on IDs, then keeps it.
func (w *World) record(party string, b allocator.Block, f inForce) {
	ceiling, minStart := f.ceiling, f.start[b.Server]
	last := b.Start + (b.Size-1)*b.Step
	w.logf("  %s leased [%d..%d step %d] from %s", party, b.Start, last, b.Step, b.Server)
	if last > ceiling {
		w.fail("ID %d above max_id %d in force when the lease began (%s from %s)", last, ceiling, party, b.Server)
	}
	if b.Start < minStart {
		w.fail("ID %d below start %d (%s from %s)", b.Start, minStart, party, b.Server)
	}
	res := b.Start % b.Step
	for _, r := range w.issued[res] {
		if b.Start <= r[1] && r[0] <= last {
			w.fail("IDs %d..%d issued twice: in [%d..%d] before, and again to %s from %s", max(b.Start, r[0]), min(last, r[1]), r[0], r[1], party, b.Server)
		}
	}
	w.issued[res] = append(w.issued[res], [2]int64{b.Start, last})
	w.highest = max(w.highest, last)
	for _, s := range w.servers {
		if s.name != b.Server {
			continue
		}
		if w.peerless(party, s) > interval {
			s.unmarked = max(s.unmarked, last+1)
		}
		var cum int64
		if n := len(s.hist); n > 0 {
			cum = s.hist[n-1].cum
		}
		s.hist = append(s.hist, counterAt{w.now, last + 1, cum + b.Size*b.Step})
	}
}

// checkFences: a server that never went back in time is fenced by no process. (One that was repaired
// serves again once every fault healed: see settle.)
func (w *World) checkFences() {
	for _, p := range w.procs {
		if p == nil {
			continue
		}
		for _, h := range p.store.Health() {
			if !h.Fenced {
				continue
			}
			s := w.server(h.Name)
			if s.wentBack.IsZero() && s.cleanSince.IsZero() {
				w.fail("%s fences %s, which never went back in time: %s", p.name, s.name, h.Error)
			}
		}
	}
}

func (w *World) server(name string) *Server {
	for _, s := range w.servers {
		if s.name == name {
			return s
		}
	}
	panic("sim: no server " + name)
}

// Result is what one schedule did.
type Result struct {
	Seed      uint64
	Off       Off
	Steps     int
	Counts    map[string]int
	Violation string
	lines     []line
}

// Failed reports whether the schedule broke an invariant.
func (r Result) Failed() bool { return r.Violation != "" }

// Trace is the schedule's trace: the events, in order, each after its simulated time.
func (r Result) Trace() []string {
	out := make([]string, len(r.lines))
	for i, l := range r.lines {
		out[i] = l.String()
	}
	return out
}

// Report is the seed, the violation and the last lines of the trace: what a failure prints.
func (r Result) Report(lines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s\n", r.Seed, r.Violation)
	t := r.lines
	if len(t) > lines {
		fmt.Fprintf(&b, "  ... %d earlier lines\n", len(t)-lines)
		t = t[len(t)-lines:]
	}
	for _, l := range t {
		b.WriteString("  " + l.String() + "\n")
	}
	fmt.Fprintf(&b, "replay: ticketd-bench sim --seed %d --schedules 1%s", r.Seed, r.Off.flag())
	return b.String()
}

// Kinds returns the event kinds counted, sorted.
func Kinds(counts map[string]int) []string { return slices.Sorted(maps.Keys(counts)) }
