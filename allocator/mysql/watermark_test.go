package mysql

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func healthOf(p *Store, name string) allocator.ServerHealth {
	for _, h := range p.Health() {
		if h.Name == name {
			return h
		}
	}
	return allocator.ServerHealth{}
}

// TestRestoredBackupIsFenced copies B's data directory, draws IDs, stops B, puts the old copy back and
// starts B again: B's counter went back, so the pair fences it — no ID is issued twice — and reports
// it, in this process and in a new one; Repair advances B past the water mark and it serves again.
func TestRestoredBackupIsFenced(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	dsns := []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}
	tweak := func(c *Config) { c.WatermarkInterval = 50 * time.Millisecond }
	p := openStore(t, dsns, tweak)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameB := p.Servers()[1]
	var blocks []allocator.Block
	lease := func(n int) {
		t.Helper()
		for range n {
			b, err := p.Lease(ctx, "orders", 100)
			if err != nil {
				t.Fatal(err)
			}
			blocks = append(blocks, b)
		}
	}
	lease(10)

	// The backup: a cold copy of B's data directory.
	if err := pair[1].Stop(); err != nil {
		t.Fatal(err)
	}
	backup := pair[1].DataDir() + ".bak"
	if out, err := exec.Command("cp", "-a", pair[1].DataDir(), backup).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	if err := pair[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B back in rotation", func() bool { return healthOf(p, nameB).Healthy })
	lease(200) // B issues IDs the backup does not know about
	var highestB int64
	for _, b := range blocks {
		if last, _ := b.Last(); b.Server == nameB && last > highestB {
			highestB = last
		}
	}
	time.Sleep(200 * time.Millisecond) // a few water-mark rounds

	// The restore.
	if err := pair[1].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(pair[1].DataDir()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, pair[1].DataDir()); err != nil {
		t.Fatal(err)
	}
	if err := pair[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B fenced", func() bool { return healthOf(p, nameB).Fenced })
	h := healthOf(p, nameB)
	if h.Healthy || !strings.Contains(h.Error, "ticketd repair orders --server "+nameB) || !strings.Contains(h.Error, "went back in time") {
		t.Fatalf("health of the restored server: %+v", h)
	}
	lease(100)
	for _, b := range blocks[210:] {
		if b.Server == nameB {
			t.Fatalf("the fenced server issued %v", b)
		}
	}

	// A new process sees the fence too: the marks are in A's table, not only in memory.
	p2 := openStore(t, dsns, tweak)
	if h := healthOf(p2, nameB); !h.Fenced || h.Healthy {
		t.Fatalf("a fresh pair does not fence the restored server: %+v", h)
	}
	if _, err := p2.Lease(ctx, "orders", 10); err != nil {
		t.Fatalf("the healthy server must keep serving: %v", err)
	}

	res, err := p2.Repair(ctx, "orders", nameB, allocator.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Watermark <= highestB || res.After <= res.Watermark || res.Before >= res.Watermark {
		t.Fatalf("repair %+v; B's highest issued ID was %d", res, highestB)
	}
	waitFor(t, "B serving after repair", func() bool { return healthOf(p2, nameB).Healthy })
	for range 20 {
		b, err := p2.Lease(ctx, "orders", 100)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
		if b.Server == nameB && b.Start <= highestB {
			t.Fatalf("after repair B issued %v, not above %d", b, highestB)
		}
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
}

func TestRepairNamesTheServers(t *testing.T) {
	p := openStore(t, testenv.Pair(t), nil)
	_, err := p.Repair(context.Background(), "orders", "nosuch:1", allocator.RepairOptions{})
	if err == nil || !strings.Contains(err.Error(), "no ticket server named") {
		t.Fatalf("Repair on an unknown server: %v", err)
	}
	if _, err := p.Repair(context.Background(), "Bad", p.Servers()[0], allocator.RepairOptions{}); !errors.Is(err, allocator.ErrInvalidNamespace) {
		t.Fatalf("Repair with a bad name: %v", err)
	}
}

// TestSettingsChangeOnAServerThatWentBack: a server's counter goes back (as after a restore the
// background check has not met yet) and the namespace's start is then advanced to inside the range it
// had issued. The change carries the same proof as a lease: the server is fenced for it and its counter
// left where the restore put it, not raised to the start over IDs it issued; the other server takes
// the change.
func TestSettingsChangeOnAServerThatWentBack(t *testing.T) {
	dsns := testenv.Pair(t)
	p := openStore(t, dsns, func(c *Config) { c.WatermarkInterval = time.Hour }) // no background check
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	a := p.set.All()[0]
	var highest int64
	for range 6 {
		blk, err := p.LeaseFrom(ctx, "orders", 0, a.Name())
		if err != nil || blk.Server != a.Name() {
			t.Fatalf("lease from %s: %v, %v", a.Name(), blk, err)
		}
		highest, _ = blk.Last()
	}
	// Back by 40 IDs, as a restore would take it; then a start 20 IDs below the highest issued.
	testenv.Exec(t, dsns[0], "UPDATE ticketd_namespaces SET next_id = next_id - 80 WHERE name = 'orders'")
	back := readNext(t, a)
	if _, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, Start: highest - 40}); err != nil {
		t.Fatalf("the change, taken by the other server: %v", err)
	}
	if h := healthOf(p, a.Name()); !h.Fenced || !strings.Contains(h.Error, "is below") {
		t.Fatalf("%s after the change: %+v; want it fenced", a.Name(), h)
	}
	if got := readNext(t, a); got != back {
		t.Fatalf("%s's counter moved from %d to %d: the change raised a server that went back", a.Name(), back, got)
	}
}

// readNext reads server s's counter for "orders".
func readNext(t *testing.T, s *server) int64 {
	t.Helper()
	r, err := s.readRow(context.Background(), "orders", s.Health().Offset)
	if err != nil {
		t.Fatal(err)
	}
	return r.next
}

// TestMarkStatementsCompareNumbers writes marks and lease rates with the guard's statements, several
// rows to a statement, on a real server: a mark only rises, numbers compare as numbers (99 < 100, which
// as strings they do not), a higher mark brings its server's identity and an unknown one never replaces
// it, and what processes leased adds up.
func TestMarkStatementsCompareNumbers(t *testing.T) {
	dsns := testenv.FreshDatabases(t, testenv.ServerDSNs(t))
	openStore(t, dsns, nil).Close() // the schema
	db, err := sql.Open("mysql", dsns[0])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	marks := func(rows ...[]any) {
		t.Helper()
		var args []any
		for _, r := range rows {
			args = append(args, r...)
		}
		if _, err := db.ExecContext(ctx, batchSQL(markSQL, markRows, len(rows)), args...); err != nil {
			t.Fatal(err)
		}
	}
	marks([]any{"a", 2, 99, 1, "s1"}, []any{"b", 2, 5, 1, ""})
	marks([]any{"a", 2, 100, 2, "s2"}, []any{"b", 2, 4, 2, "s3"})
	marks([]any{"a", 2, 98, 3, ""}, []any{"b", 2, 6, 3, ""})
	for ns, want := range map[string]struct {
		high     int64
		identity string
	}{"a": {100, "s2"}, "b": {6, "s3"}} {
		var high int64
		var identity string
		if err := db.QueryRowContext(ctx, "SELECT high_water, server_identity FROM ticketd_watermarks WHERE namespace = ? AND peer_offset = 2", ns).
			Scan(&high, &identity); err != nil {
			t.Fatal(err)
		}
		if high != want.high || identity != want.identity {
			t.Errorf("mark of %s: %d on %q, want %d on %q", ns, high, identity, want.high, want.identity)
		}
	}
	pace := func(rate, span int64) {
		t.Helper()
		if _, err := db.ExecContext(ctx, batchSQL(paceSQL, paceRows, 2), "a", 2, rate, 1, span, span, 2_000_000, "b", 2, 1, 1, 1, 1, 2_000_000,
			int64(2_000_000), int64(2_000_000), int64(2_000_000)); err != nil {
			t.Fatal(err)
		}
	}
	pace(99, 40)
	pace(100, 60)
	pace(98, 5)
	var peak, leased int64
	if err := db.QueryRowContext(ctx, "SELECT peak_per_s, leased FROM ticketd_lease_rates WHERE namespace = 'a' AND peer_offset = 2").Scan(&peak, &leased); err != nil {
		t.Fatal(err)
	}
	if peak != 100 || leased != 105 {
		t.Errorf("lease rates of a: peak %d, leased %d; want 100 and 105", peak, leased)
	}
	for _, q := range []string{markSQL, paceSQL} {
		if strings.Contains(q, "VALUES(") {
			t.Errorf("a water-mark statement uses VALUES(col), which MySQL 8.0.20 and later warn about on every write:\n%s", q)
		}
	}
}
