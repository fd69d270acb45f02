package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// TestSwappedOrderWhileOneIsDown: process 1 lists X,Y while Y is down; later process 2 lists Y,X while
// X is down. Each would take offset 1 on the instance it can reach and both would issue 1, 3, 5…
// Neither may serve an offset it cannot prove its own; once both instances have met, the swapped order
// is refused outright, also while X is down.
func TestSwappedOrderWhileOneIsDown(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	x, y := f.pair[0], f.pair[1]
	var blocks []allocator.Block
	leaseAll := func(s *Store) {
		t.Helper()
		if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil && !errors.Is(err, allocator.ErrExists) {
			t.Fatal(err)
		}
		for range 10 {
			b, err := s.Lease(ctx, "orders", 10)
			if err != nil {
				t.Fatal(err)
			}
			blocks = append(blocks, b)
		}
	}
	unproven := func(s *Store, err error, down string) {
		t.Helper()
		if err == nil {
			leaseAll(s)
			s.Close()
			return
		}
		if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), "cannot prove offset 1") || !strings.Contains(err.Error(), down) {
			t.Fatalf("Open: %v; want no instance usable, saying the offset cannot be proven while %s is down", err, down)
		}
	}

	if err := y.Kill(); err != nil {
		t.Fatal(err)
	}
	s1, err := Open(ctx, f.cfg) // X, Y
	unproven(s1, err, y.Addr())
	if err := x.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := y.Start(ctx); err != nil {
		t.Fatal(err)
	}
	swapped := f.cfg
	swapped.Addrs = []string{y.Addr(), x.Addr()}
	s2, err := Open(ctx, swapped) // Y, X
	unproven(s2, err, x.Addr())
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}

	// Both up: the configured order claims X=1, Y=2, and serves.
	if err := x.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s3 := openStore(t, f.cfg)
	leaseAll(s3)
	s3.Close()
	// The swapped order is refused, with both up and with X down.
	for _, down := range []bool{false, true} {
		if down {
			if err := x.Kill(); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Open(ctx, swapped)
		if err == nil {
			s.Close()
			t.Fatalf("swapped order opened (X down: %v)", down)
		}
		if !errors.Is(err, allocator.ErrMisconfigured) || !strings.Contains(err.Error(), "serves offset 2 of stride 2") {
			t.Fatalf("swapped order (X down: %v): %v", down, err)
		}
	}
	// Y alone, in the configured order, serves: its claim was proven while both were up.
	s4 := openStore(t, f.cfg)
	for range 5 {
		b, err := s4.Lease(ctx, "orders", 10)
		if err != nil || b.Server != y.Addr() || b.Start%2 != 0 {
			t.Fatalf("Y alone: %v, %v", b, err)
		}
		blocks = append(blocks, b)
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
}

// TestRestartedEmptyOrFromAnOldFile: Y restarts with its append-only files gone, and later from an old
// copy of them. Each time a process that leased from Y, and a new one, refuse it and report it fenced
// with the reason, and X serves; a repair makes Y serve above everything it issued.
func TestRestartedEmptyOrFromAnOldFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost bool
	}{{"empty", true}, {"old files", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			ctx := context.Background()
			nameX, nameY := f.Name(0), f.Name(1)
			p1 := openStore(t, f.cfg)
			if _, err := p1.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
				t.Fatal(err)
			}
			var blocks []allocator.Block
			lease := func(p *Store, n int) {
				t.Helper()
				for range n {
					b, err := p.LeaseFrom(ctx, "orders", 100, nameY)
					if err != nil {
						t.Fatal(err)
					}
					blocks = append(blocks, b)
				}
			}
			lease(p1, 5)
			old, err := f.copyAOF(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			lease(p1, 20) // Y (back from the copy) issues IDs the copy does not know of
			p0 := openStore(t, f.cfg)
			lease(p0, 5)
			p0.Close() // its water marks reach X
			highestY := allocatortest.Highest(blocks, nameY)
			from := old
			if tc.lost {
				from = ""
			}
			if err := f.restartFrom(ctx, 1, from); err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Store{p1, openStore(t, f.cfg)} {
				b, err := p.LeaseFrom(ctx, "orders", 100, nameY)
				if err != nil || b.Server != nameX {
					t.Fatalf("lease preferring Y after it went back: %v, %v; want a block from X", b, err)
				}
				blocks = append(blocks, b)
				h := allocatortest.FencedHealth(t, p, nameY)
				if tc.lost && !strings.Contains(h.Error, "lost its data") {
					t.Fatalf("Y lost its data but health says %q", h.Error)
				}
			}
			res, err := p1.Repair(ctx, "orders", nameY, allocator.RepairOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Fenced || res.After <= highestY {
				t.Fatalf("repair %+v; Y had issued up to %d", res, highestY)
			}
			b := allocatortest.LeaseUntil(t, nameY, func() (allocator.Block, error) { return p1.LeaseFrom(ctx, "orders", 100, nameY) })
			if last := b[len(b)-1]; last.Start <= highestY || last.Start%2 != 0 {
				t.Fatalf("after the repair Y leased %v; want even IDs above %d", last, highestY)
			}
			blocks = append(blocks, b...)
			if err := allocatortest.CheckDisjoint(blocks); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGuardReportsAWipedInstanceAsLost: Y's keys are wiped while a process that leased from Y runs, and
// the guard, not a lease, is the first to look. Its counters and its identity are gone together, so
// the fence says Y lost its data, not that one namespace went missing.
func TestGuardReportsAWipedInstanceAsLost(t *testing.T) {
	f := newFleet(t)
	f.cfg.WatermarkInterval = time.Hour // only the direct call below runs the guard
	s := openStore(t, f.cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameY := f.Name(1)
	for range 3 {
		if _, err := s.LeaseFrom(ctx, "orders", 100, nameY); err != nil {
			t.Fatal(err)
		}
	}
	if err := rawClient(t, nameY).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.guard()
	h := allocatortest.FencedHealth(t, s, nameY)
	if !strings.Contains(h.Error, "lost its data") {
		t.Fatalf("Y was wiped but health says %q", h.Error)
	}
}

// TestPersistenceSwitchedOffWhileServing: appendfsync set to everysec on Y while it serves takes Y out
// of rotation within a water-mark interval, with the reason; set back, Y serves again.
func TestPersistenceSwitchedOffWhileServing(t *testing.T) {
	f := newFleet(t)
	f.cfg.WatermarkInterval = 50 * time.Millisecond
	s := openStore(t, f.cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	nameX, nameY := f.Name(0), f.Name(1)
	raw := rawClient(t, nameY)
	if err := raw.ConfigSet(ctx, "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := s.Health()[1]
		if !h.Healthy && strings.Contains(h.Error, `appendfsync is "everysec"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Y still %+v", h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 5 {
		if b, err := s.LeaseFrom(ctx, "orders", 10, nameY); err != nil || b.Server != nameX {
			t.Fatalf("lease preferring Y while it can lose writes: %v, %v", b, err)
		}
	}
	if err := raw.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	allocatortest.LeaseUntil(t, nameY, func() (allocator.Block, error) { return s.LeaseFrom(ctx, "orders", 10, nameY) })
}

// TestSettingsChangeOnAnInstanceThatWentBack: an instance's counter goes back (as after a restore the
// guard has not met yet) and the namespace's start is then advanced to inside the range it had issued.
// The change carries the same proof as a lease: the instance is fenced for it and its counter left
// where the restore put it, not raised to the start over IDs it issued; the other instance takes the
// change.
func TestSettingsChangeOnAnInstanceThatWentBack(t *testing.T) {
	f := newFleet(t)
	cfg := f.cfg
	cfg.WatermarkInterval = time.Hour // no background check
	s := openStore(t, cfg)
	ctx := context.Background()
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	a := s.set.All()[0]
	var highest int64
	for range 6 {
		blk, err := s.LeaseFrom(ctx, "orders", 0, a.Name())
		if err != nil || blk.Server != a.Name() {
			t.Fatalf("lease from %s: %v, %v", a.Name(), blk, err)
		}
		highest, _ = blk.Last()
	}
	// Back by 40 IDs, as a restore would take it; then a start 20 IDs below the highest issued.
	raw := rawClient(t, a.Name())
	key := s.keys.counter("orders")
	if err := raw.DecrBy(ctx, key, 80).Err(); err != nil {
		t.Fatal(err)
	}
	back, err := raw.Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, Start: highest - 40}); err != nil {
		t.Fatalf("the change, taken by the other instance: %v", err)
	}
	var h allocator.ServerHealth
	for _, x := range s.Health() {
		if x.Name == a.Name() {
			h = x
		}
	}
	if !h.Fenced || !strings.Contains(h.Error, "is below") {
		t.Fatalf("%s after the change: %+v; want it fenced", a.Name(), h)
	}
	if got, err := raw.Get(ctx, key).Int64(); err != nil || got != back {
		t.Fatalf("%s's counter moved from %d to %d (%v): the change raised an instance that went back", a.Name(), back, got, err)
	}
}
