package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// ticketdPair starts a private pair (no other client) with an empty ticketd database on each server,
// and returns the pair, the DSNs of the databases and a root connection to each server, for its status.
func ticketdPair(t *testing.T) (pair [2]*testservers.MariaDB, dsns []string, roots []*sql.DB) {
	pair = testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
		dsns = append(dsns, m.DSN("ticketd"))
		db, err := sql.Open("mysql", m.DSN(""))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { db.Close() })
		roots = append(roots, db)
	}
	return pair, dsns, roots
}

// TestStatementsDoNotGrowWithNamespaces: on a private pair (no other client), with 300 namespaces each
// leased from once, a round of water-mark writes and a listing of every namespace with its counters
// each send each server a fixed number of statements, not one or more per namespace.
func TestStatementsDoNotGrowWithNamespaces(t *testing.T) {
	_, dsns, roots := ticketdPair(t)
	p := openStore(t, dsns, func(c *Config) {
		c.Failover.WatermarkInterval, c.Failover.ProbeInterval = time.Hour, time.Hour // no background work but the test's
		c.Failover.SettingsTTL = time.Second
	})
	ctx := context.Background()
	const n = 300
	for i := range n {
		name := fmt.Sprintf("ns%03d", i)
		if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: name}); err != nil {
			t.Fatal(err)
		}
		for range 2 { // from both servers, most likely
			if _, err := p.Lease(ctx, name, 10); err != nil {
				t.Fatal(err)
			}
		}
	}
	questions := func() [2]int64 {
		var out [2]int64
		for i, db := range roots {
			var k string
			if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&k, &out[i]); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		do   func() error
		most int64 // statements on each server
	}{
		{"water marks", func() error { return p.writeWatermarks(ctx) }, 4},
		{"listing", func() error { _, err := p.Namespaces(ctx); return err }, 4},
		// Every namespace's settings expired: a lease from each is its UPDATE on one server, and the
		// settings are read again for all of them at once (a few times, should the round outlast the
		// settings' TTL), not once per namespace.
		{"leases after the settings expired", func() error {
			time.Sleep(1100 * time.Millisecond)
			for i := range n {
				if _, err := p.Lease(ctx, fmt.Sprintf("ns%03d", i), 10); err != nil {
					return err
				}
			}
			return nil
		}, n + 10},
		// The segment cache refreshes each namespace's settings on its own: the reads are shared too.
		{"settings read after they expired", func() error {
			time.Sleep(1100 * time.Millisecond)
			for i := range n {
				if _, err := p.SharedSettings(ctx, fmt.Sprintf("ns%03d", i)); err != nil {
					return err
				}
			}
			return nil
		}, 10},
	} {
		before := questions()
		if err := tc.do(); err != nil {
			t.Fatal(err)
		}
		after := questions()
		for i := range roots {
			// The statements of the round, and the SHOW STATUS that reads the count.
			if d := after[i] - before[i] - 1; d > tc.most {
				t.Errorf("%s: %d statements on %s for %d namespaces; want at most %d", tc.name, d, p.Servers()[i], n, tc.most)
			} else {
				t.Logf("%s: %d statements on %s for %d namespaces", tc.name, d, p.Servers()[i], n)
			}
		}
	}
}

