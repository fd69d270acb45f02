package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// fakeRecord is a namespace's settings as a fakeServer holds them.
type fakeRecord struct {
	ns      allocator.Namespace
	updated int64
	ceiling int64 // when max_id was set; 0 when unknown
}

func (r fakeRecord) Namespace() allocator.Namespace { return r.ns }
func (r fakeRecord) UpdatedUS() int64               { return r.updated }
func (r fakeRecord) CeilingUS() int64               { return r.ceiling }

func (r fakeRecord) WithLimits(maxID, ceilingUS, start int64) fakeRecord {
	r.ns.MaxID, r.ceiling, r.ns.Start = maxID, ceilingUS, start
	return r
}

// fakeServer is an in-memory ticket server: its records, an error every read returns while it is
// "down", and the outcome of its revival check.
type fakeServer struct {
	*Member
	mu        sync.Mutex
	records   map[string]fakeRecord
	readErr   error
	reviveErr error
	revivals  int
}

func (f *fakeServer) Revive(ctx context.Context) error {
	return f.ReviveWith(ctx, func(context.Context) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.revivals++
		return f.reviveErr
	})
}

func (f *fakeServer) ReadRecord(_ context.Context, name string) (fakeRecord, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readErr != nil {
		return fakeRecord{}, false, f.readErr
	}
	r, ok := f.records[name]
	return r, ok, nil
}

func (f *fakeServer) ReadRecords(context.Context) ([]fakeRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.readErr != nil {
		return nil, f.readErr
	}
	var out []fakeRecord
	for _, r := range f.records {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeServer) set(readErr, reviveErr error) {
	f.mu.Lock()
	f.readErr, f.reviveErr = readErr, reviveErr
	f.mu.Unlock()
}

// observer counts lease attempts and failovers per server.
type observer struct {
	mu        sync.Mutex
	leases    map[string]int
	failovers map[string]int
}

func (o *observer) ObserveLease(server string, _ time.Duration, _ error) {
	o.mu.Lock()
	o.leases[server]++
	o.mu.Unlock()
}

func (o *observer) ObserveFailover(from string) {
	o.mu.Lock()
	o.failovers[from]++
	o.mu.Unlock()
}

// fixture is a Set of n usable fake servers, each holding namespace "orders" (block size 10).
type fixture struct {
	set     *Set[*fakeServer, fakeRecord]
	servers []*fakeServer
	clock   *allocatortest.Clock
	obs     *observer
	logs    *allocatortest.LogBuffer
}

func newFixture(t *testing.T, n int, tweak func(*Config)) *fixture {
	t.Helper()
	fx := &fixture{clock: allocatortest.NewClockAt(time.Unix(1000, 0)), obs: &observer{leases: map[string]int{}, failovers: map[string]int{}}, logs: &allocatortest.LogBuffer{}}
	cfg := *testConfig(fx.clock, fx.logs)
	cfg.Observer = fx.obs
	if tweak != nil {
		tweak(&cfg)
	}
	fx.set = NewSet[*fakeServer, fakeRecord](cfg)
	orders := allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100}
	for i := range n {
		s := &fakeServer{Member: fx.set.NewMember(fmt.Sprintf("s%d", i+1)), records: map[string]fakeRecord{"orders": {orders, 1, 1}}}
		s.MarkUsable()
		fx.set.Add(s)
		fx.servers = append(fx.servers, s)
	}
	t.Cleanup(func() { fx.set.Close(func() {}) })
	return fx
}

// issue is a lease function that gives each server its own block per call, or the server's error.
func issue(fail map[string]error) func(context.Context, *fakeServer, fakeRecord, int64) (allocator.Block, error) {
	var mu sync.Mutex
	next := map[string]int64{}
	return func(_ context.Context, s *fakeServer, r fakeRecord, size int64) (allocator.Block, error) {
		mu.Lock()
		defer mu.Unlock()
		if err := fail[s.Name()]; err != nil {
			return allocator.Block{}, err
		}
		next[s.Name()] += size
		return allocator.Block{Namespace: r.ns.Name, Server: s.Name(), Start: next[s.Name()], Step: 1, Size: size}, nil
	}
}

