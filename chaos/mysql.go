package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	tmysql "github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testservers"
	"github.com/ticketd/ticketd/schema"
)

// mysqlServers is the MariaDB ticket pair: a throwaway one the run owns, or servers given by DSN.
type mysqlServers struct {
	cfg    Config
	log    *slog.Logger
	dsns   []string
	owned  []*testservers.MariaDB
	ownDir string

	// dump is server b's ticketd database as mariadb-dump wrote it; coldCopy is where server a's data
	// directory was copied while it was stopped. Each is taken by one fault and put back by a later one.
	dump     []byte
	coldCopy string
	// replica is a MariaDB of a's settings and a server_id of its own, which a fault has follow a and
	// then promotes in a's place.
	replica *testservers.MariaDB
}

func openDB(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }

// start starts the throwaway pair, or checks the given one, and applies the schema.
func (m *mysqlServers) start(ctx context.Context) error {
	if len(m.cfg.MySQL) > 0 {
		if len(m.cfg.MySQL) != 2 {
			return fmt.Errorf("chaos: --mysql needs the two servers of the pair, odd first")
		}
		m.dsns = m.cfg.MySQL
		for _, dsn := range m.dsns {
			if _, err := schemaMigrate(ctx, dsn); err != nil {
				return err
			}
		}
		return nil
	}
	dir := m.cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tkc")
		if err != nil {
			return err
		}
		dir, m.ownDir = d, d
	}
	// Server a keeps a binary log its replica can follow (sync_binlog=1, as ticketd requires); each
	// server has a server_id of its own, which ticketd records with the water marks. The replica is
	// installed and started meanwhile; it follows a only when the fault that promotes it begins.
	var replicaErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		m.replica, replicaErr = testservers.StartMariaDB(ctx, testservers.MariaDBOptions{Dir: filepath.Join(dir, "r"), Increment: 2, Offset: 1,
			ExtraArgs: append(testservers.Binlog(11), "--skip-slave-start")})
	})
	pair, err := testservers.StartPairWith(ctx, dir, func(i int) []string {
		if i == 0 {
			return testservers.Binlog(1)
		}
		return []string{fmt.Sprintf("--server-id=%d", i+1)}
	})
	wg.Wait()
	if err := errors.Join(err, replicaErr); err != nil {
		if m.replica != nil {
			_ = m.replica.Kill()
		}
		return fmt.Errorf("chaos: starting the MariaDB pair and a's replica: %w", err)
	}
	m.owned = pair[:]
	for _, s := range m.owned {
		db, err := openDB(s.DSN(""))
		if err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS ticketd")
		db.Close()
		if err != nil {
			return err
		}
		m.dsns = append(m.dsns, s.DSN("ticketd"))
		if _, err := schemaMigrate(ctx, s.DSN("ticketd")); err != nil {
			return err
		}
	}
	m.log.Info("chaos: MariaDB pair up", "a", m.owned[0].Port, "b", m.owned[1].Port, "a's replica", m.replica.Port)
	return nil
}

