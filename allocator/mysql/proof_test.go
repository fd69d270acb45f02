package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// counterOf reads a namespace's counter on the server behind dsn.
func counterOf(t *testing.T, dsn, ns string) int64 {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var next int64
	if err := db.QueryRow("SELECT next_id FROM ticketd_namespaces WHERE name = ?", ns).Scan(&next); err != nil {
		t.Fatal(err)
	}
	return next
}

// TestIncrementChangedUnderALease: a lease to B waits for its row (another session holds the lock) and a
// second lease of the namespace queues behind it; then auto_increment_increment becomes 4 on both
// servers and B is checked again, which refuses it. When the lock goes, the waiting lease's block is
// built from the step its UPDATE used — every ID of it below B's counter, none outside B's range — and
// the queued lease does not run on B, now refused: it is served by A.
func TestIncrementChangedUnderALease(t *testing.T) {
	f := newFleet(t, nil)
	p := openStore(t, f.dsns, func(c *Config) { c.AttemptTimeout, c.Timeout = 30*time.Second, 60*time.Second })
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	nameA, nameB := p.Servers()[0], p.Servers()[1]
	var blocks []allocator.Block
	for _, s := range []string{nameA, nameB, nameA, nameB} {
		b, err := p.LeaseFrom(ctx, "orders", 10, s)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}

	// Another session holds B's row.
	dbB, err := sql.Open("mysql", f.dsns[1])
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	tx, err := dbB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SELECT next_id FROM ticketd_namespaces WHERE name = 'orders' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		b   allocator.Block
		err error
	}
	inFlight, queued := make(chan result, 1), make(chan result, 1)
	go func() { b, err := p.LeaseFrom(ctx, "orders", 10, nameB); inFlight <- result{b, err} }()
	waitFor(t, "the lease's UPDATE to wait for the row lock", func() bool {
		var n int
		err := dbB.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'UPDATE ticketd_namespaces SET next_id%'").Scan(&n)
		return err == nil && n == 1
	})
	sB := p.set.All()[1]
	go func() { b, err := p.LeaseFrom(ctx, "orders", 10, nameB); queued <- result{b, err} }()
	waitFor(t, "the second lease to queue behind the first", func() bool {
		sB.co.mu.Lock()
		defer sB.co.mu.Unlock()
		g := sB.co.pending["orders"]
		return g != nil && len(g.sizes) == 1
	})

	for _, m := range f.pair {
		testenv.Exec(t, m.DSN(""), "SET GLOBAL auto_increment_increment = 4")
	}
	err = sB.verifySince(ctx, time.Now()) // what a new connection to B does
	if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "auto_increment_increment is 4 on "+nameB) {
		t.Fatalf("B checked again after the increment changed: %v, want it refused", err)
	}
	// The operator puts A back before the lease in flight goes on: the queued
	// lease, refused by B, may open a new connection to A and check it, and A
	// must pass that check whenever it happens. B stays changed until both
	// leases have returned.
	testenv.Exec(t, f.pair[0].DSN(""), "SET GLOBAL auto_increment_increment = 2")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	first, second := <-inFlight, <-queued
	testenv.Exec(t, f.pair[1].DSN(""), "SET GLOBAL auto_increment_increment = 2")
	if first.err != nil || second.err != nil {
		t.Fatalf("leases: %v; %v", first.err, second.err)
	}
	counterB := counterOf(t, f.dsns[1], "orders")
	if b := first.b; b.Server == nameB {
		if last, _ := b.Last(); b.Step != 2 || last >= counterB {
			t.Fatalf("the lease in flight returned %v; B's counter is %d: the block is not the range its UPDATE took", b, counterB)
		}
	}
	if second.b.Server != nameA {
		t.Fatalf("the queued lease ran on B after B was refused: %v", second.b)
	}
	blocks = append(blocks, first.b, second.b)
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
}