func TestLeaseRoundRobinAndPrefer(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	lease := issue(nil)
	seen := map[string]int{}
	for range 10 {
		b, err := fx.set.Lease(ctx, "orders", 0, "", lease)
		if err != nil {
			t.Fatal(err)
		}
		if b.Size != 10 {
			t.Fatalf("size 0 leased %d IDs, want the namespace's 10", b.Size)
		}
		seen[b.Server]++
	}
	if seen["s1"] != 5 || seen["s2"] != 5 {
		t.Fatalf("round-robin spread %v, want 5 each", seen)
	}
	for range 3 {
		if b, err := fx.set.Lease(ctx, "orders", 5, "s2", lease); err != nil || b.Server != "s2" {
			t.Fatalf("prefer s2: %v, %v", b, err)
		}
	}
	if _, err := fx.set.Lease(ctx, "orders", 101, "", lease); !errors.Is(err, allocator.ErrInvalidSize) {
		t.Fatalf("size above the maximum: %v, want ErrInvalidSize", err)
	}
	if _, err := fx.set.Lease(ctx, "nope", 1, "", lease); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("missing namespace: %v, want ErrNotFound", err)
	}
}

// TestLeaseFailsOver: a server that fails is marked down and the lease comes from the next; a server
// in backoff is skipped while another serves, and tried last when none does.
func TestLeaseFailsOver(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	refused := errors.New("connection refused")
	b, err := fx.set.Lease(ctx, "orders", 1, "s1", issue(map[string]error{"s1": refused}))
	if err != nil || b.Server != "s2" {
		t.Fatalf("with s1 failing: %v, %v; want a block from s2", b, err)
	}
	if fx.servers[0].Usable() || fx.obs.failovers["s1"] != 1 || fx.obs.leases["s1"] != 1 || fx.obs.leases["s2"] != 1 {
		t.Fatalf("s1 usable %v, observed %v %v", fx.servers[0].Usable(), fx.obs.leases, fx.obs.failovers)
	}
	if !strings.Contains(fx.logs.String(), "ticket server down; leasing from the others") {
		t.Fatalf("no warning logged: %s", fx.logs.String())
	}
	// s1 is in backoff: leases skip it without reviving it.
	for range 4 {
		if b, err := fx.set.Lease(ctx, "orders", 1, "", issue(nil)); err != nil || b.Server != "s2" {
			t.Fatalf("with s1 in backoff: %v, %v", b, err)
		}
	}
	if fx.servers[0].revivals != 0 {
		t.Fatalf("s1 revived %d times during its backoff", fx.servers[0].revivals)
	}
	// s2 fails too: s1, still in backoff, is revived and serves (the second pass).
	b, err = fx.set.Lease(ctx, "orders", 1, "", issue(map[string]error{"s2": refused}))
	if err != nil || b.Server != "s1" || fx.servers[0].revivals != 1 || !fx.servers[0].Usable() {
		t.Fatalf("second pass: %v, %v (s1 revivals %d)", b, err, fx.servers[0].revivals)
	}
}

// failing is a lease function that fails with err on the first n calls (on any server), then gives
// each server its own blocks.
func failing(n int, err error) func(context.Context, *fakeServer, fakeRecord, int64) (allocator.Block, error) {
	var mu sync.Mutex
	calls := 0
	serve := issue(nil)
	return func(ctx context.Context, s *fakeServer, r fakeRecord, size int64) (allocator.Block, error) {
		mu.Lock()
		calls++
		fail := calls <= n
		mu.Unlock()
		if fail {
			return allocator.Block{}, err
		}
		return serve(ctx, s, r, size)
	}
}

// TestLeaseKeepsTryingUntilItsTimeout: when every server fails (a cluster that stalls its writes for a
// while), a lease waits and tries them all again, round after round, and takes the block of the first
// server that serves again; each attempt is a new one, so a range whose outcome was unknown is never
// the one returned.
func TestLeaseKeepsTryingUntilItsTimeout(t *testing.T) {
	fx := newFixture(t, 2, nil)
	stalled := errors.New("Error 1205: Lock wait timeout exceeded")
	b, err := fx.set.Lease(context.Background(), "orders", 1, "", failing(5, stalled))
	if err != nil {
		t.Fatalf("lease after 5 failed attempts: %v", err)
	}
	if b.Start != 1 || fx.obs.leases["s1"]+fx.obs.leases["s2"] != 6 || fx.obs.failovers["s1"]+fx.obs.failovers["s2"] != 5 {
		t.Fatalf("block %v; attempts %v, failovers %v: want the 6th attempt's block, after 5 failures over 3 rounds", b, fx.obs.leases, fx.obs.failovers)
	}
}

