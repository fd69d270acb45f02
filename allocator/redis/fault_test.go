package redis

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// TestVolatileInstancesAreRefused runs one Redis through the settings that lose acknowledged writes:
// each is refused with an error that says how to fix it, and AllowVolatile opens it with a warning.
func TestVolatileInstancesAreRefused(t *testing.T) {
	r := testenv.PrivateRedis(t, testservers.RedisOptions{Volatile: true})
	raw := rawClient(t, r.Addr())
	ctx := context.Background()
	set := func(kv ...string) {
		t.Helper()
		for i := 0; i < len(kv); i += 2 {
			if err := raw.ConfigSet(ctx, kv[i], kv[i+1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	refused := func(t *testing.T, want ...string) {
		t.Helper()
		s, err := Open(ctx, testConfig(r.Addr()))
		if err == nil {
			s.Close()
			t.Fatal("Open succeeded")
		}
		if !errors.Is(err, allocator.ErrMisconfigured) {
			t.Fatalf("Open: %v, want ErrMisconfigured", err)
		}
		for _, w := range append(want, r.Addr(), "IDs issued twice", "appendfsync always", "AllowVolatile", "--allow-volatile-redis") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	}

	t.Run("no AOF", func(t *testing.T) {
		refused(t, `appendonly is "no"`, "a restart loses every lease since the last snapshot")
	})
	t.Run("no AOF allowed", func(t *testing.T) {
		var logs allocatortest.LogBuffer
		cfg := testConfig(r.Addr())
		cfg.AllowVolatile, cfg.Logger = true, slog.New(slog.NewTextHandler(&logs, nil))
		s := openStore(t, cfg)
		if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "v"}); err != nil {
			t.Fatal(err)
		}
		if b, err := s.Lease(ctx, "v", 10); err != nil || b.Start != 1 {
			t.Fatalf("Lease: %v, %v", b, err)
		}
		out := logs.String()
		for _, w := range []string{"level=WARN", "reissue IDs", r.Addr(), `appendonly is \"no\"`} {
			if !strings.Contains(out, w) {
				t.Errorf("log %q does not say %q", out, w)
			}
		}
	})
	t.Run("fsync every second", func(t *testing.T) {
		set("appendonly", "yes", "appendfsync", "everysec")
		refused(t, `appendfsync is "everysec"`)
	})
	t.Run("evicting any key", func(t *testing.T) {
		set("appendfsync", "always", "maxmemory-policy", "allkeys-lru")
		refused(t, `maxmemory-policy is "allkeys-lru"`, "maxmemory-policy noeviction")
	})
	t.Run("durable", func(t *testing.T) {
		set("maxmemory-policy", "noeviction")
		s := openStore(t, testConfig(r.Addr()))
		if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "d"}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestInstanceKilledMidRun kills one of two instances (SIGKILL) while 16 goroutines lease: every lease
// still succeeds, from the other. The killed instance restarts from its append-only file, comes back
// into rotation, and its next block starts above every ID it issued before.
func TestInstanceKilledMidRun(t *testing.T) {
	pair := privatePair(t)
	s := openStore(t, testConfig(pair[0].Addr(), pair[1].Addr()))
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	for _, b := range allocatortest.CheckKilledMidRun(t, s, "orders", pair[1].Addr(), pair[1], 2000) {
		if b.Start%2 != 0 {
			t.Fatalf("after SIGKILL and restart, the even instance leased %v", b)
		}
	}
}

// TestRestartContinuesAboveEveryIssuedID: leases, SIGKILL, restart, a new store: the counter read
// back from the append-only file (appendfsync always) is above every ID issued before the crash.
func TestRestartContinuesAboveEveryIssuedID(t *testing.T) {
	r := testenv.PrivateRedis(t, testservers.RedisOptions{})
	cfg := testConfig(r.Addr())
	ctx := context.Background()
	s := openStore(t, cfg)
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	var blocks []allocator.Block
	for i := range 200 {
		b, err := s.Lease(ctx, "orders", int64(1+i%50))
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	b, err := s.Lease(ctx, "orders", 10)
	if err != nil {
		t.Fatal(err)
	}
	if h := allocatortest.Highest(blocks, r.Addr()); b.Start <= h {
		t.Fatalf("after SIGKILL and restart leased %v, at or below the highest issued ID %d", b, h)
	}
	if err := allocatortest.CheckDisjoint(append(blocks, b)); err != nil {
		t.Fatal(err)
	}
}

// TestAllDownIsUnavailableWithinTimeout kills both instances: a lease fails with ErrUnavailable within
// the configured timeout, health says why, and leases resume once one instance is back.
func TestAllDownIsUnavailableWithinTimeout(t *testing.T) {
	pair := privatePair(t)
	const timeout = 1500 * time.Millisecond
	cfg := testConfig(pair[0].Addr(), pair[1].Addr())
	cfg.Timeout, cfg.AttemptTimeout = timeout, 500*time.Millisecond
	s := openStore(t, cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	var before []allocator.Block
	for range 10 {
		b, err := s.Lease(ctx, "orders", 100)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, b)
	}
	for _, r := range pair {
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	allocatortest.CheckUnavailable(t, s, "orders", 100, timeout)
	if err := pair[0].Start(ctx); err != nil {
		t.Fatal(err)
	}
	b := allocatortest.LeaseWithin(t, s, "orders", 100, 20*time.Second)
	if b.Server != pair[0].Addr() || b.Start <= allocatortest.Highest(before, pair[0].Addr()) {
		t.Fatalf("after restart leased %v, not above %d", b, allocatortest.Highest(before, pair[0].Addr()))
	}
}

// TestInstanceThatMissedChangesCatchesUp opens the store while B is down, creates a namespace and
// advances its start: when B comes back it gets the namespace, the advanced counter and its own parity.
func TestInstanceThatMissedChangesCatchesUp(t *testing.T) {
	pair := privatePair(t)
	cfg := testConfig(pair[0].Addr(), pair[1].Addr())
	s := openStore(t, cfg) // B claims offset 2 here
	s.Close()
	if err := pair[1].Kill(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "late", BlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNamespace(ctx, allocator.Namespace{Name: "late", BlockSize: 20, Start: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	nameA, nameB := pair[0].Addr(), pair[1].Addr()
	var blocks []allocator.Block
	for range 20 {
		b, err := s.Lease(ctx, "late", 0)
		if err != nil {
			t.Fatal(err)
		}
		if b.Server != nameA || b.Size != 20 {
			t.Fatalf("leased %v while B is down", b)
		}
		blocks = append(blocks, b)
	}
	if err := pair[1].Start(ctx); err != nil {
		t.Fatal(err)
	}
	blocks = append(blocks, allocatortest.LeaseUntil(t, nameB, func() (allocator.Block, error) { return s.LeaseFrom(ctx, "late", 0, nameB) })...)
	if b := blocks[len(blocks)-1]; b.Start%2 != 0 || b.Start < 1_000_000 || b.Size != 20 {
		t.Fatalf("B came back and leased %v; want even IDs from 1,000,000 in blocks of 20", b)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	ns, err := s.Namespace(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range ns.Servers {
		if !st.Healthy || st.Next < 1_000_000 || st.Step != 2 {
			t.Fatalf("server state %+v", st)
		}
	}
}