// TestDyingPeerDoesNotTakeTheOtherDown: B dies; checking A again reads B's water marks, which fails.
// That says nothing about A: A stays in rotation and serves.
func TestDyingPeerDoesNotTakeTheOtherDown(t *testing.T) {
	f := newFleet(t, nil)
	// No background probe: nothing else notices B's death before A is checked.
	p := openStore(t, f.dsns, func(c *Config) { c.ProbeInterval = time.Hour })
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameA := p.Servers()[0]
	for _, s := range p.Servers() {
		if _, err := p.LeaseFrom(ctx, "orders", 10, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.pair[1].Kill(); err != nil {
		t.Fatal(err)
	}
	sA := p.set.All()[0]
	if err := sA.verifySince(ctx, time.Now()); err != nil {
		t.Fatalf("checking A while B is dead: %v", err)
	}
	if h := healthOf(p, nameA); !h.Healthy {
		t.Fatalf("A taken down by its dead peer: %+v", h)
	}
	if b, err := p.LeaseFrom(ctx, "orders", 10, nameA); err != nil || b.Server != nameA {
		t.Fatalf("lease from A: %v, %v", b, err)
	}
}

// TestChecksGoByTheStoresClock: whether a server is checked again goes by the Store's clock, not the
// wall's: a check is stamped with the clock's time when it starts, a check asked for before that time
// shares it, and one asked for once the clock has moved on runs again and sees what changed.
func TestChecksGoByTheStoresClock(t *testing.T) {
	f := newFleet(t, nil)
	start := time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC) // far from the wall clock
	var micros atomic.Int64
	micros.Store(start.UnixMicro())
	// No background probe or guard: only the checks the test asks for run.
	p := openStore(t, f.dsns, func(c *Config) {
		c.ProbeInterval, c.WatermarkInterval = time.Hour, time.Hour
		c.now = func() time.Time { return time.UnixMicro(micros.Load()).UTC() }
	})
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	sA := p.set.All()[0]
	sA.verifyMu.Lock()
	at := sA.verifiedAt
	sA.verifyMu.Unlock()
	if !at.Equal(start) {
		t.Fatalf("A's last check started at %v; want the Store's clock, %v", at, start)
	}
	for _, m := range f.pair {
		testenv.Exec(t, m.DSN(""), "SET GLOBAL auto_increment_increment = 4") // only a check that runs sees it
	}
	if err := sA.verifySince(ctx, start.Add(-time.Second)); err != nil {
		t.Fatalf("a check asked for before the last one started: %v; want it to share that one", err)
	}
	micros.Add(time.Minute.Microseconds())
	if err := sA.admit(ctx); !errors.Is(err, allocator.ErrMisconfigured) {
		t.Fatalf("admitting A a minute later on the Store's clock: %v; want a check that refuses the increment", err)
	}
}

// TestPeerWithoutWaterMarksIsRefused: B was upgraded without `ticketd migrate` (no water-mark table).
// The restored-backup guard cannot hold marks there, so B is refused, visibly, and A serves.
func TestPeerWithoutWaterMarksIsRefused(t *testing.T) {
	f := newFleet(t, nil)
	p := openStore(t, f.dsns, nil)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	testenv.Exec(t, f.dsns[1], "DROP TABLE ticketd_watermarks", "DELETE FROM ticketd_schema_migrations WHERE version >= 2")
	p2, err := Open(ctx, Config{DSNs: f.dsns, Logger: quiet})
	if err != nil {
		t.Fatalf("Open with B not migrated: %v (A alone can serve)", err)
	}
	defer p2.Close()
	nameA, nameB := p2.Servers()[0], p2.Servers()[1]
	h := healthOf(p2, nameB)
	if h.Healthy || !strings.Contains(h.Error, "ticketd migrate") {
		t.Fatalf("B without the water-mark table: %+v, want refused with `ticketd migrate`", h)
	}
	for range 5 {
		if b, err := p2.Lease(ctx, "orders", 10); err != nil || b.Server != nameA {
			t.Fatalf("lease: %v, %v; want A", b, err)
		}
	}
}

// TestRepairRefusesAHealthyServer: repairing a server that is not fenced is refused unless forced, and
// a forced repair says how far it moved the counter and why.
func TestRepairRefusesAHealthyServer(t *testing.T) {
	f := newFleet(t, func(c *Config) { c.WatermarkInterval = 50 * time.Millisecond })
	p := openStore(t, f.dsns, f.tweak)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders", MaxBlockSize: 1000}); err != nil {
		t.Fatal(err)
	}
	nameB := p.Servers()[1]
	for range 20 {
		if _, err := p.LeaseFrom(ctx, "orders", 100, nameB); err != nil {
			t.Fatal(err)
		}
	}
	before := counterOf(t, f.dsns[1], "orders")
	_, err := p.Repair(ctx, "orders", nameB, allocator.RepairOptions{})
	if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "not fenced") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("repair of a healthy server: %v", err)
	}
	if got := counterOf(t, f.dsns[1], "orders"); got != before {
		t.Fatalf("a refused repair moved the counter from %d to %d", before, got)
	}
	res, err := p.Repair(ctx, "orders", nameB, allocator.RepairOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fenced || res.Before != before || res.After != max(res.Watermark, res.Before)+res.Margin || res.Margin < 10*1000*2 || res.MarginWhy == "" ||
		res.After != counterOf(t, f.dsns[1], "orders") {
		t.Fatalf("forced repair %+v; counter was %d", res, before)
	}
}