// TestLeaseWakesWhenAServerIsBack: with every server down, a lease waits between rounds (5 to 10 s
// here); a server that comes back in rotation meanwhile ends the wait, and the lease takes its block at
// once rather than after a wait begun while none was in rotation.
func TestLeaseWakesWhenAServerIsBack(t *testing.T) {
	fx := newFixture(t, 2, func(c *Config) { c.MinBackoff, c.MaxBackoff, c.Timeout = 10*time.Second, 10*time.Second, time.Minute })
	refused := errors.New("connection refused")
	var mu sync.Mutex
	down := true
	tried := make(chan struct{}, 16)
	lease := func(ctx context.Context, s *fakeServer, r fakeRecord, size int64) (allocator.Block, error) {
		tried <- struct{}{}
		mu.Lock()
		defer mu.Unlock()
		if down {
			return allocator.Block{}, refused
		}
		return allocator.Block{Namespace: "orders", Start: 1, Step: 1, Size: size, Server: s.Name()}, nil
	}
	type result struct {
		blk allocator.Block
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := fx.set.Lease(context.Background(), "orders", 1, "", lease)
		done <- result{b, err}
	}()
	<-tried
	<-tried // both servers failed: the lease waits for its next round
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	down = false
	mu.Unlock()
	fx.servers[0].MarkUsable()
	select {
	case r := <-done:
		if r.err != nil || r.blk.Server != "s1" {
			t.Fatalf("lease after s1 came back: %v, %v; want s1's block", r.blk, r.err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("the lease still waits 4 s after s1 came back in rotation: it sleeps out a wait begun while none was")
	}
}

// TestLeaseGivesUpAtItsTimeout: with every server failing, a lease tries them round after round, with a
// growing wait between rounds (never in a busy loop), and fails at its timeout with each server's
// last error once.
func TestLeaseGivesUpAtItsTimeout(t *testing.T) {
	fx := newFixture(t, 2, nil) // Timeout 2s, MinBackoff 100ms, MaxBackoff 1s
	refused := errors.New("connection refused")
	_, err := fx.set.Lease(context.Background(), "orders", 1, "", issue(map[string]error{"s1": refused, "s2": refused}))
	if !errors.Is(err, allocator.ErrUnavailable) || strings.Count(err.Error(), "connection refused") != 2 ||
		!strings.Contains(err.Error(), "s1: connection refused") || !strings.Contains(err.Error(), "rounds over the servers") {
		t.Fatalf("Lease with every server down: %v", err)
	}
	// Waits of at least 50, 100, 200, 400 and 500 ms (half of each full wait) fill the 2 s: at most 6
	// waits, so at most 7 rounds of 2 attempts; and the first wait ends well before the timeout.
	attempts := fx.obs.leases["s1"] + fx.obs.leases["s2"]
	if attempts < 4 || attempts > 14 || fx.obs.leases["s1"] != fx.obs.leases["s2"] {
		t.Fatalf("attempts per server %v: want between 2 and 7 rounds over both", fx.obs.leases)
	}
}

// TestLeaseDoesNotRetryWhatOnlyAnOperatorFixes: a server that is fenced, misconfigured or exhausted is
// asked once per lease, while the others are tried until the timeout; when no server is left to try,
// the lease ends at once.
func TestLeaseDoesNotRetryWhatOnlyAnOperatorFixes(t *testing.T) {
	ctx := context.Background()
	fenced := fmt.Errorf("%w: counter below the water mark", allocator.ErrFenced)
	misconfigured := fmt.Errorf("%w: auto_increment_increment changed", allocator.ErrMisconfigured)
	exhausted := fmt.Errorf("%w: counter at the end", allocator.ErrExhausted)
	t.Run("the others are retried", func(t *testing.T) {
		fx := newFixture(t, 2, func(c *Config) { c.Timeout = 500 * time.Millisecond })
		_, err := fx.set.Lease(ctx, "orders", 1, "s1", issue(map[string]error{"s1": fenced, "s2": errors.New("connection refused")}))
		if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), "s1: "+fenced.Error()) {
			t.Fatalf("Lease: %v", err)
		}
		if fx.obs.leases["s1"] != 1 || fx.obs.leases["s2"] < 2 {
			t.Fatalf("attempts %v: want s1 (fenced) once, s2 (down) in every round", fx.obs.leases)
		}
	})
	for _, tc := range []struct {
		name string
		fail map[string]error
		want error
	}{
		{"fenced and misconfigured", map[string]error{"s1": fenced, "s2": misconfigured}, allocator.ErrUnavailable},
		{"exhausted everywhere", map[string]error{"s1": exhausted, "s2": exhausted}, allocator.ErrExhausted},
		{"exhausted and fenced", map[string]error{"s1": exhausted, "s2": fenced}, allocator.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 2, func(c *Config) { c.Timeout = time.Hour })
			_, err := fx.set.Lease(ctx, "orders", 1, "", issue(tc.fail))
			if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "rounds") {
				t.Fatalf("Lease: %v, want %v after one round", err, tc.want)
			}
			if fx.obs.leases["s1"] != 1 || fx.obs.leases["s2"] != 1 {
				t.Fatalf("attempts %v: want one each", fx.obs.leases)
			}
		})
	}
	t.Run("a request error", func(t *testing.T) {
		fx := newFixture(t, 2, func(c *Config) { c.Timeout = time.Hour })
		_, err := fx.set.Lease(ctx, "orders", 1, "s1", issue(map[string]error{"s1": fmt.Errorf("%w: above max", allocator.ErrInvalidSize)}))
		if !errors.Is(err, allocator.ErrInvalidSize) || fx.obs.leases["s1"] != 1 || fx.obs.leases["s2"] != 0 {
			t.Fatalf("Lease: %v, attempts %v: want the refusal of the first attempt, and no other", err, fx.obs.leases)
		}
	})
}

