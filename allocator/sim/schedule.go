package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
)

// Run explores the schedule of one seed and checks the invariants after every step: no ID in two
// blocks; none above the ceiling in force when its lease began; none below the start once an advance
// returned; no server fenced that did not go back in time; and at the end, with every fault healed and
// every fence repaired as its message says, every server serves every process. The same seed and
// switches give the same schedule, trace and result.
func Run(seed uint64, off Off) Result { return run(seed, off, true) }

// run is Run; without upgrades, no schedule is a rolling upgrade: a seed found before they were
// drawn replays the schedule it found.
func run(seed uint64, off Off, upgrades bool) (res Result) {
	w := &World{noUpgrade: !upgrades, Off: off, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), links: map[string]int{}, faultAt: map[string]time.Time{}, writesLeft: map[string]int{},
		issued: map[int64][][2]int64{}, counts: map[string]int{}, ctx: context.Background(), nextID: 100}
	w.start = w.now
	defer func() {
		if r := recover(); r != nil {
			w.fail("panic: %v\n%s", r, debug.Stack())
		}
		for _, p := range w.procs {
			if p != nil {
				p.tasks = nil
				_ = p.store.Close()
			}
		}
		res = Result{Seed: seed, Off: off, Counts: w.counts, Violation: w.violation, lines: w.trace}
	}()
	w.schedule()
	return res
}

func (w *World) schedule() {
	n := 2 + w.rng.IntN(2)
	for i := range n {
		s := &Server{name: string(rune('a' + i)), step: int64(n), offset: int64(i + 1), serverID: int64(i + 1), up: true, data: newData()}
		s.bootAt = w.now.Add(-time.Hour) // up for a while before the run
		w.servers = append(w.servers, s)
	}
	maxBlock := 10 + w.rng.Int64N(91)
	w.ns = allocator.Namespace{Name: namespace, BlockSize: 1 + w.rng.Int64N(maxBlock), MaxBlockSize: maxBlock, MaxID: 2000 + w.rng.Int64N(30000)}
	w.ceiling = w.ns.MaxID
	w.logf("%d servers, namespace %q block %d max_id %d", n, namespace, w.ns.BlockSize, w.ns.MaxID)
	w.admin(func(st *mysql.Store) error {
		_, err := st.CreateNamespace(w.ctx, w.ns)
		return err
	})
	w.procs = make([]*Proc, 2+w.rng.IntN(4))
	for i := range w.procs {
		w.startProc(i)
	}
	if up := upgradeRand(w.seed); up.IntN(4) == 0 && !w.noUpgrade {
		w.upgrading = true
		for range 1 + up.IntN(2) {
			w.startOld()
		}
	}
	steps := 30 + w.rng.IntN(50)
	for range steps {
		w.step()
		w.kicks()
		w.checkFences()
		if w.violation != "" {
			return
		}
	}
	w.settle()
}

// gen numbers the incarnations of processes and admin runs: each has links of its own.
var incarnation = func(w *World) int { w.nextID++; return int(w.nextID) }

func (w *World) startProc(i int) {
	order := make([]int, len(w.servers))
	for k := range order {
		order[k] = k
	}
	note := ""
	if w.rng.IntN(4) == 0 {
		slices.Reverse(order)
		note = " (servers listed in reverse)"
	}
	p := &Proc{name: fmt.Sprintf("p%d.%d", i+1, incarnation(w)), order: order, rate: 1 + w.rng.IntN(3)}
	w.procs[i] = p // its background work registers as it opens
	st, err := w.open(p.name, order, p)
	if err != nil {
		w.procs[i] = nil
		w.logf("start %s%s: %v", p.name, note, short(err))
		return
	}
	p.store = st
	w.logf("start %s%s, %d leases per round", p.name, note, p.rate)
}

// admin runs fn against a Store opened for it alone, as the ticketd command does.
func (w *World) admin(fn func(*mysql.Store) error) error {
	name := fmt.Sprintf("admin.%d", incarnation(w))
	return w.adminAs(name, fn)
}

