package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// TestMisconfigurationsAreRefused changes one global setting at a time on a private pair and checks
// that Open refuses with an error that names the problem and the server: settings that conflict
// between the servers refuse the pair; a server wrong on its own is refused when no other can serve,
// and left out while another serves.
func TestMisconfigurationsAreRefused(t *testing.T) {
	pair := testenv.PrivatePair(t)
	dsns := []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	p := openStore(t, dsns, nil)
	if _, err := p.CreateNamespace(context.Background(), allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	nameA, nameB := p.Servers()[0], p.Servers()[1]

	tests := []struct {
		name       string
		set, reset []string // statements on server A (or B, for the shared offset)
		onB        bool
		dsns       []string
		want       []string
	}{
		{
			name: "increments differ",
			set:  []string{"SET GLOBAL auto_increment_increment = 3"}, reset: []string{"SET GLOBAL auto_increment_increment = 2"},
			want: []string{"auto_increment_increment is 3 on " + nameA, "but 2 on " + nameB},
		},
		{
			name: "shared offset",
			onB:  true,
			set:  []string{"SET GLOBAL auto_increment_offset = 1"}, reset: []string{"SET GLOBAL auto_increment_offset = 2"},
			want: []string{"share auto_increment_offset 1", nameA, nameB},
		},
		{
			name: "namespace row no longer matches its server",
			onB:  true,
			set:  []string{"SET GLOBAL auto_increment_increment = 4", "SET GLOBAL auto_increment_offset = 3"},
			// A alone: the pair is fine, B's row for orders was made with step 2 offset 2.
			reset: []string{"SET GLOBAL auto_increment_increment = 2", "SET GLOBAL auto_increment_offset = 2"},
			dsns:  dsns[1:],
			want:  []string{`namespace "orders" on ` + nameB, "step 2 offset 2", "auto_increment_increment 4 offset 3"},
		},
		{
			name: "flush at commit off",
			set:  []string{"SET GLOBAL innodb_flush_log_at_trx_commit = 2"}, reset: []string{"SET GLOBAL innodb_flush_log_at_trx_commit = 1"},
			dsns: dsns[:1],
			want: []string{"innodb_flush_log_at_trx_commit is 2 on " + nameA, "set innodb_flush_log_at_trx_commit=1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := pair[0]
			if tt.onB {
				target = pair[1]
			}
			testenv.Exec(t, target.DSN(""), tt.set...)
			defer testenv.Exec(t, target.DSN(""), tt.reset...)
			use := dsns
			if tt.dsns != nil {
				use = tt.dsns
			}
			_, err := Open(context.Background(), Config{DSNs: use, Logger: quiet})
			if !errors.Is(err, allocator.ErrMisconfigured) {
				t.Fatalf("Open: %v, want ErrMisconfigured", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// A server wrong on its own, with another that can serve: it is left out with the reason.
	t.Run("one server wrong on its own is left out", func(t *testing.T) {
		testenv.Exec(t, pair[0].DSN(""), "SET GLOBAL innodb_flush_log_at_trx_commit = 2")
		defer testenv.Exec(t, pair[0].DSN(""), "SET GLOBAL innodb_flush_log_at_trx_commit = 1")
		p, err := Open(context.Background(), Config{DSNs: dsns, Logger: quiet})
		if err != nil {
			t.Fatalf("Open: %v; B can serve", err)
		}
		defer p.Close()
		if h := healthOf(p, nameA); h.Healthy || !strings.Contains(h.Error, "innodb_flush_log_at_trx_commit is 2 on "+nameA) {
			t.Fatalf("A: %+v", h)
		}
		for range 5 {
			if b, err := p.Lease(context.Background(), "orders", 10); err != nil || b.Server != nameB {
				t.Fatalf("lease: %v, %v; want B", b, err)
			}
		}
	})
	// The increment-below-count case with two servers, both increment 1 (offsets 1 and 1).
	t.Run("two servers increment one", func(t *testing.T) {
		for _, m := range pair {
			testenv.Exec(t, m.DSN(""), "SET GLOBAL auto_increment_increment = 1", "SET GLOBAL auto_increment_offset = 1")
		}
		defer func() {
			for i, m := range pair {
				testenv.Exec(t, m.DSN(""), "SET GLOBAL auto_increment_increment = 2", "SET GLOBAL auto_increment_offset = "+string(rune('1'+i)))
			}
		}()
		_, err := Open(context.Background(), Config{DSNs: []string{pair[0].DSN(""), pair[1].DSN("")}, Logger: quiet})
		if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "below the 2 ticket servers configured") {
			t.Fatalf("Open: %v, want 'below the 2 ticket servers configured'", err)
		}
	})
	// And after every reset the pair opens again.
	p2 := openStore(t, dsns, nil)
	if _, err := p2.Lease(context.Background(), "orders", 10); err != nil {
		t.Fatal(err)
	}
}

// TestSyncBinlogRefusedWhenBinlogOn needs a server with the binary log on.
func TestSyncBinlogRefusedWhenBinlogOn(t *testing.T) {
	m := testenv.PrivateMariaDB(t, testservers.MariaDBOptions{Increment: 2, Offset: 1,
		ExtraArgs: []string{"--log-bin=binlog", "--server-id=1", "--sync-binlog=0"}})
	testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	_, err := Open(context.Background(), Config{DSNs: []string{m.DSN("ticketd")}, Logger: quiet, Migrate: true})
	if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "sync_binlog is 0") || !strings.Contains(err.Error(), "set sync_binlog=1") {
		t.Fatalf("Open: %v, want a refusal that says to set sync_binlog=1", err)
	}
	testenv.Exec(t, m.DSN(""), "SET GLOBAL sync_binlog = 1")
	p := openStore(t, []string{m.DSN("ticketd")}, nil)
	p.Close()
}

// TestServerDiesMidRun kills one server of the pair while 16 goroutines lease: every lease still
// succeeds. The killed server restarts and its next lease starts above every ID it issued before.
func TestServerDiesMidRun(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	p := openStore(t, []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}, nil)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	allocatortest.CheckKilledMidRun(t, p, "orders", p.Servers()[1], pair[1], 1000)
}

// TestBothDownIsUnavailableWithinTimeout stops both servers: a lease fails with ErrUnavailable within
// the configured timeout, and succeeds again once a server is back.
func TestBothDownIsUnavailableWithinTimeout(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	const timeout = 1500 * time.Millisecond
	p := openStore(t, []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}, func(c *Config) {
		c.Timeout, c.AttemptTimeout = timeout, 500*time.Millisecond
	})
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	before, err := p.Lease(ctx, "orders", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range pair {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	allocatortest.CheckUnavailable(t, p, "orders", 100, timeout)
	if err := pair[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	if b := allocatortest.LeaseWithin(t, p, "orders", 100, 20*time.Second); b.Start <= before.Start && b.Server == before.Server {
		t.Fatalf("after restart leased %v, not above %v", b, before)
	}
}

// TestStartWithOneServerDown opens the pair while B is down: leases come from A; a namespace created
// meanwhile gets its row on B when B comes back, after B passes its checks.
func TestStartWithOneServerDown(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	dsns := []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}
	p := openStore(t, dsns, nil)
	p.Close()
	if err := pair[1].Stop(); err != nil {
		t.Fatal(err)
	}
	p = openStore(t, dsns, nil)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	nameA, nameB := p.Servers()[0], p.Servers()[1]
	var blocks []allocator.Block
	for range 20 {
		b, err := p.Lease(ctx, "late", 10)
		if err != nil {
			t.Fatal(err)
		}
		if b.Server != nameA {
			t.Fatalf("lease from %s while it is down", b.Server)
		}
		blocks = append(blocks, b)
	}
	if err := pair[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	blocks = append(blocks, allocatortest.LeaseUntil(t, nameB, func() (allocator.Block, error) { return p.Lease(ctx, "late", 10) })...)
	b := blocks[len(blocks)-1]
	if b.Start%2 != 0 {
		t.Fatalf("B issued %v", b)
	}
	// B's row was made while it was away: it starts above A's counter, not at the namespace's start,
	// so B's IDs stay roughly in time order with A's.
	if last, _ := blocks[19].Last(); b.Start < last {
		t.Fatalf("B's first block %v starts below A's earlier IDs (up to %d)", b, last)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	ns, err := p.Namespace(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ns.Servers {
		if !s.Healthy || s.Next < 1 {
			t.Fatalf("server state %+v", s)
		}
	}
}