// TestLeaseRetriesEndWithTheCall: a lease that is trying its servers again ends when its caller gives
// up or the Set is closed, not at its timeout.
func TestLeaseRetriesEndWithTheCall(t *testing.T) {
	refused := map[string]error{"s1": errors.New("connection refused"), "s2": errors.New("connection refused")}
	t.Run("caller's context", func(t *testing.T) {
		fx := newFixture(t, 2, func(c *Config) { c.Timeout = time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := fx.set.Lease(ctx, "orders", 1, "", issue(refused)); !errors.Is(err, allocator.ErrUnavailable) || fx.obs.leases["s1"] < 2 {
			t.Fatalf("Lease: %v after attempts %v; want retries, then the end within the caller's time", err, fx.obs.leases)
		}
	})
	t.Run("Close", func(t *testing.T) {
		fx := newFixture(t, 2, func(c *Config) { c.Timeout = time.Hour })
		failed := make(chan struct{})
		var once sync.Once
		lease := issue(refused)
		done := make(chan error, 1)
		go func() {
			_, err := fx.set.Lease(context.Background(), "orders", 1, "", func(ctx context.Context, s *fakeServer, r fakeRecord, size int64) (allocator.Block, error) {
				once.Do(func() { close(failed) })
				return lease(ctx, s, r, size)
			})
			done <- err
		}()
		<-failed
		fx.set.Close(func() {})
		if err := <-done; !errors.Is(err, allocator.ErrUnavailable) {
			t.Fatalf("Lease after Close: %v", err)
		}
	})
}

// TestLeasePrefersAServerInBackoff: while no server is up, a lease that prefers one asks it first, even
// in backoff while another is due: the segment cache prefers one server and hedges to the other at the
// end of an outage, and the hedge must not meet the first lease's server first.
func TestLeasePrefersAServerInBackoff(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	if _, err := fx.set.Lease(ctx, "orders", 1, "", issue(nil)); err != nil {
		t.Fatal(err) // the settings, read while the servers are up
	}
	refused := errors.New("connection refused")
	for i, prefer := range []string{"s2", "s1"} {
		other := fx.servers[i]
		for _, s := range fx.servers {
			s.MarkDown(refused)
		}
		fx.clock.Advance(2 * time.Second) // past the longest backoff: both due
		fx.servers[i^1].MarkDown(refused) // the preferred server in backoff again, the other due
		if fx.servers[i^1].Name() != prefer || !other.Due(fx.clock.Now()) {
			t.Fatalf("case %d: the fixture is not as described", i)
		}
		tried := fx.obs.leases[other.Name()]
		b, err := fx.set.Lease(ctx, "orders", 1, prefer, issue(nil))
		if err != nil || b.Server != prefer || fx.obs.leases[other.Name()] != tried {
			t.Fatalf("prefer %s in backoff, %s due: %v, %v, attempts %v; want a block from %s alone",
				prefer, other.Name(), b, err, fx.obs.leases, prefer)
		}
	}
}

func TestLeaseErrors(t *testing.T) {
	ctx := context.Background()
	exhausted := fmt.Errorf("%w: counter at the end", allocator.ErrExhausted)
	refused := errors.New("connection refused")
	for _, tc := range []struct {
		name   string
		fail   map[string]error
		want   error
		says   string
		usable bool // s1 stays usable
	}{
		{"exhausted everywhere", map[string]error{"s1": exhausted, "s2": exhausted}, allocator.ErrExhausted, `namespace "orders" on every server`, true},
		{"exhausted on one, the other down", map[string]error{"s1": exhausted, "s2": refused}, allocator.ErrUnavailable, "s2: connection refused", true},
		{"every server down", map[string]error{"s1": refused, "s2": refused}, allocator.ErrUnavailable, "s1: connection refused", false},
		{"a request error ends the lease", map[string]error{"s1": fmt.Errorf("%w: above max", allocator.ErrInvalidSize)}, allocator.ErrInvalidSize, "above max", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 2, func(c *Config) { c.Timeout = 300 * time.Millisecond })
			_, err := fx.set.Lease(ctx, "orders", 1, "s1", issue(tc.fail))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Lease: %v, want %v saying %q", err, tc.want, tc.says)
			}
			if fx.servers[0].Usable() != tc.usable {
				t.Fatalf("s1 usable %v, want %v", fx.servers[0].Usable(), tc.usable)
			}
		})
	}
	t.Run("closed", func(t *testing.T) {
		fx := newFixture(t, 1, nil)
		released := 0
		fx.set.Close(func() { released++ })
		fx.set.Close(func() { released++ })
		if _, err := fx.set.Lease(ctx, "orders", 1, "", issue(nil)); !errors.Is(err, allocator.ErrClosed) || released != 1 {
			t.Fatalf("after Close: %v, released %d times", err, released)
		}
	})
}

