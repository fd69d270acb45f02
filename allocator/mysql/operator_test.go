package mysql

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// fleet is a private MariaDB pair, each server with a ticketd database, that a test stops, restores
// and wipes as an operator would.
type fleet struct {
	t     *testing.T
	pair  [2]*testservers.MariaDB
	dsns  []string
	tweak func(*Config)
}

// newFleet starts the pair and applies the schema once, as `ticketd migrate` would: the processes the
// tests open do not migrate at every check, which would race a dump being reloaded (the reload drops
// and creates each table; a check creating one between the two stops the reload).
func newFleet(t *testing.T, tweak func(*Config)) *fleet { return newFleetWith(t, tweak, nil) }

// newFleetWith is newFleet with extra mariadbd arguments for server i (see testenv.PrivatePairWith).
func newFleetWith(t *testing.T, tweak func(*Config), extra func(i int) []string) *fleet {
	pair := testenv.PrivatePairWith(t, extra)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
		if _, err := MigrateDSN(context.Background(), m.DSN("ticketd")); err != nil {
			t.Fatal(err)
		}
	}
	return &fleet{t: t, pair: pair, dsns: []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}, tweak: func(c *Config) {
		c.Migrate = false
		if tweak != nil {
			tweak(c)
		}
	}}
}

func (f *fleet) Open(t *testing.T) allocator.Backend { return openStore(t, f.dsns, f.tweak) }

func (f *fleet) Name(i int) string { return ServerName(f.dsns[i]) }

func (f *fleet) Stop(i int) error { return f.pair[i].Stop() }

func (f *fleet) Start(ctx context.Context, i int) error { return f.pair[i].Start(ctx) }

// Backup dumps server i's ticketd database with mariadb-dump; restore reloads the dump with the
// mariadb client into the running server. The dump writes REPLACE, not INSERT: processes keep writing
// water marks into the server while it is reloaded, and a row they wrote between the reload's CREATE
// TABLE and its INSERT would stop a plain INSERT.
func (f *fleet) Backup(ctx context.Context, i int) (func(context.Context) error, error) {
	file := filepath.Join(f.t.TempDir(), fmt.Sprintf("dump-%d.sql", i))
	out, err := f.pair[i].Client(ctx, "mariadb-dump", "--single-transaction", "--replace", "--databases", "ticketd").Output()
	if err != nil {
		return nil, fmt.Errorf("mariadb-dump: %w", err)
	}
	if err := os.WriteFile(file, out, 0o600); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		in, err := os.Open(file)
		if err != nil {
			return err
		}
		defer in.Close()
		cmd := f.pair[i].Client(ctx, "mariadb")
		cmd.Stdin = in
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("reloading the dump: %w: %s", err, out)
		}
		return nil
	}, nil
}

// Wipe drops server i's ticketd database and creates it again with the schema, as a server rebuilt
// from nothing and migrated would be.
func (f *fleet) Wipe(ctx context.Context, i int) error {
	testenv.Exec(f.t, f.pair[i].DSN(""), "DROP DATABASE ticketd", "CREATE DATABASE ticketd")
	_, err := MigrateDSN(ctx, f.dsns[i])
	return err
}

// ColdCopy stops server i cleanly, copies its data directory and starts it again; putBack replaces
// the stopped server's data directory with the copy.
func (f *fleet) ColdCopy(ctx context.Context, i int) (func() error, error) {
	m := f.pair[i]
	if err := m.Stop(); err != nil {
		return nil, err
	}
	dst := filepath.Join(f.t.TempDir(), "data")
	if out, err := exec.Command("cp", "-a", m.DataDir(), dst).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cp: %w: %s", err, out)
	}
	return func() error {
		if m.Alive() {
			return fmt.Errorf("server %d must be stopped before its data directory is replaced", i)
		}
		if err := os.RemoveAll(m.DataDir()); err != nil {
			return err
		}
		if out, err := exec.Command("cp", "-a", dst, m.DataDir()).CombinedOutput(); err != nil {
			return fmt.Errorf("cp: %w: %s", err, out)
		}
		return nil
	}, m.Start(ctx)
}

