package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
	"github.com/ticketd/ticketd/schema"
)

// galera is a private 3-node Galera cluster with a ticketd database, as ticket servers.
type galera struct {
	nodes []*testservers.MariaDB
	dsns  []string
}

func newGalera(t *testing.T) *galera {
	nodes := testenv.PrivateGalera(t)
	testenv.Exec(t, nodes[0].DSN(""), "CREATE DATABASE ticketd") // replicates to the others
	g := &galera{nodes: nodes}
	for _, n := range nodes {
		g.dsns = append(g.dsns, n.DSN("ticketd"))
	}
	return g
}

// waitSize waits until every running node reports n nodes in the cluster (see testenv.WaitClusterSize).
func (g *galera) waitSize(t *testing.T, n int) { testenv.WaitClusterSize(t, g.nodes, n) }

// open opens the cluster's nodes as ticket servers, configured as on any Galera cluster: when a node
// dies, every node's writes wait until it is evicted (evs.suspect_timeout, 3 s on this cluster), so one
// attempt must outlast that, or healthy nodes are taken out of rotation for the wait.
func (g *galera) open(t *testing.T) *Store {
	return openStore(t, g.dsns, func(c *Config) {
		c.WatermarkInterval, c.AttemptTimeout, c.Timeout = 100*time.Millisecond, 5*time.Second, 15*time.Second
	})
}