// TestSettings: the copy updated last wins; NotFound when every server that answered lacks the
// namespace, ErrUnavailable when none answered; a lease uses cached settings until they are stale,
// and stale ones when no server answers.
func TestSettings(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	fx.servers[1].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 20, MaxBlockSize: 100}, 2, 2}
	if r, err := fx.set.Latest(ctx, "orders"); err != nil || r.ns.BlockSize != 20 {
		t.Fatalf("Latest: %+v, %v; want the copy updated last (block size 20)", r, err)
	}
	if _, err := fx.set.Latest(ctx, "nope"); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("Latest of a missing namespace: %v", err)
	}
	if r, err := fx.set.Settings(ctx, "orders"); err != nil || r.ns.BlockSize != 20 {
		t.Fatalf("Settings: %+v, %v", r, err)
	}
	for _, s := range fx.servers {
		s.set(errors.New("timeout"), nil)
	}
	if _, err := fx.set.Latest(ctx, "orders"); !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), "s2: timeout") {
		t.Fatalf("Latest with no server answering: %v", err)
	}
	fx.clock.Advance(time.Hour) // stale, and nobody answers: the cached copy serves
	if r, err := fx.set.Settings(ctx, "orders"); err != nil || r.ns.BlockSize != 20 {
		t.Fatalf("stale Settings with servers down: %+v, %v", r, err)
	}
	if _, err := fx.set.Settings(ctx, "other"); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("uncached Settings with servers down: %v", err)
	}
}

