package main

import (
	"database/sql"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
)

// asUser returns dsn with another user and password.
func asUser(t *testing.T, dsn, user, password string) string {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN()
}

// readmeGrants returns the configuration page's SQL for the database users, one statement each, for database db
// and users of the test's own names (users are global to a server that other tests share).
func readmeGrants(t *testing.T, db, serveUser, migrateUser, password string) (migrate, serve []string) {
	t.Helper()
	blocks := codeBlocks(docSection(t, "docs/configuration.md", "# Configuration"), "sql")
	if len(blocks) != 1 {
		t.Fatalf("the Configuration section has %d sql blocks, want the one of the database users", len(blocks))
	}
	user := regexp.MustCompile(`'(ticketd_migrate|ticketd)'@`)
	after := false
	for _, line := range strings.Split(blocks[0], "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "--") {
			after = after || strings.Contains(line, "ticketd migrate")
			continue
		}
		if line == "" {
			continue
		}
		line = strings.ReplaceAll(line, " ticketd.", " "+db+".")
		line = user.ReplaceAllStringFunc(line, func(m string) string {
			if strings.Contains(m, "migrate") {
				return "'" + migrateUser + "'@"
			}
			return "'" + serveUser + "'@"
		})
		line = regexp.MustCompile(`'[A-Z_]+_PASSWORD'`).ReplaceAllString(line, "'"+password+"'")
		if after {
			serve = append(serve, strings.TrimSuffix(line, ";"))
		} else {
			migrate = append(migrate, strings.TrimSuffix(line, ";"))
		}
	}
	if len(migrate) == 0 || len(serve) == 0 {
		t.Fatalf("the configuration page's grants: %q then %q", migrate, serve)
	}
	return migrate, serve
}

// TestServeAsALeastPrivilegeUser: with the users and grants the configuration page (docs/configuration.md) gives,
// `migrate` runs as the migrate user, and everything else as the serve user (SELECT, INSERT, UPDATE on
// ticketd's tables): `serve` with namespaces created and updated over HTTP, leases from both servers,
// the water marks and lease rates it writes in the background and checks; `namespace create`, `lease`
// and `doctor`. The serve user can change no table's shape.
func TestServeAsALeastPrivilegeUser(t *testing.T) {
	root := testenv.Pair(t)
	cfg, err := gomysql.ParseDSN(root[0])
	if err != nil {
		t.Fatal(err)
	}
	suffix := strings.TrimPrefix(testenv.UniqueName(""), "_")[:10]
	serveUser, migrateUser, password := "tkd_s"+suffix, "tkd_m"+suffix, "pw-"+suffix
	migrateSQL, serveSQL := readmeGrants(t, cfg.DBName, serveUser, migrateUser, password)
	for _, dsn := range root {
		t.Cleanup(func() {
			testenv.Exec(t, dsn, "DROP USER IF EXISTS '"+serveUser+"'@'%'", "DROP USER IF EXISTS '"+migrateUser+"'@'%'")
		})
		testenv.Exec(t, dsn, migrateSQL...)
	}
	as := func(user string) string {
		return testenv.DSNList([]string{asUser(t, root[0], user, password), asUser(t, root[1], user, password)})
	}
	if _, errOut, code := run(t, map[string]string{"TICKETD_MYSQL": as(migrateUser)}, "migrate"); code != 0 {
		t.Fatalf("migrate as %s: %s", migrateUser, errOut)
	}
	for _, dsn := range root {
		testenv.Exec(t, dsn, serveSQL...)
	}

	env := map[string]string{"TICKETD_MYSQL": as(serveUser), "TICKETD_ADMIN_TOKEN": e2eAdmin, "TICKETD_TOKENS": "orders=" + e2eToken}
	if _, errOut, code := run(t, env, "namespace", "create", "cli", "--block-size", "10"); code != 0 {
		t.Fatalf("namespace create as %s: %s", serveUser, errOut)
	}
	p := startServe(t, env, "--cache=false")
	mustCall(t, 201, "PUT", p.URL+"/v1/namespaces/orders", e2eAdmin, `{"block_size":50}`)
	mustCall(t, 200, "PUT", p.URL+"/v1/namespaces/orders", e2eAdmin, `{"block_size":20,"max_block_size":5000,"start":"1000001"}`)
	servers := map[string]bool{}
	for i := 0; i < 40; i++ {
		var b api.Block
		if err := json.Unmarshal(mustCall(t, 200, "POST", p.URL+"/v1/namespaces/orders/blocks", e2eToken, ""), &b); err != nil {
			t.Fatal(err)
		}
		if n, _ := api.ParseID(b.Start); b.Size != 20 || n <= 1000000 {
			t.Fatalf("block %+v: want 20 IDs above the start", b)
		}
		servers[b.Server] = true
	}
	mustCall(t, 200, "GET", p.URL+"/v1/namespaces/orders/ids?count=5", e2eToken, "")
	if len(servers) != 2 {
		t.Fatalf("leases came from %v, want both servers", servers)
	}
	// The background writes: each server records the other's counter as a water mark, and the rate of
	// leases between two writes (so leases go on meanwhile).
	lease := func() { mustCall(t, 200, "POST", p.URL+"/v1/namespaces/orders/blocks", e2eToken, "") }
	for _, dsn := range root {
		waitRows(t, dsn, "SELECT COUNT(*) FROM ticketd_watermarks WHERE namespace = 'orders' AND high_water > 1000000", lease)
		waitRows(t, dsn, "SELECT COUNT(*) FROM ticketd_lease_rates WHERE namespace = 'orders' AND peak_per_s > 0", lease)
	}
	// And the checks: a server's check reads the settings, the schema version and the marks.
	var ns api.Namespace
	if err := json.Unmarshal(mustCall(t, 200, "GET", p.URL+"/v1/namespaces/orders", e2eAdmin, ""), &ns); err != nil {
		t.Fatal(err)
	}
	for _, st := range ns.Servers {
		if !st.Healthy {
			t.Fatalf("server %+v is not healthy as %s", st, serveUser)
		}
	}
	if err := p.Stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if log := p.Log(); strings.Contains(log, "denied") || strings.Contains(log, `"level":"ERROR"`) || strings.Contains(log, `"level":"WARN"`) {
		t.Fatalf("serve as %s logged a problem:\n%s", serveUser, log)
	}
	if out, errOut, code := run(t, env, "lease", "cli"); code != 0 {
		t.Fatalf("lease as %s: %s %s", serveUser, out, errOut)
	}
	if out, errOut, code := run(t, env, "doctor"); code != 0 || strings.Contains(out+errOut, "denied") {
		t.Fatalf("doctor as %s: exit %d\n%s%s", serveUser, code, out, errOut)
	}
	// Least privilege, not just enough: the serve user changes no table's shape and deletes no row.
	db, err := sql.Open("mysql", asUser(t, root[0], serveUser, password))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{"DROP TABLE ticketd_watermarks", "ALTER TABLE ticketd_namespaces ADD COLUMN x INT",
		"DELETE FROM ticketd_namespaces", "CREATE TABLE t (a INT)", "INSERT INTO ticketd_schema_migrations (version, name) VALUES (99, 'x')"} {
		if _, err := db.Exec(stmt); err == nil || !strings.Contains(err.Error(), "denied") {
			t.Errorf("%s as %s: %v, want access denied", stmt, serveUser, err)
		}
	}
}

