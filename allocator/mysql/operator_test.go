package mysql

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
func newFleet(t *testing.T, tweak func(*Config)) *fleet {
	pair := testenv.PrivatePair(t)
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

func TestOperatorFaults(t *testing.T) {
	allocatortest.RunOperatorFaults(t, func(t *testing.T) allocatortest.Fleet {
		return newFleet(t, func(c *Config) { c.WatermarkInterval = 100 * time.Millisecond })
	})
}