// TestGalera runs ticketd on a 3-node MariaDB Galera cluster (automatic increment control off,
// auto_increment_increment 4, node i at offset i): every node serves its own residue from its own row,
// the rows replicate as copies that no other node writes, and the failures a cluster heals by itself —
// a node killed, a node that lost its disk and came back by state transfer — need no fencing and issue
// no ID twice.
func TestGalera(t *testing.T) {
	g := newGalera(t)
	ctx := context.Background()
	p := g.open(t)
	names := p.Servers()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	var all []allocator.Block

	t.Run("EveryNodeServesItsOwnResidue", func(t *testing.T) {
		blocks, err := allocatortest.LeaseConcurrently(p, "orders", 24, 3000)
		if err != nil {
			t.Fatal(err)
		}
		offset := map[string]int64{}
		for i, n := range names {
			offset[n] = int64(i + 1)
		}
		per := map[string]int{}
		for _, b := range blocks {
			per[b.Server]++
			if b.Step != 4 || b.Start%4 != offset[b.Server] {
				t.Fatalf("%v from the node at offset %d", b, offset[b.Server])
			}
		}
		if len(per) != 3 {
			t.Fatalf("blocks per node %v: want all three serving", per)
		}
		all = append(all, blocks...)
		ns, err := p.Namespace(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range ns.Servers {
			if !st.Healthy || !strings.Contains(st.Replication, "Galera cluster") {
				t.Fatalf("server state %+v: want healthy, in a Galera cluster", st)
			}
		}
	})

	// The causal read sets the session variable around one read (SET STATEMENT … FOR is MariaDB's
	// alone): it reads the node's rows, and its connection goes back to the pool as it was.
	t.Run("CausalReadLeavesTheSessionAsItWas", func(t *testing.T) {
		s := p.set.All()[0]
		s.ctl.SetMaxOpenConns(1) // the read after it has the connection the causal read used
		defer s.ctl.SetMaxOpenConns(4)
		rows, err := s.ownRows(ctx, s.view().offset, true)
		if err != nil || len(rows) != 1 || rows[0].ns.Name != "orders" || rows[0].offset != s.view().offset {
			t.Fatalf("causal read of %s's rows: %+v, %v", names[0], rows, err)
		}
		var wait int
		if err := s.ctl.QueryRowContext(ctx, "SELECT @@SESSION.wsrep_sync_wait").Scan(&wait); err != nil || wait != 0 {
			t.Fatalf("after the causal read the pool's connection has wsrep_sync_wait %d (%v); want 0, as before it", wait, err)
		}
	})

	// The cluster orders a node's lease before the node commits it, so a peer can apply the lease
	// first: a check that reads the peer's copy and then the node's own row must not take the copy
	// being ahead for a node gone back in time.
	t.Run("ChecksDuringLeasesFenceNothing", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := allocatortest.LeaseConcurrently(p, "orders", 12, 4000)
			cancel()
			done <- err
		}()
		checks := 0
		for ctx.Err() == nil {
			for _, s := range p.set.All() {
				v := s.view()
				if v == nil {
					continue
				}
				err := p.checkFence(ctx, s, *v, p.peerMarks(ctx, s, v.offset))
				if errors.Is(err, allocator.ErrFenced) {
					t.Fatalf("after %d checks, a check during leases fenced a healthy node: %v", checks, err)
				}
				checks++
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		t.Logf("%d checks during leases, none fenced", checks)
	})

	t.Run("NodeKilledMidRun", func(t *testing.T) {
		all = append(all, allocatortest.CheckKilledMidRun(t, p, "orders", names[2], g.nodes[2], 300)...)
		for _, h := range p.Health() {
			if h.Fenced {
				t.Fatalf("a node that rejoined the cluster was fenced: %+v", h)
			}
		}
	})

	t.Run("NodeThatLostItsDiskRejoinsByStateTransfer", func(t *testing.T) {
		before, err := allocatortest.LeaseConcurrently(p, "orders", 8, 300)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, before...)
		highest := allocatortest.Highest(all, names[1])
		if err := g.nodes[1].WipeData(); err != nil {
			t.Fatal(err)
		}
		g.waitSize(t, 2)
		if err := g.nodes[1].Start(ctx); err != nil { // a full state transfer from a peer
			t.Fatal(err)
		}
		got := allocatortest.LeaseUntil(t, names[1], func() (allocator.Block, error) { return p.LeaseFrom(ctx, "orders", 0, names[1]) })
		all = append(all, got...)
		if b := got[len(got)-1]; b.Start <= highest {
			t.Fatalf("after its state transfer the node leased %v, not above %d", b, highest)
		}
		for _, h := range p.Health() {
			if h.Fenced {
				t.Fatalf("a node rebuilt by state transfer was fenced: %+v", h)
			}
		}
	})

	t.Run("NodeNotSyncedIsNotUsed", func(t *testing.T) {
		testenv.Exec(t, g.nodes[0].DSN(""), "SET GLOBAL wsrep_desync = ON")
		waitFor(t, "the desynced node out of rotation", func() bool {
			h := healthOf(p, names[0])
			return !h.Healthy && strings.Contains(h.Error, "not Synced")
		})
		for range 10 {
			b, err := p.LeaseFrom(ctx, "orders", 0, names[0])
			if err != nil || b.Server == names[0] {
				t.Fatalf("lease preferring the desynced node: %v, %v", b, err)
			}
			all = append(all, b)
		}
		testenv.Exec(t, g.nodes[0].DSN(""), "SET GLOBAL wsrep_desync = OFF")
		all = append(all, allocatortest.LeaseUntil(t, names[0], func() (allocator.Block, error) { return p.LeaseFrom(ctx, "orders", 0, names[0]) })...)
	})

	t.Run("AutomaticIncrementControlIsRefused", func(t *testing.T) {
		// Galera sets the node's increment and offset from the cluster at once (3 and its index).
		testenv.Exec(t, g.nodes[2].DSN(""), "SET GLOBAL wsrep_auto_increment_control = ON")
		defer testenv.Exec(t, g.nodes[2].DSN(""), "SET GLOBAL wsrep_auto_increment_control = OFF",
			"SET GLOBAL auto_increment_increment = 4", "SET GLOBAL auto_increment_offset = 3")
		p2, err := Open(ctx, Config{DSNs: g.dsns, Logger: quiet})
		if err != nil {
			t.Fatalf("Open with one node misconfigured: %v; the other two can serve", err)
		}
		defer p2.Close()
		h := healthOf(p2, names[2])
		if h.Healthy || !strings.Contains(h.Error, "wsrep_auto_increment_control=OFF") {
			t.Fatalf("node with automatic increment control: %+v", h)
		}
		for range 10 {
			b, err := p2.Lease(ctx, "orders", 10)
			if err != nil || b.Server == names[2] {
				t.Fatalf("lease: %v, %v", b, err)
			}
			all = append(all, b)
		}
		d, err := Diagnose(ctx, Config{DSNs: g.dsns, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if problems := strings.Join(d.Problems, "\n"); !strings.Contains(problems, names[2]+" is a Galera node with wsrep_auto_increment_control=ON") ||
			!strings.Contains(problems, "set wsrep_auto_increment_control=OFF") {
			t.Fatalf("doctor on the misconfigured node: %v", d.Problems)
		}
	})

	t.Run("DoctorNamesTheCluster", func(t *testing.T) {
		d, err := Diagnose(ctx, Config{DSNs: g.dsns, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if !d.OK() {
			t.Fatalf("doctor on a healthy cluster: %v", d.Problems)
		}
		for _, s := range d.Servers {
			if !strings.Contains(s.Replication, "Galera cluster") || !strings.Contains(s.Replication, "3 nodes") {
				t.Fatalf("doctor's view of %s: replication %q", s.Name, s.Replication)
			}
		}
	})

	t.Run("StartAdvancedWhileANodeIsDownRaisesItsRowWhenItReturns", func(t *testing.T) {
		// Node b's row is written only by b: its peers replicate it but never change it. So the node
		// itself raises it when it is checked on its return, before any lease.
		if err := g.nodes[1].Kill(); err != nil {
			t.Fatal(err)
		}
		const start = 5_000_000_000
		if _, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", Start: start}); err != nil {
			t.Fatal(err)
		}
		g.waitSize(t, 2)
		if err := g.nodes[1].Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "node b back in rotation", func() bool { return healthOf(p, names[1]).Healthy })
		ns, err := p.Namespace(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range ns.Servers {
			if st.Next < start {
				t.Fatalf("%s's counter is %d after the start was advanced to %d: %+v", st.Server, st.Next, start, ns.Servers)
			}
		}
	})

	t.Run("NodeRestoredOutsideTheClusterIsFenced", func(t *testing.T) {
		// A copy of node c's data directory, taken cold.
		c := g.nodes[2]
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		backup := c.DataDir() + ".bak"
		if out, err := exec.Command("cp", "-a", c.DataDir(), backup).CombinedOutput(); err != nil {
			t.Fatalf("copy: %v %s", err, out)
		}
		g.waitSize(t, 2)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		all = append(all, allocatortest.LeaseUntil(t, names[2], func() (allocator.Block, error) { return p.LeaseFrom(ctx, "orders", 0, names[2]) })...)
		blocks, err := allocatortest.LeaseConcurrently(p, "orders", 8, 300)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, blocks...)
		// The copy started on its own, not as a node of the cluster: its counter went back, while the
		// other nodes hold copies of its rows as they were.
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		g.waitSize(t, 2)
		if err := os.RemoveAll(c.DataDir()); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(backup, c.DataDir()); err != nil {
			t.Fatal(err)
		}
		alone, err := testservers.StartMariaDB(ctx, testservers.MariaDBOptions{Dir: filepath.Dir(c.DataDir()), Port: c.Port, Increment: 4, Offset: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = alone.Kill() })
		for range 5 {
			b, err := p.LeaseFrom(ctx, "orders", 0, names[2])
			if err == nil && b.Server == names[2] {
				t.Fatalf("the node restored outside the cluster leased %v", b)
			}
			if err == nil {
				all = append(all, b)
			}
		}
		allocatortest.FencedHealth(t, p, names[2]) // this process leased past the copy's counter
		// A new process that never leased from c, with no water mark for c anywhere: the copies of c's
		// rows on the other nodes alone fence it.
		testenv.Exec(t, g.nodes[0].DSN("ticketd"), "DELETE FROM ticketd_watermarks WHERE peer_offset = 3")
		p2 := openStore(t, g.dsns, func(c *Config) { c.WatermarkInterval = time.Hour })
		if h := allocatortest.FencedHealth(t, p2, names[2]); !strings.Contains(h.Error, "copy on") {
			t.Fatalf("fenced, but not by its rows' copies on the other nodes: %s", h.Error)
		}
	})

	if err := allocatortest.CheckDisjoint(all); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d blocks from the cluster, none sharing an ID", len(all))
}

// TestRowsPerOffsetMigrateInPlace takes a database at the schema before rows were keyed by offset, with
// namespaces and counters in it, and migrates it: the key becomes (name, id_offset), every row and
// counter is kept, leases continue above them, and migrating again changes nothing.
func TestRowsPerOffsetMigrateInPlace(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	db := schemaAt(t, dsns[0], 3)
	testenv.Exec(t, dsns[0], `INSERT INTO ticketd_namespaces (name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, created_us, updated_us)
		VALUES ('orders', 5001, 2, 1, 1, 100, 1000, 0, 1, 1), ('links', 77, 2, 1, 1, 10, 1000, 0, 1, 1)`)
	for range 2 {
		if _, err := schema.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	var cols []string
	rows, err := db.Query("SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'ticketd_namespaces' AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if strings.Join(cols, ",") != "name,id_offset" {
		t.Fatalf("primary key %v, want name, id_offset", cols)
	}
	if got := counterOf(t, dsns[0], "orders"); got != 5001 {
		t.Fatalf("counter %d after the migration, want 5001", got)
	}
	p := openStore(t, dsns[:1], nil)
	b, err := p.Lease(ctx, "orders", 10)
	if err != nil || b.Start != 5001 {
		t.Fatalf("lease after the migration: %v, %v", b, err)
	}
}

// schemaAt builds the schema of the database behind dsn as it was at the given migration version, and
// returns a connection to it (closed when the test ends).
func schemaAt(t *testing.T, dsn string, version int) *sql.DB {
	t.Helper()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	testenv.Exec(t, dsn, `CREATE TABLE ticketd_schema_migrations (version INT NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL,
		applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`)
	for _, m := range migs {
		if m.Version > version {
			continue
		}
		for _, stmt := range schema.Statements(m.SQL) {
			testenv.Exec(t, dsn, stmt)
		}
		if _, err := db.Exec("INSERT INTO ticketd_schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// TestPrimaryPrimaryReplication runs the pair the way Flickr ran its ticket servers: each server a
// replica of the other (classic asynchronous replication, row-based). Each server writes only its own
// rows, so every row replicates as a copy that the other never writes: the pair names the replication,
// both serve, no ID is issued twice, and ticketd's writes (leases, water marks, settings) never stop
// replication.
func TestPrimaryPrimaryReplication(t *testing.T) {
	testenv.RequireMariaDB(t)
	ctx := context.Background()
	dir := testenv.ShortTempDir(t)
	var servers [2]*testservers.MariaDB
	for i := range servers {
		m, err := testservers.StartMariaDB(ctx, testservers.MariaDBOptions{Dir: fmt.Sprintf("%s/%c", dir, 'a'+i), Increment: 2, Offset: i + 1,
			ExtraArgs: []string{"--log-bin", "--sync-binlog=1", "--binlog-format=ROW", fmt.Sprintf("--server-id=%d", i+1)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Kill() })
		servers[i] = m
	}
	for i, m := range servers {
		src := servers[1-i]
		testenv.Exec(t, m.DSN(""), fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=current_pos", src.Port),
			"START SLAVE")
	}
	// The schema is applied on one server and replicates to the other.
	testenv.Exec(t, servers[0].DSN(""), "CREATE DATABASE ticketd")
	if _, err := MigrateDSN(ctx, servers[0].DSN("ticketd")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the schema on the other server", func() bool {
		db, err := sql.Open("mysql", servers[1].DSN("ticketd"))
		if err != nil {
			return false
		}
		defer db.Close()
		var v int
		return db.QueryRow("SELECT MAX(version) FROM ticketd_schema_migrations").Scan(&v) == nil && v == schema.Latest()
	})
	dsns := []string{servers[0].DSN("ticketd"), servers[1].DSN("ticketd")}
	p, err := Open(ctx, Config{DSNs: dsns, Logger: quiet, Failover: allocator.Failover{WatermarkInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i, h := range p.Health() {
		if want := fmt.Sprintf("replica of 127.0.0.1:%d", servers[1-i].Port); !h.Healthy || !strings.Contains(h.Replication, want) {
			t.Fatalf("server %d: %+v; want healthy, %q", i+1, h, want)
		}
	}
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	blocks, err := allocatortest.LeaseConcurrently(p, "orders", 16, 4000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allocatortest.CheckParity(blocks, p.Servers()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 50}); err != nil {
		t.Fatal(err)
	}
	p.Close() // writes the last water marks into both servers
	for i, m := range servers {
		db, err := sql.Open("mysql", m.DSN(""))
		if err != nil {
			t.Fatal(err)
		}
		// Wait until the replica has applied everything its source wrote.
		var pos string
		src, err := sql.Open("mysql", servers[1-i].DSN(""))
		if err != nil {
			t.Fatal(err)
		}
		if err := src.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
			t.Fatal(err)
		}
		src.Close()
		var waited int
		if err := db.QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", pos).Scan(&waited); err != nil || waited != 0 {
			t.Fatalf("replication into %d did not catch up with %s: %d, %v", m.Port, pos, waited, err)
		}
		rows, err := db.Query("SHOW SLAVE STATUS")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if !rows.Next() || rows.Scan(ptrs...) != nil {
			t.Fatal("no replica status")
		}
		rows.Close()
		db.Close()
		st := map[string]string{}
		for i, c := range cols {
			st[c] = vals[i].String
		}
		if st["Slave_IO_Running"] != "Yes" || st["Slave_SQL_Running"] != "Yes" || st["Last_SQL_Error"] != "" {
			t.Fatalf("replication into %d stopped: IO %s, SQL %s, %s", m.Port, st["Slave_IO_Running"], st["Slave_SQL_Running"], st["Last_SQL_Error"])
		}
	}
}