// waitRows waits until query (a COUNT) on dsn as root gives at least one row, calling meanwhile
// between two looks.
func waitRows(t *testing.T, dsn, query string, meanwhile func()) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRow(query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: none after 30s", query)
		}
		meanwhile()
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMigrateReportsEveryServer: migrate goes on to the next server after one fails, and says for each
// what to run: CREATE DATABASE for a database that does not exist, the GRANT for a user that lacks the
// privileges migrate needs.
func TestMigrateReportsEveryServer(t *testing.T) {
	root := testenv.Pair(t)
	a, err := gomysql.ParseDSN(root[0])
	if err != nil {
		t.Fatal(err)
	}
	a.DBName += "_missing"
	b, err := gomysql.ParseDSN(root[1])
	if err != nil {
		t.Fatal(err)
	}
	user := "tkd_r" + strings.TrimPrefix(testenv.UniqueName(""), "_")[:10]
	testenv.Exec(t, root[1], "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw-"+user+"'",
		"GRANT SELECT ON `"+b.DBName+"`.* TO '"+user+"'@'%'")
	t.Cleanup(func() { testenv.Exec(t, root[1], "DROP USER '"+user+"'@'%'") })
	readOnly := asUser(t, root[1], user, "pw-"+user)

	out, errOut, code := run(t, nil, "migrate", "--mysql", a.FormatDSN()+","+readOnly)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 1 || len(lines) != 2 || !strings.Contains(errOut, "migrate failed on 2 of 2 ticket servers") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1, a line for each server", code, out, errOut)
	}
	if want := "CREATE DATABASE `" + a.DBName + "`; GRANT CREATE, ALTER, INDEX, SELECT, INSERT, UPDATE ON `" + a.DBName + "`.*"; !strings.Contains(lines[0], "FAILED: database") || !strings.Contains(lines[0], want) {
		t.Errorf("the server without the database: %q, want it to say %q", lines[0], want)
	}
	if want := "GRANT CREATE, ALTER, INDEX, SELECT, INSERT, UPDATE ON `" + b.DBName + "`.* TO '" + user + "'@'%'"; !strings.Contains(lines[1], "lacks the CREATE privilege") || !strings.Contains(lines[1], want) {
		t.Errorf("the user without grants: %q, want it to name CREATE and say %q", lines[1], want)
	}
	// Both fixed, both migrate.
	testenv.Exec(t, root[0], "CREATE DATABASE `"+a.DBName+"`")
	t.Cleanup(func() { testenv.Exec(t, root[0], "DROP DATABASE IF EXISTS `"+a.DBName+"`") })
	testenv.Exec(t, root[1], "GRANT CREATE, ALTER, INDEX, SELECT, INSERT, UPDATE ON `"+b.DBName+"`.* TO '"+user+"'@'%'")
	if out, errOut, code := run(t, nil, "migrate", "--mysql", a.FormatDSN()+","+readOnly); code != 0 || strings.Count(out, "applied") != 2 {
		t.Fatalf("after the fixes: exit %d, %q %q", code, out, errOut)
	}
}