// TestRollbackWithinTheMarkInterval is the guard's blind spot, stated: water marks reach the peers every
// WatermarkInterval, so a process that checks a server rolled back to a point after the last mark it
// can read admits the server. The process that leased past that point refuses the server at its next
// lease and writes its marks at once; from its next read of the marks the other process refuses the
// server too.
func TestRollbackWithinTheMarkInterval(t *testing.T) {
	f := newFleet(t, nil)
	ctx := context.Background()
	p1 := openStore(t, f.dsns, func(c *Config) { c.WatermarkInterval, c.Migrate = time.Hour, false })
	if _, err := p1.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameB := p1.Servers()[1]
	var blocks []allocator.Block
	lease := func(p *Store) (allocator.Block, error) {
		b, err := p.LeaseFrom(ctx, "orders", 10, nameB)
		if err == nil {
			blocks = append(blocks, b)
		}
		return b, err
	}
	if _, err := lease(p1); err != nil {
		t.Fatal(err)
	}
	restore, err := f.Backup(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := lease(p1); err != nil {
			t.Fatal(err)
		}
	}
	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	p2 := openStore(t, f.dsns, func(c *Config) { c.WatermarkInterval, c.Migrate = 50*time.Millisecond, false })
	if h := healthOf(p2, nameB); !h.Healthy {
		t.Fatalf("within the interval the new process cannot see the rollback, yet B is %+v", h)
	}
	if b, err := lease(p1); err == nil && b.Server == nameB {
		t.Fatalf("the process that leased past the restored point leased %v from B", b)
	}
	allocatortest.FencedHealth(t, p1, nameB)
	waitFor(t, "the other process to refuse B", func() bool { return healthOf(p2, nameB).Fenced })
	if b, err := lease(p2); err == nil && b.Server == nameB {
		t.Fatalf("after reading the marks the other process leased %v from B", b)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
}

// TestSettingChangedOnARunningServer: innodb_flush_log_at_trx_commit set to 2 on B while it serves takes
// B out of rotation within a water-mark interval, with the reason, although its connections stay open;
// set back, B serves again.
func TestSettingChangedOnARunningServer(t *testing.T) {
	f := newFleet(t, nil)
	p := openStore(t, f.dsns, func(c *Config) { c.WatermarkInterval = 50 * time.Millisecond })
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameA, nameB := p.Servers()[0], p.Servers()[1]
	testenv.Exec(t, f.pair[1].DSN(""), "SET GLOBAL innodb_flush_log_at_trx_commit = 2")
	waitFor(t, "B out of rotation", func() bool {
		h := healthOf(p, nameB)
		return !h.Healthy && strings.Contains(h.Error, "innodb_flush_log_at_trx_commit is 2")
	})
	for range 5 {
		if b, err := p.LeaseFrom(ctx, "orders", 10, nameB); err != nil || b.Server != nameA {
			t.Fatalf("lease preferring B while its setting is wrong: %v, %v", b, err)
		}
	}
	testenv.Exec(t, f.pair[1].DSN(""), "SET GLOBAL innodb_flush_log_at_trx_commit = 1")
	allocatortest.LeaseUntil(t, nameB, func() (allocator.Block, error) { return p.LeaseFrom(ctx, "orders", 10, nameB) })
}

// TestHungPeerDoesNotTakeTheOtherDownInTheGuard: while B takes connections and answers nothing
// (SIGSTOP), the background guard writes marks into B until its time runs out. A's own check then
// gets time of its own and A stays in rotation: a check that could not read A's settings for lack of
// time used to count as a setting changed, and took A out too.
func TestHungPeerDoesNotTakeTheOtherDownInTheGuard(t *testing.T) {
	f := newFleet(t, nil)
	// No background probe or guard: the test runs the guard itself.
	p := openStore(t, f.dsns, func(c *Config) {
		c.ProbeInterval, c.WatermarkInterval, c.AttemptTimeout = time.Hour, time.Hour, 300*time.Millisecond
	})
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameA := p.Servers()[0]
	for _, s := range p.Servers() {
		if _, err := p.LeaseFrom(ctx, "orders", 10, s); err != nil {
			t.Fatal(err)
		}
	}
	p.guard() // the marks written, and the lease rates' clock started
	if _, err := p.LeaseFrom(ctx, "orders", 10, nameA); err != nil {
		t.Fatal(err)
	}
	// A's new mark and its lease rate now wait to be written into B: each write waits for B's answer
	// until the read timeout (twice AttemptTimeout), together the guard's whole time before.
	pid := f.pair[1].Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	p.guard()
	if h := healthOf(p, nameA); !h.Healthy {
		t.Fatalf("A taken out of rotation by the guard while B hangs: %+v", h)
	}
	if b, err := p.LeaseFrom(ctx, "orders", 10, nameA); err != nil || b.Server != nameA {
		t.Fatalf("lease from A: %v, %v", b, err)
	}
}