// TestReviveToRead: with every server down, reads revive the due ones only when the Set says so.
func TestReviveToRead(t *testing.T) {
	ctx := context.Background()
	for _, revive := range []bool{false, true} {
		fx := newFixture(t, 2, func(c *Config) { c.ReviveToRead = revive })
		for _, s := range fx.servers {
			s.MarkDown(errors.New("gone"))
		}
		fx.clock.Advance(time.Hour)
		_, err := fx.set.Latest(ctx, "orders")
		if revive && (err != nil || !fx.servers[0].Usable()) {
			t.Fatalf("ReviveToRead: %v, s1 usable %v", err, fx.servers[0].Usable())
		}
		if !revive && (!errors.Is(err, allocator.ErrUnavailable) || fx.servers[0].revivals != 0) {
			t.Fatalf("without ReviveToRead: %v, %d revivals", err, fx.servers[0].revivals)
		}
	}
}

// TestKnownSettings: the newest copy of a namespace's settings this process has read is kept after
// the servers holding it are gone; a server that answers with an older copy (it missed the change)
// does not win over it, and a server that lost the namespace does not make it unknown.
func TestKnownSettings(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	newer := fakeRecord{allocator.Namespace{Name: "late", BlockSize: 20, Start: 1_000_000}, 9, 9}
	fx.servers[0].records["late"] = newer
	if r, err := fx.set.Latest(ctx, "late"); err != nil || r.updated != 9 || r.ns.BlockSize != 20 {
		t.Fatalf("Latest: %+v, %v", r, err)
	}
	// s1 goes away with the change; s2 answers with the copy it had before the change.
	fx.servers[0].MarkDown(errors.New("gone"))
	fx.servers[1].records["late"] = fakeRecord{allocator.Namespace{Name: "late", BlockSize: 10, Start: 1}, 3, 3}
	if r, err := fx.set.Latest(ctx, "late"); err != nil || r.updated != 9 || r.ns.BlockSize != 20 {
		t.Fatalf("Latest with only the older copy reachable: %+v, %v; want the newer one this process read", r, err)
	}
	delete(fx.servers[1].records, "late")
	if r, err := fx.set.Latest(ctx, "late"); err != nil || r.updated != 9 || r.ns.BlockSize != 20 {
		t.Fatalf("Latest with the namespace lost on the server that answers: %+v, %v", r, err)
	}
	if known := fx.set.Known(); len(known) != 1 || known[0].updated != 9 {
		t.Fatalf("Known = %+v", known)
	}
	if _, err := fx.set.Latest(ctx, "never"); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("Latest of a namespace nobody knows: %v", err)
	}
}

// TestNoServerUsableSaysWhy: a call that tries no server says why each was left out.
func TestNoServerUsableSaysWhy(t *testing.T) {
	fx := newFixture(t, 2, nil)
	fx.servers[0].MarkDown(errors.New("connection refused"))
	fx.servers[1].MarkDown(errors.New("fenced: restored"))
	_, err := fx.set.Latest(context.Background(), "orders")
	if !errors.Is(err, allocator.ErrUnavailable) || strings.Contains(err.Error(), "%!") ||
		!strings.Contains(err.Error(), "no ticket server was usable") || !strings.Contains(err.Error(), "s1: connection refused") ||
		!strings.Contains(err.Error(), "s2: fenced: restored") {
		t.Fatalf("Latest with no server usable: %v", err)
	}
}

// TestEveryRunsOnKick: the returned kick runs the job soon, without waiting for the interval; after
// Close it runs nothing and does not block.
func TestEveryRunsOnKick(t *testing.T) {
	fx := newFixture(t, 1, nil)
	runs := make(chan struct{}, 10)
	kick := fx.set.Every(time.Hour, func() { runs <- struct{}{} })
	kick()
	select {
	case <-runs:
	case <-time.After(10 * time.Second):
		t.Fatal("a kick did not run the job")
	}
	fx.set.Close(func() {})
	kick() // after Close: nothing runs, nothing blocks
	select {
	case <-runs:
		t.Fatal("the job ran after Close")
	default:
	}
}