// TestGuardReadsRowsOneAtATime: the restored-state guard's check of a server's own rows (every
// namespace's, every water-mark interval) allocates at most two times more a namespace, and a reading
// of every namespace's counters (a listing, the headroom of /metrics every 10 s) eight: the rows are
// read one at a time, not into a list of every row's settings first.
func TestGuardReadsRowsOneAtATime(t *testing.T) {
	pair := testenv.PrivatePair(t)
	var dsns []string
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
		dsns = append(dsns, m.DSN("ticketd"))
	}
	p := openStore(t, dsns, func(c *Config) {
		c.Failover.WatermarkInterval, c.Failover.ProbeInterval = time.Hour, time.Hour // no background work but the test's
	})
	ctx := context.Background()
	created := 0
	grow := func(n int) {
		for ; created < n; created++ {
			name := fmt.Sprintf("ns%03d", created)
			if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: name}); err != nil {
				t.Fatal(err)
			}
			for range 2 { // from both servers, most likely
				if _, err := p.Lease(ctx, name, 10); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	allocs := func() float64 {
		t.Helper()
		var most float64
		for _, s := range p.set.All() {
			v := s.view()
			if v == nil {
				t.Fatalf("%s not checked", s.Name())
			}
			marks := p.peerMarks(ctx, s, v.offset)
			if len(marks) < created {
				t.Fatalf("%d marks for %d namespaces", len(marks), created)
			}
			n := testing.AllocsPerRun(5, func() {
				if err := p.checkFence(ctx, s, *v, marks); err != nil {
					t.Fatal(err)
				}
			})
			most = max(most, n)
		}
		return most
	}
	// The counters of every namespace, as a listing (and the headroom of /metrics) reads them.
	listing := func() float64 {
		t.Helper()
		names := make([]string, created)
		for i := range names {
			names[i] = fmt.Sprintf("ns%03d", i)
		}
		return testing.AllocsPerRun(5, func() {
			states := p.serverStates(ctx, names)
			for _, name := range names {
				if st := states[name]; len(st) != 2 || st[0].Next == 0 || st[1].Next == 0 {
					t.Fatalf("%s: %+v", name, st)
				}
			}
		})
	}
	grow(100)
	at100, list100 := allocs(), listing()
	grow(400)
	at400, list400 := allocs(), listing()
	// The driver hands each of the two columns of a row over in an interface: at most two a row. A
	// list of the rows cost ten.
	if at400 > at100+2*300 {
		t.Errorf("a check of the own rows allocates %v times at 100 namespaces, %v at 400", at100, at400)
	}
	// The listing: each namespace's list of two servers (two allocations as it grows), and two a row
	// on each server. A list of the rows and a map of them cost 24.
	if list400 > list100+8*300 {
		t.Errorf("the counters of every namespace allocate %v times at 100 namespaces, %v at 400", list100, list400)
	}
	t.Logf("a check of the own rows allocates %v times at 100 namespaces, %v at 400; the counters of every namespace %v and %v", at100, at400, list100, list400)
}

// TestNewConnectionsReadTheRowsOncePerRun: on a private pair with 300 namespaces, ten leases from A,
// each on a connection of its own, read no namespace's row beyond their own (A's run, identity and
// settings are those its last check in full passed on); once A has restarted, the next connection is
// checked in full again, every row read.
func TestNewConnectionsReadTheRowsOncePerRun(t *testing.T) {
	pair, dsns, roots := ticketdPair(t)
	p := openStore(t, dsns, func(c *Config) {
		c.Failover.WatermarkInterval, c.Failover.ProbeInterval = time.Hour, time.Hour // no background work but the test's
	})
	ctx := context.Background()
	const n = 300
	for i := range n {
		if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: fmt.Sprintf("ns%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string) int64 {
		t.Helper()
		var k string
		var v int64
		if err := roots[0].QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// A run is told from the next only once it is older than the tolerance of its reading (2 s).
	for status("Uptime") < 3 {
		time.Sleep(100 * time.Millisecond)
	}
	sA := p.set.All()[0]
	sA.db.SetMaxIdleConns(0) // every lease on a connection of its own
	nameA := p.Servers()[0]
	leases := func(k int) {
		t.Helper()
		for i := range k {
			if b, err := p.LeaseFrom(ctx, fmt.Sprintf("ns%03d", i), 10, nameA); err != nil || b.Server != nameA {
				t.Fatalf("lease from A: %v, %v", b, err)
			}
		}
	}
	leases(1) // the first check in full of a run old enough to be told from the next
	rows, conns := status("Rows_read"), status("Connections")
	leases(10)
	readRows, opened := status("Rows_read")-rows, status("Connections")-conns
	if opened < 10 {
		t.Fatalf("%d connections opened for 10 leases; want one each", opened)
	}
	if readRows >= n {
		t.Fatalf("10 leases on new connections read %d rows of A for %d namespaces; want only their own rows (the server's run did not change)", readRows, n)
	}
	t.Logf("10 leases on new connections: %d rows read, %d connections", readRows, opened)

	if err := pair[0].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := pair[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	rows = status("Rows_read")
	leases(1)
	if readRows := status("Rows_read") - rows; readRows < n {
		t.Fatalf("the first lease after A restarted read %d rows; want a check in full, all %d namespaces' rows", readRows, n)
	}
}