func (w *World) adminAs(name string, fn func(*mysql.Store) error) error {
	order := make([]int, len(w.servers))
	for k := range order {
		order[k] = k
	}
	st, err := w.open(name, order, nil)
	if err != nil {
		return err
	}
	err = fn(st)
	_ = st.Close()
	delete(w.writesLeft, name)
	for _, s := range w.servers {
		delete(w.links, name+"/"+s.name)
	}
	return err
}

var fenceCmd = regexp.MustCompile(`ticketd repair (\S+) --server (\S+)`)

// step applies one event drawn from the seed.
func (w *World) step() {
	type ev struct {
		kind   string
		weight int
		run    func()
	}
	p, pi := w.someProc()
	s := w.servers[w.rng.IntN(len(w.servers))]
	evs := []ev{
		{"tick", 20, func() { w.advance(time.Duration(100+w.rng.IntN(2500)) * time.Millisecond) }},
		{"lease", 20, func() { w.lease(p) }},
		{"fleet leases", 10, func() { w.fleetLeases() }},
		{"process crash", 2, func() { w.stopProc(pi, false) }},
		{"process stop", 2, func() { w.stopProc(pi, true) }},
		{"fleet crash", 1, func() { w.fleetCrash() }},
		{"process start", 4, func() { w.restartProc() }},
		{"server crash", 2, func() { w.peerFault(s, "server crash", func() { w.crash(s) }) }},
		{"server restart", 4, func() { w.restart(s) }},
		{"restore physical", 1, func() { w.goBack(s, "restore physical") }},
		{"restore logical", 1, func() { w.goBack(s, "restore logical") }},
		{"data loss", 1, func() { w.goBack(s, "data loss") }},
		{"replica promoted", 1, func() { w.goBack(s, "replica promoted") }},
		{"settings", 3, func() { w.settings() }},
		{"repair", 4, func() { w.repair() }},
		{"network fault", 3, func() { w.peerFault(s, "network fault", func() { w.netFault(p, s) }) }},
		{"network heal", 3, func() { w.heal() }},
	}
	if w.upgrading { // a rolling upgrade: processes of the older release lease until each is replaced
		evs = append(evs, ev{"older release lease", 12, func() {
			if len(w.olds) > 0 {
				w.oldLease(w.olds[w.rng.IntN(len(w.olds))])
			}
		}}, ev{"process upgraded", 3, func() { w.upgrade() }})
	}
	total := 0
	for _, e := range evs {
		total += e.weight
	}
	k := w.rng.IntN(total)
	for _, e := range evs {
		if k < e.weight {
			w.counts[e.kind]++
			e.run()
			return
		}
		k -= e.weight
	}
}

// peerFault applies a fault to s, unless a peer of s went back in time and is not repaired yet: the
// marks that show it went back are on s, and a process that cannot read them (one started while s is
// away) cannot tell, which the guarantees leave to the operator (restore a server only while its
// peers are up, until it is repaired).
func (w *World) peerFault(s *Server, kind string, fault func()) {
	for _, o := range w.servers {
		if o != s && !o.wentBack.IsZero() {
			w.counts["skipped: "+kind]++
			return
		}
	}
	fault()
}

func (w *World) someProc() (*Proc, int) {
	i := w.rng.IntN(len(w.procs))
	return w.procs[i], i
}

// drawLease draws what a lease asks for: a server to prefer (a third of the time; "" for none) and a
// size (half of the time; 0 for the namespace's block size).
func (w *World) drawLease() (prefer string, size int64) {
	if w.rng.IntN(3) == 0 {
		prefer = w.servers[w.rng.IntN(len(w.servers))].name
	}
	if w.rng.IntN(2) == 0 {
		size = 1 + w.rng.Int64N(w.ns.MaxBlockSize)
	}
	return prefer, size
}

func (w *World) lease(p *Proc) {
	if p == nil {
		return
	}
	for range p.rate {
		prefer, size := w.drawLease()
		f := w.inForce(p)
		b, err := p.store.LeaseFrom(w.ctx, namespace, size, prefer)
		if err != nil {
			w.logf("%s lease (prefer %q, size %d): %s", p.name, prefer, size, short(err))
			continue
		}
		w.record(p.name, b, f)
	}
}

