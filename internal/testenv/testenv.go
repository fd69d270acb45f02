// Package testenv gives tests the real servers that scripts/test.sh started (a MariaDB ticket pair and
// a Redis), each test in its own database or key prefix, starts private servers for tests that kill
// them, opens embedded stores (Embedded), and runs the ticketd command as a process (StartServe).
// Under CI=true, or when the harness exported TICKETD_TEST_REQUIRE=1, a missing server fails the test;
// otherwise the test is skipped with a message that says how to run it.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/embedded"
	"github.com/ticketd/ticketd/internal/testservers"
)

// Required reports whether missing servers must fail tests rather than skip them.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("TICKETD_TEST_REQUIRE") == "1"
}

func missing(t testing.TB, what string) {
	t.Helper()
	msg := what + " is not configured; run the suite with scripts/test.sh, which starts the servers"
	if Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// ServerDSNs returns the root DSNs (no database) of the harness's MariaDB pair: odd first, even second.
func ServerDSNs(t testing.TB) []string {
	t.Helper()
	a, b := os.Getenv("TICKETD_TEST_MYSQL_A"), os.Getenv("TICKETD_TEST_MYSQL_B")
	if a == "" || b == "" {
		missing(t, "TICKETD_TEST_MYSQL_A/B (the MariaDB ticket pair)")
	}
	return []string{a, b}
}

// RedisAddr returns the harness's Redis address.
func RedisAddr(t testing.TB) string {
	t.Helper()
	r := os.Getenv("TICKETD_TEST_REDIS")
	if r == "" {
		missing(t, "TICKETD_TEST_REDIS (the throwaway Redis)")
	}
	return r
}

// RedisPrefix returns a key prefix of the test's own on the harness's Redis: name, a random part and a
// colon. Every key under it is deleted when the test ends.
func RedisPrefix(t testing.TB, name string) string {
	t.Helper()
	addr := RedisAddr(t)
	prefix := UniqueName(name) + ":"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var batch []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 1000 {
				c.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			c.Unlink(ctx, batch...)
		}
	})
	return prefix
}

// UniqueName returns a short random name with the prefix, usable as a database name or key prefix.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// FreshDatabases creates one new, empty database with the same name on each server DSN and returns
// DSNs that use it; the databases are dropped when the test ends.
func FreshDatabases(t testing.TB, serverDSNs []string) []string {
	t.Helper()
	name := UniqueName("t_")
	out := make([]string, len(serverDSNs))
	for i, dsn := range serverDSNs {
		db := mustOpen(t, dsn)
		if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
			t.Fatalf("create database on %s: %v", dsn, err)
		}
		db.Close()
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		out[i] = cfg.FormatDSN()
		t.Cleanup(func() {
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				return
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		})
	}
	return out
}

// Pair returns DSNs of a fresh database on each server of the harness's pair.
func Pair(t testing.TB) []string {
	t.Helper()
	return FreshDatabases(t, ServerDSNs(t))
}

func mustOpen(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("MariaDB at %s does not answer: %v", dsn, err)
	}
	return db
}

// Exec runs statements on a DSN, failing the test on error.
func Exec(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	db := mustOpen(t, dsn)
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s on %s: %v", s, dsn, err)
		}
	}
}

// RequireMariaDB fails (or skips, outside the harness) a test that starts MariaDB servers of its own
// when the binaries are missing.
func RequireMariaDB(t testing.TB) {
	t.Helper()
	haveMariaDB(t)
}

// RequireRedis fails (or skips, outside the harness) a test that starts Redis instances of its own when
// redis-server is missing.
func RequireRedis(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing(t, "redis-server")
	}
}

func haveMariaDB(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing(t, bin)
		}
	}
}