func schemaMigrate(ctx context.Context, dsn string) ([]int, error) {
	db, err := openDB(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return schema.Migrate(ctx, db)
}

func (m *mysqlServers) layout() layout { return pairLayout }

func (m *mysqlServers) addrs() []string {
	out := make([]string, len(m.dsns))
	for i, dsn := range m.dsns {
		if mc, err := mysql.ParseDSN(dsn); err == nil {
			out[i] = mc.Addr
		}
	}
	return out
}

func (m *mysqlServers) open(ctx context.Context, ends []endpoint, obs allocator.Observer, log *slog.Logger) (leaser, error) {
	return openMySQL(ctx, m.dsns, ends, tmysql.Config{Failover: allocator.Failover{
		AttemptTimeout: 700 * time.Millisecond, Timeout: 3 * time.Second, MaxBackoff: time.Second}, Logger: log, Observer: obs})
}

// openMySQL opens the servers of dsns, each reached at its endpoint's address (a proxy's) and named by
// its label, with cfg's timeouts.
func openMySQL(ctx context.Context, dsns []string, ends []endpoint, cfg tmysql.Config) (leaser, error) {
	for _, e := range ends {
		mc, err := mysql.ParseDSN(dsns[e.index])
		if err != nil {
			return nil, err
		}
		mc.Addr = e.addr
		cfg.DSNs, cfg.Names = append(cfg.DSNs, mc.FormatDSN()), append(cfg.Names, label(e.index))
	}
	return tmysql.Open(ctx, cfg)
}

// kill and restart server i (0 = a, 1 = b).
func (m *mysqlServers) kill(i int) error {
	if m.owned != nil {
		return m.owned[i].Kill()
	}
	return m.runCmd(m.cfg.KillCmd, i)
}

func (m *mysqlServers) restart(ctx context.Context, i int) error {
	if m.owned != nil {
		return m.owned[i].Start(ctx)
	}
	return m.runCmd(m.cfg.StartCmd, i)
}

func (m *mysqlServers) canKill() bool {
	return m.owned != nil || (m.cfg.KillCmd != "" && m.cfg.StartCmd != "")
}

func (m *mysqlServers) runCmd(cmd string, i int) error {
	c := exec.Command("sh", "-c", cmd)
	c.Env = append(os.Environ(), "CHAOS_SERVER="+label(i))
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: %q for server %s: %w: %s", cmd, label(i), err, out)
	}
	return nil
}

func (m *mysqlServers) close() {
	for _, s := range append(slices.Clone(m.owned), m.replica) {
		if s != nil {
			_ = s.Kill()
		}
	}
	if m.ownDir != "" {
		_ = os.RemoveAll(m.ownDir)
	}
	if m.coldCopy != "" {
		_ = os.RemoveAll(m.coldCopy)
	}
}

// faults are what operators do to ticket servers: a logical backup reloaded into a running server, a
// cold copy of a data directory put back under a restarted one, the increment changed on running
// servers. They need servers the run owns.
func (m *mysqlServers) faults(w *world) []fault {
	if m.owned == nil {
		return nil
	}
	a, b := m.owned[0], m.owned[1]
	return []fault{
		at(slotDump, fault{name: "server b's ticketd database dumped (mariadb-dump)",
			apply: func(ctx context.Context, res *FaultResult) error {
				// REPLACE rather than INSERT: the replicas keep writing water marks into b, also between
				// the reload's CREATE TABLE and its INSERT, and the dump's rows must win over theirs.
				out, err := b.Client(ctx, "mariadb-dump", "--single-transaction", "--replace", "--databases", "ticketd").Output()
				if err != nil {
					return fmt.Errorf("mariadb-dump: %w", exitDetail(err))
				}
				m.dump = out
				res.Detail = fmt.Sprintf("%d bytes", len(out))
				return nil
			}}),
		at(slotRestoreLive, fault{name: "the dump reloaded into server b while it runs (mariadb client)", expect: ExpectFenced,
			apply: func(ctx context.Context, _ *FaultResult) error {
				if m.dump == nil {
					return errors.New("no dump of server b was taken")
				}
				if err := w.issuedPast(ctx, 1); err != nil {
					return err
				}
				cmd := b.Client(ctx, "mariadb")
				cmd.Stdin = bytes.NewReader(m.dump)
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("reloading the dump: %w: %s", err, out)
				}
				return nil
			},
			revert: func(ctx context.Context, res *FaultResult) error { return w.repairFenced(ctx, 1, res) }}),
		at(slotColdCopy, fault{name: "server a stopped, its data directory copied, started",
			apply: func(context.Context, *FaultResult) error {
				if err := a.Stop(); err != nil {
					return err
				}
				m.coldCopy = a.DataDir() + ".copy"
				if out, err := exec.Command("cp", "-a", a.DataDir(), m.coldCopy).CombinedOutput(); err != nil {
					m.coldCopy = ""
					return fmt.Errorf("copying the data directory: %w: %s", err, out)
				}
				return nil
			},
			revert: func(ctx context.Context, _ *FaultResult) error { return w.servers.restart(ctx, 0) }}),
		at(slotSettings, m.incrementChanged(w)),
		at(slotPromote, w.replicaPromoted(m)),
		at(slotRestoreCold, fault{name: "server a restored from the copy of its data directory and restarted", expect: ExpectFenced,
			apply: func(ctx context.Context, _ *FaultResult) error {
				if m.coldCopy == "" {
					return errors.New("no copy of server a's data directory was taken")
				}
				if err := w.issuedPast(ctx, 0); err != nil {
					return err
				}
				if err := a.Stop(); err != nil {
					return err
				}
				if err := os.RemoveAll(a.DataDir()); err != nil {
					return err
				}
				if err := os.Rename(m.coldCopy, a.DataDir()); err != nil {
					return err
				}
				m.coldCopy = ""
				return w.servers.restart(ctx, 0)
			},
			revert: func(ctx context.Context, res *FaultResult) error { return w.repairFenced(ctx, 0, res) }}),
	}
}