// fleetLeases has every process lease at its rate, while a little time passes: a fleet under load.
func (w *World) fleetLeases() {
	for range 1 + w.rng.IntN(4) {
		for _, p := range w.procs {
			w.lease(p)
		}
		for _, o := range w.olds {
			w.oldLease(o)
		}
		w.advance(time.Duration(100+w.rng.IntN(400)) * time.Millisecond)
	}
}

// fleetCrash has the fleet lease at a steady pace for five water-mark intervals, then lose its way
// to one server and go on at that pace for up to one more interval, then crash together: the marks of
// what they leased last never reach that server. (A fleet that leases faster in its last seconds than
// it ever did before can outrun a repair's margin, which the guarantees leave out: the pace stays.)
func (w *World) fleetCrash() {
	for _, s := range w.servers {
		if !s.up || !s.wentBack.IsZero() {
			w.counts["skipped: fleet crash"]++
			return // a fleet under load is one whose servers serve
		}
	}
	for _, st := range w.links {
		if st != linkOK {
			w.counts["skipped: fleet crash"]++
			return
		}
	}
	pace := time.Duration(200+w.rng.IntN(300)) * time.Millisecond
	round := func() {
		for _, p := range w.procs {
			w.lease(p)
		}
		w.advance(pace)
	}
	for end := w.now.Add(5 * interval); w.now.Before(end); { // long enough for the peers to measure the pace
		round()
	}
	far := w.servers[w.rng.IntN(len(w.servers))]
	for _, p := range w.procs {
		if p != nil {
			w.links[p.name+"/"+far.name] = linkCut
			w.faultAt[p.name+"/"+far.name] = w.now
		}
	}
	far.steadySince = w.now
	w.logf("every process loses its way to %s", far.name)
	for end := w.now.Add(time.Duration(w.rng.Int64N(int64(interval)))); w.now.Before(end); {
		round()
	}
	for i := range w.procs {
		w.stopProc(i, false)
	}
}

func (w *World) stopProc(i int, marks bool) {
	p := w.procs[i]
	if p == nil {
		return
	}
	if !marks {
		for _, s := range w.servers {
			w.links[p.name+"/"+s.name] = linkCut
		}
	}
	w.procs[i] = nil
	p.tasks = nil
	_ = p.store.Close()
	for _, s := range w.servers {
		delete(w.links, p.name+"/"+s.name) // its links end with it
	}
	w.logf("%s %s", p.name, map[bool]string{true: "stops (writes its last marks)", false: "crashes (its last marks lost)"}[marks])
}

func (w *World) restartProc() {
	for i, p := range w.procs {
		if p == nil {
			w.startProc(i)
			return
		}
	}
}

func (w *World) crash(s *Server) {
	if !s.up {
		return
	}
	s.up, s.steadySince = false, w.now
	w.logf("server %s crashes", s.name)
}

func (w *World) restart(s *Server) {
	if s.up {
		return
	}
	s.up, s.steadySince = true, w.now
	s.boot(w.now)
	w.logf("server %s restarts", s.name)
}

// goBack takes a server back in time, when the guard's documented conditions hold (see legal).
func (w *World) goBack(s *Server, kind string) {
	if len(s.snaps) == 0 {
		return
	}
	snap := s.snaps[w.rng.IntN(len(s.snaps))]
	nd := snap.data.clone()
	if kind == "data loss" {
		nd = newData()
	}
	promote := kind == "replica promoted"
	if why := w.legal(s, snap.at, nd, promote); why != "" {
		w.counts["skipped: "+kind]++
		if strings.HasPrefix(why, "it issued") { // the limits of a repair's margin
			w.logf("server %s: no %s: %s", s.name, kind, why)
		}
		return
	}
	s.data, s.wentBack, s.steadySince = nd, w.now, w.now
	w.forgetLostAdvances()
	if r := nd.rows[rowKey{namespace, s.offset}]; r != nil && r.maxID > w.ceiling {
		// A copy older than a lowering puts the old ceiling back on this server: what holds a
		// process below the new one now is what it read from the others (see leftLower), until the
		// server's row catches up or the change is run again.
		w.leftLower = append(w.leftLower, advance{w.ceiling, w.ceilingAt, w.ceilingOlder})
		w.ceiling = r.maxID
	}
	if kind != "restore logical" {
		s.up = true
		s.boot(w.now)
	}
	if promote {
		w.nextID++
		s.serverID = w.nextID
	}
	r := nd.rows[rowKey{namespace, s.offset}]
	at := "no row"
	if r != nil {
		at = fmt.Sprintf("counter %d", r.next)
	}
	w.logf("server %s: %s from %.3fs (%s)", s.name, kind, snap.at.Sub(w.start).Seconds(), at)
}

