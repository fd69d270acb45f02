package mysql

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// TestMisconfigurationsAreRefused changes one global setting at a time on a private pair and checks
// that Open refuses with an error that names the problem and the server.
func TestMisconfigurationsAreRefused(t *testing.T) {
	pair := testenv.PrivatePair(t)
	dsns := []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	p := openPair(t, dsns, nil)
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
	p2 := openPair(t, dsns, nil)
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
	p := openPair(t, []string{m.DSN("ticketd")}, nil)
	p.Close()
}

// leaseLoop leases from p on n goroutines until stop is closed; it records blocks and errors.
type leaseLoop struct {
	mu     sync.Mutex
	blocks []allocator.Block
	errs   []error
	wg     sync.WaitGroup
	count  atomic.Int64
}

func startLeasing(p *Pair, ns string, n int, stop <-chan struct{}) *leaseLoop {
	l := &leaseLoop{}
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := p.Lease(context.Background(), ns, 10)
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.blocks = append(l.blocks, b)
				}
				l.mu.Unlock()
				l.count.Add(1)
			}
		}()
	}
	return l
}

func waitForLeases(t *testing.T, l *leaseLoop, n int64) {
	t.Helper()
	target := l.count.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for l.count.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("leases stalled at %d", l.count.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServerDiesMidRun kills one server of the pair while 16 goroutines lease: every lease still
// succeeds. The killed server restarts and its next lease starts above every ID it issued before.
func TestServerDiesMidRun(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	p := openPair(t, []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}, nil)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameB := p.Servers()[1]
	stop := make(chan struct{})
	l := startLeasing(p, "orders", 16, stop)
	waitForLeases(t, l, 500)
	if err := pair[1].Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := l.count.Load()
	waitForLeases(t, l, 1000)
	l.mu.Lock()
	var highestB int64
	for _, b := range l.blocks {
		if last, _ := b.Last(); b.Server == nameB && last > highestB {
			highestB = last
		}
	}
	l.mu.Unlock()

	l.mu.Lock()
	restartIdx := len(l.blocks)
	l.mu.Unlock()
	if err := pair[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	// B comes back: the probe checks it and leases reach it again.
	deadline := time.Now().Add(20 * time.Second)
	var afterRestart []allocator.Block
	for len(afterRestart) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the restarted server never served again")
		}
		time.Sleep(20 * time.Millisecond)
		l.mu.Lock()
		for _, b := range l.blocks[restartIdx:] {
			if b.Server == nameB {
				afterRestart = append(afterRestart, b)
			}
		}
		l.mu.Unlock()
	}
	close(stop)
	l.wg.Wait()
	if len(l.errs) > 0 {
		t.Fatalf("%d of %d leases failed while one server was down; first: %v", len(l.errs), l.count.Load(), l.errs[0])
	}
	for _, b := range afterRestart {
		if b.Start <= highestB {
			t.Fatalf("after SIGKILL and restart, %s leased %v, not above its highest earlier ID %d", nameB, b, highestB)
		}
	}
	if err := allocatortest.CheckDisjoint(l.blocks); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leases (%d after the kill), none failed; B's highest ID before the kill %d, first block after restart %v",
		l.count.Load(), l.count.Load()-killedAt, highestB, afterRestart[0])
}

// TestBothDownIsUnavailableWithinTimeout stops both servers: a lease fails with ErrUnavailable within
// the configured timeout, and succeeds again once a server is back.
func TestBothDownIsUnavailableWithinTimeout(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	const timeout = 1500 * time.Millisecond
	p := openPair(t, []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}, func(c *Config) {
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
	for range 3 {
		start := time.Now()
		_, err := p.Lease(ctx, "orders", 100)
		took := time.Since(start)
		if !errors.Is(err, allocator.ErrUnavailable) {
			t.Fatalf("with both servers down: %v, want ErrUnavailable", err)
		}
		// Generous slack: the bound under test is the configured timeout, not the machine's speed.
		if took > timeout+2*time.Second {
			t.Fatalf("ErrUnavailable after %v, configured timeout %v", took, timeout)
		}
	}
	for _, h := range p.Health() {
		if h.Healthy || h.Error == "" {
			t.Fatalf("health %+v, want unhealthy with a reason", h)
		}
	}
	if err := pair[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := p.Lease(ctx, "orders", 100)
		if err == nil {
			if b.Start <= before.Start && b.Server == before.Server {
				t.Fatalf("after restart leased %v, not above %v", b, before)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease after a server restarted: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
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
	p := openPair(t, dsns, nil)
	p.Close()
	if err := pair[1].Stop(); err != nil {
		t.Fatal(err)
	}
	p = openPair(t, dsns, nil)
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := p.Lease(ctx, "late", 10)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
		if b.Server == nameB {
			if b.Start%2 != 0 {
				t.Fatalf("B issued %v", b)
			}
			// B's row was made while it was away: it starts above A's counter, not at the namespace's
			// start, so B's IDs stay roughly in time order with A's.
			if last, _ := blocks[19].Last(); b.Start < last {
				t.Fatalf("B's first block %v starts below A's earlier IDs (up to %d)", b, last)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never served after it came back")
		}
		time.Sleep(10 * time.Millisecond)
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
