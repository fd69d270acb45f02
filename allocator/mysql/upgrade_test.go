package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// olderLeaseRate writes a lease rate as a ticketd of the releases before schema 6 does, every water-mark
// interval while it leases: with its own clock's time in updated_us.
func olderLeaseRate(t *testing.T, dsn, namespace string, offset int64, at time.Time) {
	t.Helper()
	testenv.Exec(t, dsn, fmt.Sprintf(`INSERT INTO ticketd_lease_rates (namespace, peer_offset, peak_per_s, updated_us)
		VALUES ('%s', %d, 5000, %d) ON DUPLICATE KEY UPDATE peak_per_s = GREATEST(peak_per_s, VALUES(peak_per_s)), updated_us = VALUES(updated_us)`,
		namespace, offset, at.UnixMicro()))
}

// TestCeilingRefusedWhileAnOlderReleaseLeases: during a rolling upgrade, a ticketd of an older release
// that leases a namespace ignores its ceiling. While one has leased it within the last minute (its
// lease rates say so), a new process refuses to lower the namespace's max_id or to create one with a
// ceiling, and says what to do; other changes go through, and once the older process has stopped, the
// ceiling is set.
func TestCeilingRefusedWhileAnOlderReleaseLeases(t *testing.T) {
	f := newFleet(t, nil)
	ctx := context.Background()
	p := openStore(t, f.dsns, f.tweak)
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lease(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	olderLeaseRate(t, f.pair[1].DSN("ticketd"), "orders", 1, time.Now())
	olderLeaseRate(t, f.pair[1].DSN("ticketd"), "capped", 1, time.Now())
	for name, change := range map[string]func() error{
		"lowering max_id": func() error {
			_, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: 1_000_000})
			return err
		},
		"creating with a ceiling": func() error {
			_, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "capped", MaxID: 1_000_000})
			return err
		},
	} {
		err := change()
		if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), "older release") || !strings.Contains(err.Error(), p.Servers()[1]) {
			t.Fatalf("%s while an older release leases: %v; want ErrUnavailable naming the older release and where it was seen", name, err)
		}
	}
	if ns, err := p.Namespace(ctx, "orders"); err != nil || ns.MaxID != allocator.DefaultMaxID {
		t.Fatalf("after the refusal: %+v, %v", ns, err)
	}
	if _, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 50}); err != nil {
		t.Fatalf("a change that sets no ceiling: %v", err)
	}
	// The older process stopped two minutes ago.
	olderLeaseRate(t, f.pair[1].DSN("ticketd"), "orders", 1, time.Now().Add(-2*time.Minute))
	if ns, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 50, MaxID: 1_000_000}); err != nil || ns.MaxID != 1_000_000 {
		t.Fatalf("lowering once the older release stopped: %+v, %v", ns, err)
	}
}

// TestRowOfAnOlderReleaseKeepsTheCeiling: a namespace is created with max_id 3000 while B is down.
// When B comes back, a ticketd of a release before ceilings meets it first and gives it the row it
// missed as that release did: with the default ceiling, stamped as the newest settings. Every process
// of this release still keeps every lease at or below 3000, on B too: a ceiling written without its
// time never overrides one set at a known time.
func TestRowOfAnOlderReleaseKeepsTheCeiling(t *testing.T) {
	f := newFleet(t, nil)
	ctx := context.Background()
	if err := f.Stop(1); err != nil {
		t.Fatal(err)
	}
	p1 := openStore(t, f.dsns[:1], f.tweak)
	if _, err := p1.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: 3000}); err != nil {
		t.Fatal(err)
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMicro()
	testenv.Exec(t, f.pair[1].DSN("ticketd"), fmt.Sprintf(`INSERT IGNORE INTO ticketd_namespaces
		(name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, created_us, updated_us)
		VALUES ('orders', 2, 2, 2, 1, 100, 1000000, 0, %d, %d)`, now, now))
	p2 := openStore(t, f.dsns, f.tweak)
	if ns, err := p2.Namespace(ctx, "orders"); err != nil || ns.MaxID != 3000 {
		t.Fatalf("the namespace as a process of this release reads it: %+v, %v; want max_id 3000", ns, err)
	}
	var blocks []allocator.Block
	for {
		blk, err := p2.LeaseFrom(ctx, "orders", 0, p2.Servers()[1])
		if errors.Is(err, allocator.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if last, _ := blk.Last(); last > 3000 {
			t.Fatalf("leased %v above max_id 3000", blk)
		}
		blocks = append(blocks, blk)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	if h := allocatortest.Highest(blocks, p2.Servers()[1]); h < 2900 {
		t.Fatalf("%s issued up to %d only: it should serve up to the ceiling", p2.Servers()[1], h)
	}
}

// TestMarkWritesThatFailAreShown: a ticketd user that may lease but not write the peers' water marks
// serves, but each server's health says that the marks do not reach it, and so does doctor; once the
// grant is there, the health is clear again.
func TestMarkWritesThatFailAreShown(t *testing.T) {
	f := newFleet(t, nil)
	ctx := context.Background()
	var dsns []string
	for _, m := range f.pair {
		testenv.Exec(t, m.DSN(""), "CREATE USER 'lessee'@'%'",
			"GRANT SELECT, INSERT, UPDATE ON ticketd.ticketd_namespaces TO 'lessee'@'%'",
			"GRANT SELECT ON ticketd.* TO 'lessee'@'%'")
		dsns = append(dsns, fmt.Sprintf("lessee@tcp(127.0.0.1:%d)/ticketd", m.Port))
	}
	p := openStore(t, dsns, func(c *Config) { f.tweak(c); c.WatermarkInterval = 50 * time.Millisecond })
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Servers() {
		allocatortest.LeaseUntil(t, s, func() (allocator.Block, error) { return p.LeaseFrom(ctx, "orders", 0, s) })
	}
	waitFor(t, "every server to say that the marks do not reach it", func() bool {
		for _, h := range p.Health() {
			if !h.Healthy || !strings.Contains(h.Marks, "have not been written here") || !strings.Contains(h.Marks, "command denied") {
				return false
			}
		}
		return true
	})
	d, err := Diagnose(ctx, Config{DSNs: dsns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, problem := range d.Problems {
		if strings.Contains(problem, "cannot write the water marks") {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("doctor's problems %q: want one about the water marks per server", d.Problems)
	}
	for _, m := range f.pair {
		testenv.Exec(t, m.DSN(""), "GRANT SELECT, INSERT, UPDATE ON ticketd.ticketd_watermarks TO 'lessee'@'%'",
			"GRANT SELECT, INSERT, UPDATE ON ticketd.ticketd_lease_rates TO 'lessee'@'%'")
	}
	if _, err := p.Lease(ctx, "orders", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the marks to reach every server again", func() bool {
		for _, h := range p.Health() {
			if h.Marks != "" {
				return false
			}
		}
		return true
	})
}