// legal reports why a server may not go back in time to nd now, or "" when it may: the guard's
// documented conditions. Its peers have been up, and reached by every party, for two water-mark
// intervals, and none was repaired after the copy it goes back to was taken (the copy's marks of a
// replaced peer would fence it again); no other server went back without a repair; and a peer held, two intervals ago, a mark
// of the server that shows what it loses: above the counter it goes back to, for a row it loses, or
// with the old server's identity, for a replica promoted in its place.
func (w *World) legal(s *Server, at time.Time, nd *data, promote bool) string {
	old := map[string]*data{}
	for _, o := range w.servers {
		if o == s {
			continue
		}
		if !o.cleanSince.IsZero() && !at.After(o.cleanSince) && len(nd.marks) > 0 {
			return "a copy older than a peer's repair holds the marks of the server the peer replaced"
		}
		if !o.wentBack.IsZero() || !o.up || w.now.Sub(o.steadySince) < 2*interval {
			return "a peer is not steady"
		}
		// Every process has the peer back in rotation (its /readyz says so): one that still counts
		// it out after a fault does not read the marks it keeps when it checks the server.
		for _, p := range w.procs {
			if p == nil {
				continue
			}
			for _, h := range p.store.Health() {
				if h.Name == o.name && !h.Healthy {
					return "a peer is out of a process's rotation"
				}
			}
		}
		for k, st := range w.links {
			if st != linkOK && strings.HasSuffix(k, "/"+o.name) {
				return "a peer is not reached by every party"
			}
		}
		for _, sn := range o.snaps {
			if !sn.at.After(w.now.Add(-2 * interval)) {
				old[o.name] = sn.data
			}
		}
		if old[o.name] == nil {
			return "no mark old enough"
		}
	}
	marked := s.markedHigh(w.servers)
	if unmarked, allowed := s.burst(marked, w.ns.MaxBlockSize); unmarked > allowed {
		return fmt.Sprintf("it issued %d above the highest peer's mark %d, more than three intervals at the fleet's past pace there or ten blocks (%d)", unmarked, marked, allowed)
	}
	if s.unmarked > marked {
		return fmt.Sprintf("it issued up to %d to a process that had reached no peer for an interval, and no peer's mark holds it (the highest %d)", s.unmarked, marked)
	}
	// A raise of max_id that only this server took is lost with it, and what it issued under the raise
	// with it: the guarantees leave that to the operator (an admin's change is run again before a
	// restore), as they do a start advance.
	if cur := s.data.rows[rowKey{namespace, s.offset}]; cur != nil {
		higher := true
		for _, o := range w.servers {
			if r := o.data.rows[rowKey{namespace, o.offset}]; o != s && r != nil && r.maxID >= cur.maxID {
				higher = false
			}
		}
		if r := nd.rows[rowKey{namespace, s.offset}]; higher && (r == nil || r.maxID < cur.maxID) {
			return "a raise of max_id only this server took would be lost"
		}
	}
	s.notePeak()
	next := nd.rows[rowKey{namespace, s.offset}]
	if s.peak == 0 && !promote {
		return "" // it never issued: nothing to lose
	}
	for _, od := range old {
		m := od.marks[peerKey{namespace, s.offset}]
		switch {
		case m == nil:
		case promote && m.identity != "" && len(w.olds) == 0:
			return ""
		case (!promote || len(w.olds) > 0) && next == nil && m.high > 0:
			// A process of an older release records no identity, and knows a promoted replica only
			// by its counters: while one runs, a promotion is drawn only when they show it.
			return ""
		case (!promote || len(w.olds) > 0) && next != nil && (next.next >= s.peak || m.high > next.next):
			return ""
		}
	}
	return "no peer's mark shows it"
}

