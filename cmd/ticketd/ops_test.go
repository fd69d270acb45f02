package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

func TestDoctorOnAHealthyPair(t *testing.T) {
	pair := testenv.Pair(t)
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(pair)}
	if _, errOut, code := run(t, env, "migrate"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := run(t, env, "namespace", "create", "orders"); code != 0 {
		t.Fatal(errOut)
	}
	out, errOut, code := run(t, env, "doctor")
	if code != 0 || !strings.Contains(out, "no problem found") {
		t.Fatalf("doctor on a healthy pair: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"INCREMENT", "REPLICATION", mysql.ServerName(pair[0]), mysql.ServerName(pair[1]), "orders", "2/1", "2/2"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
}

func TestDoctorFindsProblems(t *testing.T) {
	pair := testenv.Pair(t)
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(pair)}
	if _, errOut, code := run(t, env, "migrate"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := run(t, env, "namespace", "create", "orders"); code != 0 {
		t.Fatal(errOut)
	}
	// A water mark on A, for B (offset 2), far above B's counter: what a restored B looks like.
	testenv.Exec(t, pair[0], "INSERT INTO ticketd_watermarks (namespace, peer_offset, high_water, updated_us) VALUES ('orders', 2, 1000000, 0)")
	env["TICKETD_MYSQL"] += ",root@tcp(127.0.0.1:1)/nowhere"
	out, errOut, code := run(t, env, "doctor", "--attempt-timeout", "300ms", "--lease-timeout", "1s")
	if code != 1 {
		t.Fatalf("doctor exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"PROBLEM: 127.0.0.1:1 is unreachable",
		"ticketd repair orders --server " + mysql.ServerName(pair[1]),
		"below the 3 ticket servers configured",
		"fenced: counter below water mark",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "doctor found") {
		t.Errorf("stderr %q", errOut)
	}
}

// TestAdoptAFlickrTable: an operator's own Flickr ticket pair, Tickets64 filled on both servers by
// concurrent REPLACE INTO calls, survives `ticketd migrate` untouched, is adopted into a namespace, and
// every block leased afterwards lies above every ticket issued.
func TestAdoptAFlickrTable(t *testing.T) {
	pair := testenv.Pair(t)
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(pair)}
	var dbs []*sql.DB
	for _, dsn := range pair {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`CREATE TABLE Tickets64 (id BIGINT(20) UNSIGNED NOT NULL AUTO_INCREMENT,
			stub CHAR(1) NOT NULL DEFAULT '', PRIMARY KEY (id), UNIQUE KEY stub (stub)) ENGINE=InnoDB`); err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
	}
	var mu sync.Mutex
	var highest int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				res, err := dbs[(i+j)%2].Exec("REPLACE INTO Tickets64 (stub) VALUES ('a')")
				if err != nil {
					continue // deadlocks happen under contention; the ticket was not issued
				}
				id, err := res.LastInsertId()
				if err != nil {
					continue
				}
				mu.Lock()
				highest = max(highest, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if highest == 0 {
		t.Fatal("no ticket issued")
	}
	last := func(db *sql.DB) (id int64) {
		if err := db.QueryRow("SELECT MAX(id) FROM Tickets64").Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	before := []int64{last(dbs[0]), last(dbs[1])}
	if _, errOut, code := run(t, env, "migrate"); code != 0 {
		t.Fatal(errOut)
	}
	if after := []int64{last(dbs[0]), last(dbs[1])}; !slices.Equal(before, after) || max(after[0], after[1]) != highest {
		t.Fatalf("Tickets64 held %v before migrate and %v after; the highest ticket was %d", before, after, highest)
	}
	if _, errOut, code := run(t, env, "namespace", "adopt", "flickr", "--flickr-table", "Tickets64; DROP TABLE x"); code != 1 || !strings.Contains(errOut, "must match") {
		t.Fatalf("a table name that looks like SQL: exit %d %s", code, errOut)
	}
	_, errOut, code := run(t, env, "namespace", "adopt", "flickr", "--flickr-table", "Tickets64")
	if code != 0 {
		t.Fatal(errOut)
	}
	for range 6 {
		out, errOut, code := run(t, env, "lease", "flickr", "-n", "10")
		if code != 0 {
			t.Fatal(errOut)
		}
		b, err := decodeBlock(t, out).ToBlock()
		if err != nil {
			t.Fatal(err)
		}
		if b.Start <= highest {
			t.Fatalf("block %v after adoption is not above the highest ticket %d", b, highest)
		}
	}
}

// TestDoctorAndRepairOnRedis: on two healthy instances doctor finds nothing and shows each claim; after
// one instance restarts with its files gone it names the lost data and the repair; repair (which needs
// no --force: the instance is fenced) makes it serve above every ID it issued, and doctor is clean again.
func TestDoctorAndRepairOnRedis(t *testing.T) {
	x := testenv.PrivateRedis(t, testservers.RedisOptions{})
	y := testenv.PrivateRedis(t, testservers.RedisOptions{})
	env := map[string]string{"TICKETD_REDIS": x.Addr() + "," + y.Addr()}
	if _, errOut, code := run(t, env, "namespace", "create", "orders"); code != 0 {
		t.Fatal(errOut)
	}
	// Each `ticketd lease` is a new process that starts its round robin at random: lease until the
	// second instance has issued a few blocks.
	var highest int64
	for fromY, n := 0, 0; fromY < 3; n++ {
		if n == 200 {
			t.Fatal("200 leases and fewer than 3 from the second instance")
		}
		out, errOut, code := run(t, env, "lease", "orders", "-n", "100")
		if code != 0 {
			t.Fatal(errOut)
		}
		b, err := decodeBlock(t, out).ToBlock()
		if err != nil {
			t.Fatal(err)
		}
		if last, _ := b.Last(); b.Server == y.Addr() {
			highest = max(highest, last)
			fromY++
		}
	}
	out, errOut, code := run(t, env, "doctor")
	if code != 0 || !strings.Contains(out, "no problem found") {
		t.Fatalf("doctor on healthy instances: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"APPENDFSYNC", "always", x.Addr(), y.Addr(), "1/2", "2/2", "orders"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}

	// The second instance loses its files.
	if err := y.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(y.Dir(), "appendonlydir")); err != nil {
		t.Fatal(err)
	}
	if err := y.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, _, code = run(t, env, "doctor")
	if code != 1 {
		t.Fatalf("doctor exit %d after the instance lost its data, want 1\n%s", code, out)
	}
	for _, want := range []string{"PROBLEM: " + y.Addr() + " has no identity", "it lost its data", "ticketd repair NAMESPACE --server " + y.Addr(), "fenced: gone below water mark"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = run(t, env, "repair", "orders", "--server", y.Addr())
	if code != 0 {
		t.Fatalf("repair: %d %s", code, errOut)
	}
	if !strings.Contains(errOut, "was fenced for orders: it lost its data") || !strings.Contains(errOut, "margin") {
		t.Errorf("repair's report: %s", errOut)
	}
	var res allocator.RepairResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.After <= highest || res.After%2 != 0 {
		t.Fatalf("repair %+v; the instance had issued up to %d", res, highest)
	}
	if out, errOut, code := run(t, env, "doctor"); code != 0 {
		t.Fatalf("doctor after the repair: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestAdoptSaysWhenTheTableIsHidden: a ticket table the DSN's user may not read is not "no table":
// adopt says it exists and that the user needs SELECT on it.
func TestAdoptSaysWhenTheTableIsHidden(t *testing.T) {
	pair := testenv.Pair(t)
	for _, dsn := range pair {
		testenv.Exec(t, dsn, "CREATE TABLE Tickets64 (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, stub CHAR(1) NOT NULL DEFAULT '', UNIQUE KEY stub (stub))")
	}
	if _, errOut, code := run(t, nil, "migrate", "--mysql", testenv.DSNList(pair)); code != 0 {
		t.Fatal(errOut)
	}
	db := func(dsn string) string {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.DBName
	}
	user := "tkd_a" + strings.TrimPrefix(testenv.UniqueName(""), "_")[:10]
	var dsns []string
	for _, dsn := range pair {
		testenv.Exec(t, dsn, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw-"+user+"'",
			"GRANT SELECT, INSERT, UPDATE ON `"+db(dsn)+"`.`ticketd_namespaces` TO '"+user+"'@'%'",
			"GRANT SELECT ON `"+db(dsn)+"`.`ticketd_schema_migrations` TO '"+user+"'@'%'")
		t.Cleanup(func() { testenv.Exec(t, dsn, "DROP USER '"+user+"'@'%'") })
		dsns = append(dsns, asUser(t, dsn, user, "pw-"+user))
	}
	_, errOut, code := run(t, nil, "namespace", "adopt", "flickr", "--mysql", strings.Join(dsns, ","))
	if code != 1 || !strings.Contains(errOut, `table "Tickets64" exists, but this user may not read it`) {
		t.Fatalf("exit %d, %q; want 1, saying the table exists but is hidden from the user", code, errOut)
	}
	if _, errOut, code := run(t, nil, "namespace", "adopt", "flickr", "--mysql", testenv.DSNList(pair), "--flickr-table", "Tickets32"); code != 1 || !strings.Contains(errOut, `no table "Tickets32"`) {
		t.Fatalf("a table that does not exist: exit %d, %q", code, errOut)
	}
}