// ShortTempDir returns a fresh temporary directory with a short path (MariaDB sockets need one),
// removed when the test ends.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tkd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// PrivateMariaDB starts a throwaway MariaDB of the test's own (for tests that stop, kill or
// misconfigure a server); it is killed when the test ends.
func PrivateMariaDB(t testing.TB, opts testservers.MariaDBOptions) *testservers.MariaDB {
	t.Helper()
	haveMariaDB(t)
	if opts.Dir == "" {
		opts.Dir = ShortTempDir(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := testservers.StartMariaDB(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Kill() })
	return m
}

// PrivatePair starts two throwaway MariaDB servers (increment 2, offsets 1 and 2) in parallel.
func PrivatePair(t testing.TB) [2]*testservers.MariaDB { return PrivatePairWith(t, nil) }

// PrivatePairWith is PrivatePair with extra mariadbd arguments for server i from extra (see
// testservers.StartPairWith).
func PrivatePairWith(t testing.TB, extra func(i int) []string) [2]*testservers.MariaDB {
	t.Helper()
	haveMariaDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pair, err := testservers.StartPairWith(ctx, ShortTempDir(t), extra)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range pair {
		t.Cleanup(func() { _ = m.Kill() })
	}
	return pair
}

// PrivateGalera starts a throwaway 3-node MariaDB Galera cluster of the test's own (see
// testservers.StartGalera); its nodes are killed when the test ends.
func PrivateGalera(t testing.TB) []*testservers.MariaDB {
	t.Helper()
	RequireGalera(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nodes, err := testservers.StartGalera(ctx, ShortTempDir(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range nodes {
		t.Cleanup(func() { _ = m.Kill() })
	}
	return nodes
}

// WaitClusterSize waits, up to a minute, until every running node of a Galera cluster reports n nodes
// in the cluster and is Synced: a node killed is evicted only after the cluster's timeouts, one
// started again before then may meet a view it cannot join, and one that joined still receives its
// state for a while.
func WaitClusterSize(t testing.TB, nodes []*testservers.MariaDB, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !clusterSize(nodes, n) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for a Galera cluster of %d nodes", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clusterSize(nodes []*testservers.MariaDB, n int) bool {
	for _, m := range nodes {
		if !m.Alive() {
			continue
		}
		db, err := sql.Open("mysql", m.DSN(""))
		if err != nil {
			return false
		}
		// A node counts once it has joined and caught up (Synced): one that joined is in the
		// cluster's size while it still receives its state, and may not serve yet.
		st := map[string]string{}
		rows, err := db.Query("SHOW STATUS WHERE Variable_name IN ('wsrep_cluster_size', 'wsrep_local_state_comment')")
		if err == nil {
			for rows.Next() {
				var name, value string
				if err = rows.Scan(&name, &value); err != nil {
					break
				}
				st[name] = value
			}
			rows.Close()
		}
		db.Close()
		if err != nil || st["wsrep_cluster_size"] != strconv.Itoa(n) || st["wsrep_local_state_comment"] != "Synced" {
			return false
		}
	}
	return true
}

// RequireGalera fails (or skips, outside the harness) a test that starts a Galera cluster when
// MariaDB, the galera-4 library or rsync (its state transfers) is missing.
func RequireGalera(t testing.TB) {
	t.Helper()
	haveMariaDB(t)
	for _, need := range []string{"rsync", "/usr/lib/galera/libgalera_smm.so"} {
		if _, err := exec.LookPath(need); err != nil {
			if _, serr := os.Stat(need); serr != nil {
				missing(t, need+" (packages rsync and galera-4)")
			}
		}
	}
}

// PrivateRedis starts a throwaway Redis of the test's own.
func PrivateRedis(t testing.TB, opts testservers.RedisOptions) *testservers.Redis {
	t.Helper()
	RequireRedis(t)
	if opts.Dir == "" {
		opts.Dir = ShortTempDir(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := testservers.StartRedis(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	return r
}

// DSNList joins DSNs the way --mysql takes them.
func DSNList(dsns []string) string { return strings.Join(dsns, ",") }

// Embedded opens an embedded store in a directory of the test's own, closed when the test ends, with
// the namespaces given already created.
func Embedded(t testing.TB, namespaces ...allocator.Namespace) *embedded.Store {
	t.Helper()
	store, err := embedded.Open(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	for _, ns := range namespaces {
		if _, err := store.CreateNamespace(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	return store
}