// forgetLostAdvances drops the start advances that no server holds any more: one that reached only
// the server that went back is lost with it, which the guarantees do not cover (an admin's change
// is run again after a restore).
func (w *World) forgetLostAdvances() {
	kept := w.advances[:0]
	for _, a := range w.advances {
		held := false
		for _, s := range w.servers {
			if r := s.data.rows[rowKey{namespace, s.offset}]; r != nil && r.start >= a.start {
				held = true
			}
		}
		if held {
			kept = append(kept, a)
		} else {
			w.logf("start advance to %d lost with the restore (not a guarantee)", a.start)
		}
	}
	w.advances = kept
}

func (w *World) settings() {
	ns := w.ns
	kind := []string{"max_id lowered", "max_id raised", "start advanced", "block sizes"}[w.rng.IntN(4)]
	switch kind {
	case "max_id lowered":
		ns.MaxID = max(w.highest, w.ns.Start, 1) + w.rng.Int64N(1000) // 0 would mean no ceiling
		if ns.MaxID >= w.ns.MaxID {
			return
		}
	case "max_id raised":
		ns.MaxID += 1 + w.rng.Int64N(20000)
	case "start advanced":
		ns.Start = max(w.highest, w.ns.Start) + w.rng.Int64N(2000)
		if ns.Start > ns.MaxID {
			return
		}
	case "block sizes":
		ns.BlockSize = 1 + w.rng.Int64N(ns.MaxBlockSize)
	}
	w.leftLower = nil // every change writes settings newer than theirs
	began := w.now
	name := fmt.Sprintf("admin.%d", incarnation(w))
	cut := ""
	if w.rng.IntN(3) == 0 {
		w.writesLeft[name] = 1 + w.rng.IntN(len(w.servers))
		cut = fmt.Sprintf(", cut off after %d writes", w.writesLeft[name])
	}
	var got allocator.Namespace
	var older []string // what the change binds, should it set a ceiling (see seenOlder)
	err := w.adminAs(name, func(st *mysql.Store) error {
		older = w.seenOlder(name, st, ns.MaxID)
		var err error
		got, err = st.UpdateNamespace(w.ctx, ns)
		return err
	})
	if err != nil {
		// Not in force; a raise may still have reached some server, and a lowering stayed on those
		// it could not be taken back from.
		w.ceiling = max(w.ceiling, ns.MaxID)
		if kind == "max_id lowered" {
			w.leftLower = append(w.leftLower, advance{ns.MaxID, w.now, older})
		}
		w.logf("admin: %s (max_id %d, start %d, block %d)%s: %s", kind, ns.MaxID, ns.Start, ns.BlockSize, cut, short(err))
		return
	}
	if ns.MaxID != w.ceiling {
		w.ceilingAt, w.ceilingOlder = w.now, older
		if len(w.covering(began)) > 0 && ns.MaxID < w.ceiling {
			w.counts["ceiling set within a minute of an older lease"]++
		}
	}
	w.ns, w.ceiling = ns, ns.MaxID
	w.ns.Start = max(w.ns.Start, got.Start)
	if got.Start > 1 {
		w.advances = append(w.advances, advance{got.Start, w.now, nil})
	}
	w.logf("admin: %s (max_id %d, start %d, block %d)%s: done", kind, ns.MaxID, got.Start, ns.BlockSize, cut)
}

// repair runs the repairs the processes' fence messages ask for, each once.
func (w *World) repair() {
	done := map[string]bool{}
	for _, p := range w.procs {
		if p == nil {
			continue
		}
		for _, h := range p.store.Health() {
			if m := fenceCmd.FindStringSubmatch(h.Error); h.Fenced && m != nil && !done[m[0]] {
				done[m[0]] = true
				w.repairAs(m[1], m[2])
			}
		}
	}
}

