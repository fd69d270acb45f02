package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
)

// mysqlEnv is the ticket server pair a run uses: one database on each server (fresh unless the DSNs
// name one), migrated, with the bench's namespaces created as they are needed.
type mysqlEnv struct {
	dsns    []string // with the database
	dbs     []*sql.DB
	pair    *mysql.Store
	version string
	drop    string // the database created for the run, dropped by Close
	quiet   *slog.Logger
	also    []*mysqlEnv // other servers a case uses (a Galera cluster), closed with this one
}

// loopbackOnly refuses an address that is not on this machine: load is sent only to loopback.
func loopbackOnly(what, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s %q is not a loopback address; the bench sends load only to servers on this machine (127.0.0.1, ::1, localhost)",
		ErrInvalidOptions, what, addr)
}

func openMySQL(ctx context.Context, opts Options) (*mysqlEnv, error) {
	env := &mysqlEnv{quiet: slog.New(slog.DiscardHandler)}
	var cfgs []*gomysql.Config
	for _, dsn := range opts.MySQL {
		c, err := gomysql.ParseDSN(strings.TrimSpace(dsn))
		if err != nil {
			return nil, fmt.Errorf("%w: DSN %q: %v", ErrInvalidOptions, dsn, err)
		}
		if c.Net == "tcp" {
			if err := loopbackOnly("MySQL server", c.Addr); err != nil {
				return nil, err
			}
		} else if c.Net != "unix" {
			return nil, fmt.Errorf("%w: DSN %q: network %q, want tcp on loopback or a unix socket", ErrInvalidOptions, dsn, c.Net)
		}
		cfgs = append(cfgs, c)
	}
	if cfgs[0].DBName == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		env.drop = "ticketd_bench_" + hex.EncodeToString(b[:])
	}
	for i, c := range cfgs {
		if env.drop != "" {
			if c.DBName != "" {
				env.Close()
				return nil, fmt.Errorf("%w: give every DSN a database, or none", ErrInvalidOptions)
			}
			// IF NOT EXISTS: on nodes of one Galera cluster the first node's database replicates.
			if err := execOn(ctx, c.FormatDSN(), "CREATE DATABASE IF NOT EXISTS "+env.drop); err != nil {
				env.Close()
				return nil, fmt.Errorf("server %d: %w", i+1, err)
			}
			c.DBName = env.drop
		}
		c.MultiStatements = false
		if env.drop == "" {
			if err := claimDatabase(ctx, c, opts.ForceDatabase); err != nil {
				env.Close()
				return nil, fmt.Errorf("server %d: %w", i+1, err)
			}
		}
		dsn := c.FormatDSN()
		env.dsns = append(env.dsns, dsn)
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			env.Close()
			return nil, err
		}
		env.dbs = append(env.dbs, db)
		if _, err := mysql.MigrateDSN(ctx, dsn); err != nil {
			env.Close()
			return nil, err
		}
	}
	if err := env.dbs[0].QueryRowContext(ctx, "SELECT VERSION()").Scan(&env.version); err != nil {
		env.Close()
		return nil, err
	}
	p, err := env.openPair(ctx, env.dsns)
	if err != nil {
		env.Close()
		return nil, err
	}
	env.pair = p
	return env, nil
}

// benchMarker is the table that marks a database a run of the bench made its own.
const benchMarker = "ticketd_bench"

// claimDatabase refuses a database that holds tables the bench did not create, unless force: a live
// ticket database would get the bench's namespaces and its counters moved. An empty database is
// marked as the bench's, so that later runs may use it again.
func claimDatabase(ctx context.Context, c *gomysql.Config, force bool) error {
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME")
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		tables = append(tables, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(tables) > 0 && !slices.Contains(tables, benchMarker) && !force {
		what := "tables ticketd-bench did not create"
		if slices.Contains(tables, "ticketd_namespaces") || slices.Contains(tables, "Tickets64") {
			what = "ticketd's own tables: it looks like a live ticket database"
		}
		shown := tables[:min(len(tables), 5)]
		return fmt.Errorf("%w: database %s holds %s (%s): the run would create namespaces there and move their counters; "+
			"give a DSN without a database (the run makes a fresh one and drops it), name an empty one, or pass --force-database",
			ErrInvalidOptions, c.DBName, what, strings.Join(shown, ", "))
	}
	_, err = db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+benchMarker+" (created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) COMMENT 'made by ticketd-bench: its runs may use this database'")
	return err
}

func execOn(ctx context.Context, dsn string, stmts ...string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// maxConns bounds each server's connections, for the pair and for Flickr's tickets alike.
const maxConns = 128

// openPair opens a backend on the given servers of the run's database (one server or both).
func (e *mysqlEnv) openPair(ctx context.Context, dsns []string) (*mysql.Store, error) {
	// The pair may take as long as a load case's request (opTimeout) before it gives up: a slow lease on
	// a busy machine is a latency to measure, not an error.
	return mysql.Open(ctx, mysql.Config{DSNs: dsns, Logger: e.quiet,
		Failover: allocator.Failover{MaxConns: maxConns, Timeout: opTimeout, AttemptTimeout: opTimeout / 2}})
}

// namespace creates a namespace for one measurement (a fresh name each time) and returns its name.
func (e *mysqlEnv) namespace(ctx context.Context, b allocator.Backend, prefix string, blockSize int64) (string, error) {
	var r [3]byte
	_, _ = rand.Read(r[:])
	name := prefix + "-" + hex.EncodeToString(r[:])
	_, err := b.CreateNamespace(ctx, allocator.Namespace{Name: name, BlockSize: blockSize, MaxBlockSize: max(blockSize, allocator.DefaultMaxBlockSize)})
	return name, err
}

// settle waits (at most a minute) until no statement of this run's database is still running on any
// server: requests that a load case gave up on (timeouts, lock waits) would otherwise weigh on the next
// measurement.
func (e *mysqlEnv) settle(ctx context.Context) {
	deadline := time.Now().Add(time.Minute)
	for _, db := range e.dbs {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			var busy int
			err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND NOT IN ('Sleep', 'Daemon')`).Scan(&busy)
			if err != nil || busy == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Close closes the pair and drops the database the run created.
func (e *mysqlEnv) Close() {
	for _, o := range e.also {
		o.Close()
	}
	if e.pair != nil {
		_ = e.pair.Close()
	}
	for _, db := range e.dbs {
		if e.drop != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+e.drop)
			cancel()
		}
		_ = db.Close()
	}
}

// errorKind names an error for the load report's error table.
func errorKind(err error) string {
	var me *gomysql.MySQLError
	var k interface{ kind() string }
	switch {
	case errors.As(err, &k):
		return k.kind()
	case errors.As(err, &me) && me.Number == 1213:
		return "deadlock"
	case errors.As(err, &me) && me.Number == 1205:
		return "lock wait timeout"
	case errors.As(err, &me):
		return fmt.Sprintf("mysql error %d", me.Number)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, allocator.ErrUnavailable):
		if strings.Contains(err.Error(), "Deadlock") {
			return "deadlock"
		}
		return "unavailable"
	case errors.Is(err, allocator.ErrExhausted):
		return "exhausted"
	}
	return "other"
}