// Process opens a store as a process of its own, tuned by o. Proxied, it reaches each server through a
// toxiproxy of its own, and keeps the servers' own names.
func (f *fleet) Process(t *testing.T, o allocatortest.ProcessOptions) *allocatortest.Process {
	dsns := append([]string(nil), f.dsns...)
	var cut func(i int)
	if o.Proxied {
		var proxies []*toxiproxy.Proxy
		dsns, proxies = proxied(t, dsns)
		cut = func(i int) { proxies[i].Stop() }
	}
	p := openStore(t, dsns, func(c *Config) {
		f.tweak(c)
		c.Names = []string{f.Name(0), f.Name(1)}
		if o.WatermarkInterval > 0 {
			c.WatermarkInterval = o.WatermarkInterval
		}
		if o.SettingsTTL > 0 {
			c.SettingsTTL = o.SettingsTTL
		}
		if o.ProbeInterval > 0 {
			c.ProbeInterval = o.ProbeInterval
		}
		c.beforeChange, c.marksWriting = o.BeforeChange, o.MarksWriting
	})
	return allocatortest.NewProcess(p, cut, p.crash)
}

// proxied puts a toxiproxy of the test's own in front of each server of dsns, and returns the DSNs
// that go through them.
func proxied(t testing.TB, dsns []string) ([]string, []*toxiproxy.Proxy) {
	t.Helper()
	toxi := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	out := make([]string, len(dsns))
	proxies := make([]*toxiproxy.Proxy, len(dsns))
	for i, dsn := range dsns {
		mc, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		proxies[i] = toxiproxy.NewProxy(toxi, fmt.Sprintf("server-%d", i), "127.0.0.1:0", mc.Addr)
		if err := proxies[i].Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proxies[i].Stop)
		mc.Addr = proxies[i].Listen
		out[i] = mc.FormatDSN()
	}
	return out, proxies
}

// replica is a MariaDB that replicates server i of the fleet.
type replica struct {
	f *fleet
	i int
	m *testservers.MariaDB
}

// Replicate starts a MariaDB configured as server i (its increment and offset, a server_id of its
// own) that replicates server i from the start of its binary log, and waits until it has caught up.
func (f *fleet) Replicate(ctx context.Context, i int) (allocatortest.Replica, error) {
	src := f.pair[i].Options()
	m := testenv.PrivateMariaDB(f.t, testservers.MariaDBOptions{Increment: src.Increment, Offset: src.Offset,
		ExtraArgs: append(testservers.Binlog(10+i), "--skip-slave-start")})
	if err := m.Follow(ctx, f.pair[i]); err != nil {
		return nil, err
	}
	r := &replica{f: f, i: i, m: m}
	return r, m.CaughtUp(ctx, f.pair[i])
}

// Freeze catches up, then stops replication: the replica lags from here on.
func (r *replica) Freeze(ctx context.Context) error {
	if err := r.m.CaughtUp(ctx, r.f.pair[r.i]); err != nil {
		return err
	}
	return r.m.StopFollowing(ctx)
}

// Promote kills the server and starts the replica on its port, no longer a replica of anything.
func (r *replica) Promote(ctx context.Context) error {
	old := r.f.pair[r.i]
	if err := old.Kill(); err != nil {
		return err
	}
	if err := r.m.Stop(); err != nil {
		return err
	}
	opts := r.m.Options()
	opts.Port = old.Port
	m, err := testservers.StartMariaDB(ctx, opts)
	if err != nil {
		return err
	}
	r.f.t.Cleanup(func() { _ = m.Kill() })
	if err := m.Detach(ctx); err != nil {
		return err
	}
	r.f.pair[r.i], r.m = m, m
	return nil
}

// crash stops the store as a killed process stops: the background work ends and nothing more is
// written, not even the last water marks Close writes.
func (p *Store) crash() { p.set.Close(p.closeDBs) }

func TestOperatorFaults(t *testing.T) {
	allocatortest.RunOperatorFaults(t, func(t *testing.T) allocatortest.Fleet {
		// Each server keeps a binary log, so that a replica can follow it.
		return newFleetWith(t, func(c *Config) { c.WatermarkInterval = 100 * time.Millisecond },
			func(i int) []string { return testservers.Binlog(i + 1) })
	})
}