func (w *World) repairAs(ns, name string) {
	s := w.server(name)
	for _, o := range w.servers {
		if o != s && !o.up {
			w.counts["skipped: repair"]++
			return // an operator repairs with every peer answering: the marks are there
		}
	}
	var opts allocator.RepairOptions
	if w.Off.RepairMargin {
		opts.Margin = 1
	}
	var res allocator.RepairResult
	err := w.admin(func(st *mysql.Store) error {
		var err error
		res, err = st.Repair(w.ctx, ns, name, opts)
		if err != nil && strings.Contains(err.Error(), "give --force") {
			// A process fences the server by a mark the admin cannot see (the peer that held it lost
			// it): as the message says, the operator forces the repair.
			opts.Force = true
			res, err = st.Repair(w.ctx, ns, name, opts)
		}
		return err
	})
	if err != nil {
		w.logf("admin: repair %s --server %s: %s", ns, name, short(err))
		return
	}
	if !w.exhausted(s) { // at max_id, a repair moves nothing: the server stays as it came back
		s.wentBack, s.cleanSince = time.Time{}, w.now
	}
	w.logf("admin: repair %s --server %s: %d -> %d (mark %d, margin %d)", ns, name, res.Before, res.After, res.Watermark, res.Margin)
}

func (w *World) netFault(p *Proc, s *Server) {
	if p == nil {
		return
	}
	st := []int{linkCut, linkLossy, linkSlow}[w.rng.IntN(3)]
	w.links[p.name+"/"+s.name] = st
	w.faultAt[p.name+"/"+s.name] = w.now
	s.steadySince = w.now
	w.logf("network %s <-> %s: %s", p.name, s.name, []string{"ok", "cut", "replies lost", "slow"}[st])
}

func (w *World) heal() {
	for _, k := range Kinds(w.links) {
		if w.links[k] != linkOK {
			delete(w.links, k)
			for _, s := range w.servers {
				if len(k) > len(s.name) && k[len(k)-len(s.name)-1:] == "/"+s.name {
					s.steadySince = w.now
				}
			}
			w.logf("network %s: ok", k)
			return
		}
	}
}

// settle heals every fault, repairs every fence as its message says, and checks that every server
// serves every process.
func (w *World) settle() {
	w.logf("settle: every link healed, every server up, every process started")
	for len(w.olds) > 0 { // the rolling upgrade ends
		w.stopOld(0, true)
	}
	clear(w.links)
	for _, s := range w.servers {
		w.restart(s)
	}
	for i, p := range w.procs {
		if p == nil {
			w.startProc(i)
		}
	}
	w.advance(2 * interval)
	for range 3 {
		w.repair()
		w.advance(interval + interval/2)
	}
	w.advance(2 * interval)
	w.checkFences()
	for _, p := range w.procs {
		if p == nil {
			w.fail("a process cannot start with every server up")
			continue
		}
		for _, h := range p.store.Health() {
			switch {
			case w.exhausted(w.server(h.Name)):
				// Nothing left to issue: a repair stops at max_id, and what it says then is the check.
			case h.Fenced:
				w.fail("%s still fences %s after the repairs: %s", p.name, h.Name, h.Error)
			case !h.Healthy:
				w.fail("%s keeps %s out of rotation after every fault healed and every fence was repaired: %s", p.name, h.Name, h.Error)
			}
		}
		for _, s := range w.servers {
			f := w.inForce(p)
			b, err := p.store.LeaseFrom(w.ctx, namespace, 1, s.name)
			switch {
			case errors.Is(err, allocator.ErrExhausted):
			case err != nil:
				w.fail("%s cannot lease after every fault healed and every fence was repaired: %v", p.name, err)
			default:
				w.record(p.name, b, f)
			}
		}
	}
}

// exhausted reports whether a server may have no ID left below the namespace's max_id: the lowest
// any server holds, which a process that read it keeps its leases below.
func (w *World) exhausted(s *Server) bool {
	r := s.data.rows[rowKey{namespace, s.offset}]
	if r == nil {
		return false
	}
	ceiling := w.ns.MaxID
	for _, o := range w.servers {
		for _, or := range o.data.rows {
			ceiling = min(ceiling, or.maxID)
		}
	}
	return r.next > ceiling
}

// short is the first words of an error: what the trace shows.
func short(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