// incrementChanged sets auto_increment_increment to 4 on both running servers, then cuts replica 2's
// connections to server a so that its next connection checks a again: a must be refused there while
// the run serves from what is still in rotation. The revert sets 2 again and waits until both servers
// are back in every replica.
func (m *mysqlServers) incrementChanged(w *world) fault {
	set := func(ctx context.Context, n int) error {
		var errs []error
		for _, s := range m.owned {
			db, err := openDB(s.DSN(""))
			if err != nil {
				return err
			}
			_, err = db.ExecContext(ctx, fmt.Sprintf("SET GLOBAL auto_increment_increment = %d", n))
			db.Close()
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	return fault{name: "auto_increment_increment set to 4 on both running servers, replica 2's connections to server a cut", expect: ExpectRefused,
		outage: true, // both servers are refused until the setting is restored: no ID may be issued
		apply: func(ctx context.Context, _ *FaultResult) error {
			if err := set(ctx, 4); err != nil {
				return err
			}
			// Every connection through the proxy is closed (a timeout toxic closes each link 1 ms
			// after it is added) and the toxic taken off again: the proxy keeps its port, which a stop
			// and a start would give up for a moment to whoever binds it first.
			p := w.proxies[1][0]
			if err := toxic(p, "cut", "timeout", "downstream", `{"timeout":1}`); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
			removeToxic(p, "cut")
			return nil
		},
		revert: func(ctx context.Context, res *FaultResult) error {
			res.FencedOrRefused = waitUntil(fencedWithin, func() bool {
				h, ok := w.health(1, 0)
				return ok && refused(h)
			})
			var seen []string
			for r := range w.running() {
				for i := range 2 {
					if h, ok := w.health(r, i); ok && refused(h) {
						seen = append(seen, fmt.Sprintf("server %s refused by replica %d", label(i), r+1))
					}
				}
			}
			sort.Strings(seen)
			if len(seen) == 0 {
				seen = append(seen, "no server refused")
			}
			res.Detail = strings.Join(seen, ", ")
			if h, ok := w.health(1, 0); ok && refused(h) {
				res.Detail += "; why: " + h.Error
			}
			return set(ctx, 2)
		}}
}

// exitDetail adds a failed command's standard error to its error.
func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

// follow has a's replica replicate a from the beginning of a's binary log (a may have been restored
// from a copy since it started: the replica begins after that, from what a holds now), and waits until
// it has caught up.
func (m *mysqlServers) follow(ctx context.Context) error {
	if err := m.replica.Follow(ctx, m.owned[0]); err != nil {
		return err
	}
	return m.replica.CaughtUp(ctx, m.owned[0])
}

func (m *mysqlServers) freeze(ctx context.Context) error {
	if err := m.replica.CaughtUp(ctx, m.owned[0]); err != nil {
		return err
	}
	return m.replica.StopFollowing(ctx)
}

// promote kills a and makes its replica a server of its own (no longer a replica of anything), server
// a from now on.
func (m *mysqlServers) promote(ctx context.Context) (string, error) {
	if err := m.owned[0].Kill(); err != nil {
		return "", err
	}
	if err := m.replica.Detach(ctx); err != nil {
		return "", err
	}
	m.owned[0], m.replica = m.replica, m.owned[0]
	m.dsns[0] = m.owned[0].DSN("ticketd")
	return fmt.Sprintf("127.0.0.1:%d", m.owned[0].Port), nil
}
