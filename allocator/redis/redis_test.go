package redis

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testConfig is a configuration for tests: a key prefix of the test's own (tests share one Redis),
// quick probes and backoff, no log output.
func testConfig(addrs ...string) Config {
	return Config{Addrs: addrs, KeyPrefix: testenv.UniqueName("t") + ":", Logger: quiet,
		Failover: allocator.Failover{ProbeInterval: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}}
}

// openStore opens a store and closes it, and removes its keys, when the test ends.
func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		for _, addr := range cfg.Addrs {
			dropPrefix(addr, cfg.KeyPrefix)
		}
	})
	return s
}

// dropPrefix deletes every key under prefix, best effort (the instance may be dead by now).
func dropPrefix(addr, prefix string) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// rawClient is a plain client to look at (or tamper with) an instance's keys.
func rawClient(t testing.TB, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// privatePair starts two throwaway Redis instances (AOF, appendfsync always).
func privatePair(t testing.TB) [2]*testservers.Redis {
	t.Helper()
	return [2]*testservers.Redis{testenv.PrivateRedis(t, testservers.RedisOptions{}), testenv.PrivateRedis(t, testservers.RedisOptions{})}
}

func TestConformance(t *testing.T) {
	t.Run("one instance", func(t *testing.T) {
		addr := testenv.RedisAddr(t)
		allocatortest.Run(t, func(t *testing.T) allocator.Backend {
			return openStore(t, testConfig(addr))
		}, allocatortest.Options{})
	})
	t.Run("two instances", func(t *testing.T) {
		pair := privatePair(t)
		var last Config // the configuration open used last, for Another
		allocatortest.Run(t, func(t *testing.T) allocator.Backend {
			last = testConfig(pair[0].Addr(), pair[1].Addr())
			return openStore(t, last)
		}, allocatortest.Options{Another: func(t *testing.T) allocator.Backend { return openStore(t, last) }})
	})
}

// TestParity checks the Flickr promise on Redis: across 20,000 leases from 32 goroutines, the instance
// of offset 1 issues only odd IDs and the one of offset 2 only even ones, and no ID is issued twice.
func TestParity(t *testing.T) {
	pair := privatePair(t)
	s := openStore(t, testConfig(pair[0].Addr(), pair[1].Addr()))
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "parity"}); err != nil {
		t.Fatal(err)
	}
	blocks, err := allocatortest.LeaseConcurrently(s, "parity", 32, 20_000)
	if err != nil {
		t.Fatal(err)
	}
	perServer, err := allocatortest.CheckParity(blocks, []string{pair[0].Addr(), pair[1].Addr()}) // offset 1: odd
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leases: %v", len(blocks), perServer)
}

