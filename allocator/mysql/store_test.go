package mysql

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/schema"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openStore migrates the databases behind dsns and opens a Store on them.
func openStore(t testing.TB, dsns []string, tweak func(*Config)) *Store {
	t.Helper()
	cfg := Config{DSNs: dsns, Migrate: true, Logger: quiet, Failover: allocator.Failover{
		ProbeInterval: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	servers := testenv.ServerDSNs(t)
	var last []string // the databases open made last, for Another
	allocatortest.Run(t, func(t *testing.T) allocator.Backend {
		last = testenv.FreshDatabases(t, servers)
		return openStore(t, last, nil)
	}, allocatortest.Options{Another: func(t *testing.T) allocator.Backend { return openStore(t, last, nil) }})
}

// TestParity checks Flickr's promise: across 100,000 leases from 32 goroutines, the odd server issues
// only odd IDs and the even server only even ones, and no ID is issued twice.
func TestParity(t *testing.T) {
	dsns := testenv.Pair(t)
	p := openStore(t, dsns, nil)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "parity"}); err != nil {
		t.Fatal(err)
	}
	blocks, err := allocatortest.LeaseConcurrently(p, "parity", 32, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	perServer, err := allocatortest.CheckParity(blocks, p.Servers()) // the first server (offset 1) is odd
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leases: %v", len(blocks), perServer)
}

// comCounters reads the statement counters of the session behind db (whose pool holds one connection).
func comCounters(t *testing.T, db *sql.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Query("SHOW SESSION STATUS WHERE Variable_name IN ('Com_update','Com_stmt_prepare','Com_stmt_execute','Com_stmt_close','Questions')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// TestLeaseIsOneStatementOneRoundTrip proves with the server's Com_* counters that a lease is a single
// text-protocol UPDATE: no prepare, execute or close, and no other statement.
func TestLeaseIsOneStatementOneRoundTrip(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	p := openStore(t, dsns[:1], func(c *Config) { c.MaxConns = 1 })
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "rt"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lease(ctx, "rt", 5); err != nil { // warms the settings cache
		t.Fatal(err)
	}
	db := p.set.All()[0].db
	before := comCounters(t, db)
	const n = 200
	for range n {
		if _, err := p.Lease(ctx, "rt", 5); err != nil {
			t.Fatal(err)
		}
	}
	after := comCounters(t, db)
	delta := func(k string) int64 { return after[k] - before[k] }
	if delta("Com_update") != n {
		t.Errorf("Com_update grew by %d for %d leases, want %d", delta("Com_update"), n, n)
	}
	for _, k := range []string{"Com_stmt_prepare", "Com_stmt_execute", "Com_stmt_close"} {
		if delta(k) != 0 {
			t.Errorf("%s grew by %d: leases use the binary protocol (3 round trips), want 0", k, delta(k))
		}
	}
	// Questions counts every statement the client sent, the SHOW STATUS that reads it included.
	if q := delta("Questions"); q != n+1 {
		t.Errorf("Questions grew by %d for %d leases, want %d (one statement each, plus the SHOW)", q, n, n+1)
	}

	// The control: without interpolateParams the driver prepares, executes and closes each statement.
	plain, err := sql.Open("mysql", dsns[0])
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.SetMaxOpenConns(1)
	before = comCounters(t, plain)
	if _, err := plain.Exec("UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(next_id + ? * step) WHERE name = ?", 5, "rt"); err != nil {
		t.Fatal(err)
	}
	after = comCounters(t, plain)
	if delta("Com_stmt_prepare") != 1 || delta("Com_stmt_close") != 1 {
		t.Errorf("control: plain Exec did not prepare and close (%v → %v); the counters do not show round trips", before, after)
	}
}

func TestOpenRefusesDuplicateServer(t *testing.T) {
	dsns := testenv.Pair(t)
	_, err := Open(context.Background(), Config{DSNs: []string{dsns[0], dsns[0]}, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Fatalf("Open with one server twice: %v", err)
	}
}

func TestOpenRequiresSchema(t *testing.T) {
	dsns := testenv.Pair(t)
	_, err := Open(context.Background(), Config{DSNs: dsns, Logger: quiet})
	if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "ticketd migrate") {
		t.Fatalf("Open without schema: %v, want a hint to run ticketd migrate", err)
	}
	for _, dsn := range dsns {
		db, _ := sql.Open("mysql", dsn)
		if _, err := schema.Migrate(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		// Twice is harmless.
		if applied, err := schema.Migrate(context.Background(), db); err != nil || len(applied) != 0 {
			t.Fatalf("second Migrate applied %v, %v", applied, err)
		}
		db.Close()
	}
	p, err := Open(context.Background(), Config{DSNs: dsns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}