// TestOpenRefusesBadLayouts checks that instance layouts that could issue one ID twice are refused
// before any lease, with an error that says what to change.
func TestOpenRefusesBadLayouts(t *testing.T) {
	addr := testenv.RedisAddr(t)
	port := addr[strings.LastIndexByte(addr, ':'):]
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"shared offset", Config{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Offsets: []int64{1, 1}},
			[]string{"127.0.0.1:1 and 127.0.0.1:2 share offset 1", "own offset in 1..2"}},
		{"offset zero", Config{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Offsets: []int64{0, 2}},
			[]string{"offset 0", "outside 1..2"}},
		{"offset above stride", Config{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Offsets: []int64{1, 3}},
			[]string{"offset 3", "outside 1..2"}},
		{"stride below instance count", Config{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Stride: 1},
			[]string{"stride 1 must be between the number of Redis instances (2)"}},
		{"offsets do not match addresses", Config{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Offsets: []int64{1}},
			[]string{"1 offsets for 2 Redis instances"}},
		{"one instance under two names", Config{Addrs: []string{"127.0.0.1" + port, "localhost" + port}},
			[]string{"are one Redis instance", "list each instance once"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Logger, cfg.KeyPrefix = quiet, testenv.UniqueName("t")+":"
			defer dropPrefix(addr, cfg.KeyPrefix)
			s, err := Open(context.Background(), cfg)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
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
	t.Run("listed twice", func(t *testing.T) {
		_, err := Open(context.Background(), Config{Addrs: []string{addr, " " + addr}, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "listed twice") {
			t.Fatalf("Open: %v, want 'listed twice'", err)
		}
	})
	t.Run("bad address", func(t *testing.T) {
		_, err := Open(context.Background(), Config{Addrs: []string{"no-port"}, Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "want host:port or a redis:// URL") {
			t.Fatalf("Open: %v", err)
		}
	})
}

// TestInstanceRemembersItsOffset: an instance that served offset 1 refuses to serve offset 2, which
// would be another instance's IDs (addresses given in another order, say).
func TestInstanceRemembersItsOffset(t *testing.T) {
	addr := testenv.RedisAddr(t)
	cfg := testConfig(addr)
	s := openStore(t, cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	moved := cfg
	moved.Stride, moved.Offsets = 2, []int64{2}
	_, err := Open(ctx, moved)
	if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "serves offset 1 of stride 1") ||
		!strings.Contains(err.Error(), "configured as offset 2 of stride 2") {
		t.Fatalf("Open with another offset: %v", err)
	}
	// The same layout opens again, and leases continue.
	s = openStore(t, cfg)
	if _, err := s.Lease(ctx, "orders", 10); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedRequestsChangeNoCounter checks bad input and exhaustion against the stored counter.
func TestRefusedRequestsChangeNoCounter(t *testing.T) {
	addr := testenv.RedisAddr(t)
	cfg := testConfig(addr)
	s := openStore(t, cfg)
	raw := rawClient(t, addr)
	ctx := context.Background()
	counter := func(ns string) string {
		t.Helper()
		v, err := raw.Get(ctx, s.keys.counter(ns)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "small", BlockSize: 5, MaxBlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	// Exactly 20 IDs left: MaxInt64-20 … MaxInt64-1 (the counter itself may reach MaxInt64, never pass it).
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "edge", Start: math.MaxInt64 - 20}); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{"small": counter("small"), "edge": counter("edge")}
	for _, c := range []struct {
		ns   string
		size int64
		want error
	}{
		{"small", 11, allocator.ErrInvalidSize},
		{"small", -1, allocator.ErrInvalidSize},
		{"small", allocator.MaxBlockSizeLimit + 1, allocator.ErrInvalidSize},
		{"Small", 1, allocator.ErrInvalidNamespace},
	} {
		if _, err := s.Lease(ctx, c.ns, c.size); !errors.Is(err, c.want) {
			t.Errorf("Lease(%q, %d): %v, want %v", c.ns, c.size, err, c.want)
		}
	}
	for ns, v := range before {
		if got := counter(ns); got != v {
			t.Errorf("a refused lease moved %q's counter from %s to %s", ns, v, got)
		}
	}
	// A lease of 21 gets the last 20 IDs, a block cut short.
	b, err := s.Lease(ctx, "edge", 21)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := b.Last(); b.Start != math.MaxInt64-20 || b.Size != 20 || last != math.MaxInt64-1 {
		t.Fatalf("last block %v", b)
	}
	end := counter("edge")
	if _, err := s.Lease(ctx, "edge", 1); !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("after the last block: %v, want ErrExhausted", err)
	}
	if got := counter("edge"); got != end {
		t.Fatalf("an exhausted lease moved the counter from %s to %s", end, got)
	}
	if got := counter("edge"); got != "9223372036854775807" {
		t.Fatalf("counter %s after exhaustion", got)
	}
}

// TestCounterChangedOutsideTicketdIsRefused: a counter of the wrong residue (edited by hand) is never
// leased from, and the refusal leaves it as it was.
func TestCounterChangedOutsideTicketdIsRefused(t *testing.T) {
	pair := privatePair(t)
	cfg := testConfig(pair[0].Addr(), pair[1].Addr())
	s := openStore(t, cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	rawB := rawClient(t, pair[1].Addr())
	const odd = "4611686018427387905" // 2^62+1, past what a Lua double holds exactly
	if err := rawB.Set(ctx, s.keys.counter("orders"), odd, 0).Err(); err != nil {
		t.Fatal(err)
	}
	b, err := s.LeaseFrom(ctx, "orders", 10, pair[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	if b.Server != pair[0].Addr() || b.Start%2 != 1 {
		t.Fatalf("leased %v; the instance with a bad counter must be skipped", b)
	}
	if got := rawB.Get(ctx, s.keys.counter("orders")).Val(); got != odd {
		t.Fatalf("refused lease moved the counter to %s", got)
	}
	h := s.Health()[1]
	if h.Healthy || !strings.Contains(h.Error, "not ≡ offset 2 (mod 2)") {
		t.Fatalf("health of the instance with a bad counter: %+v", h)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:secret@db:6379/0":    "redis://…@db:6379/0",
		"redis://user:p@ss@db:6379":    "redis://…@db:6379",
		"db:6379":                      "db:6379",
		"rediss://db.example.com:6380": "rediss://db.example.com:6380",
		":secret@db:6379":              "…@db:6379", // no scheme: nothing of the password either
		"user:secret@db:6379":          "…@db:6379",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
