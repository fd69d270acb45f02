package allocatortest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Fleet is a backend's ticket servers under a test's control, handled as an operator handles them,
// and a way to open backends on them as separate ticketd processes would. Server i is the i-th in
// configuration order; the suite uses two.
type Fleet interface {
	// Open opens a backend on the servers, as a new ticketd process would. The suite closes it.
	Open(t *testing.T) allocator.Backend
	// Name is server i's name, as blocks and health name it.
	Name(i int) string
	// Stop stops server i; Start starts it again on the data it has.
	Stop(i int) error
	Start(ctx context.Context, i int) error
	// Backup copies server i's ticketd data as a logical dump would; the returned restore loads the
	// copy back into the running server, without restarting it, so that connections stay open.
	Backup(ctx context.Context, i int) (restore func(context.Context) error, err error)
	// Wipe deletes server i's ticketd data while it runs, as a server rebuilt empty would come back
	// (with the schema applied again, where the backend has one).
	Wipe(ctx context.Context, i int) error
	// ColdCopy stops server i, copies its data files and starts it again; the returned putBack puts
	// the copy in place of the files of server i, which must be stopped: a physical backup restored.
	ColdCopy(ctx context.Context, i int) (putBack func() error, err error)
	// Process opens a backend as Open does, tuned by o, with what a test can do to that process. The
	// suite closes it.
	Process(t *testing.T, o ProcessOptions) *Process
	// Replicate starts an asynchronous replica of server i that holds everything server i holds.
	Replicate(ctx context.Context, i int) (Replica, error)
}

// preferring is a backend that can be asked to lease from one server first.
type preferring interface {
	LeaseFrom(ctx context.Context, namespace string, size int64, prefer string) (allocator.Block, error)
}

// RunOperatorFaults runs the suite of operator and fleet actions that would make a ticket server issue
// an ID twice, or above max_id, if it went unnoticed: a dump reloaded into a live server, a server that
// lost its data, a namespace's start advanced while a server was down (also while the server holding
// the change is down when the other returns), a server restored from a copy taken before a start
// advance, a ceiling raised while a server was down; a ceiling lowered while a server leases past it,
// or while the way to a server breaks; a whole fleet of processes crashing before a server loses its
// data; and a lagging replica promoted in a server's place. Each case gets a fresh fleet from
// newFleet. The backend must implement LeaseFrom, allocator.HealthReporter and allocator.Repairer.
func RunOperatorFaults(t *testing.T, newFleet func(t *testing.T) Fleet) {
	t.Run("DumpReloadedIntoLiveServer", func(t *testing.T) {
		runRollback(t, newFleet(t), func(ctx context.Context, f Fleet, restore func(context.Context) error) error {
			return restore(ctx)
		})
	})
	t.Run("ServerLostItsData", func(t *testing.T) {
		runRollback(t, newFleet(t), func(ctx context.Context, f Fleet, _ func(context.Context) error) error {
			return f.Wipe(ctx, 1)
		})
	})
	t.Run("StartAdvancedWhileServerDown", func(t *testing.T) {
		runStartAdvanced(t, newFleet(t), false)
	})
	t.Run("StartAdvancedWhileServerDownAndHolderDownAtReturn", func(t *testing.T) {
		runStartAdvanced(t, newFleet(t), true)
	})
	t.Run("RestoredFromACopyOlderThanAStartAdvance", func(t *testing.T) {
		runRestoredAcrossStartAdvance(t, newFleet(t))
	})
	t.Run("CeilingRaisedWhileServerDown", func(t *testing.T) {
		runCeilingRaised(t, newFleet(t), false)
	})
	t.Run("CeilingRaisedWhileServerDownAndHolderDownAtReturn", func(t *testing.T) {
		runCeilingRaised(t, newFleet(t), true)
	})
	t.Run("ForcedRepairStopsAtMaxID", func(t *testing.T) {
		runForcedRepairAtCeiling(t, newFleet(t))
	})
	fleetCases(t, newFleet)
}

// runForcedRepairAtCeiling: a forced repair of B with the default margin (ten blocks of max_block_size
// at least, far past a small max_id) moves B's counter just past the ceiling, not beyond it, and says
// that B has nothing left to issue safely; A issues the rest, every ID once, and the end names the
// namespace's max_id.
func runForcedRepairAtCeiling(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p1 := r.open(f)
	const ceiling = 1000
	if _, err := p1.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxID: ceiling}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, a, 2)
	r.leaseFrom(p1, b, 2)
	res, err := p1.(allocator.Repairer).Repair(r.ctx, "orders", b, allocator.RepairOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.After <= ceiling || res.After > ceiling+2 {
		t.Fatalf("a forced repair moved %s's counter from %d to %d (margin %d: %s); want it just past max_id %d",
			b, res.Before, res.After, res.Margin, res.MarginWhy, ceiling)
	}
	if !strings.Contains(res.MarginWhy, "nothing left to issue safely") || !strings.Contains(res.MarginWhy, "max_id 1000") {
		t.Fatalf("the repair's margin says %q; want it to say that %s has nothing left below max_id %d", res.MarginWhy, b, ceiling)
	}
	more, err := leaseToEnd(r.ctx, p1, "orders", 10)
	r.blocks = append(r.blocks, more...)
	if !errors.Is(err, allocator.ErrExhausted) || !strings.Contains(err.Error(), "max_id 1000") || strings.Contains(err.Error(), "9223372036854775807") {
		t.Fatalf("leasing to the end: %v; want ErrExhausted naming max_id %d", err, ceiling)
	}
	r.disjoint()
	for _, blk := range r.blocks {
		if last, _ := blk.Last(); last > ceiling {
			t.Fatalf("block %v passes max_id %d", blk, ceiling)
		}
	}
}

// runCeilingRaised: with server B down, a lower max_id is refused (what B issued is unknown), and so is
// a higher one, naming B (B's copy could hold a higher ceiling still, left there by a lowering that
// stayed on A alone); once B is back the raise is taken. B then leases past the old ceiling (with
// holderDown while A is down, so that only what B and the process know of the change binds it). Leased
// to the end through two processes, every ID up to the new ceiling is issued once and none above it.
func runCeilingRaised(t *testing.T, f Fleet, holderDown bool) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p1 := r.open(f)
	const low, high = 1000, 5000
	if _, err := p1.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxID: low}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, a, 3)
	r.leaseFrom(p1, b, 3)
	if err := f.Stop(1); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxID: low / 2}); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("a lower max_id with %s down: %v, want ErrUnavailable", b, err)
	}
	if _, err := p1.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxID: high}); !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), b+" did not") {
		t.Fatalf("a higher max_id with %s down: %v, want ErrUnavailable naming %s", b, err, b)
	}
	if err := f.Start(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	r.untilFrom(p1, b) // B back in the process's rotation
	if _, err := p1.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxID: high}); err != nil {
		t.Fatal(err)
	}
	r.untilFrom(p1, a) // the process reads the new settings
	if holderDown {
		if err := f.Stop(0); err != nil {
			t.Fatal(err)
		}
	}
	// B leases past the old ceiling, in the process that made the change.
	for {
		blk := r.untilFrom(p1, b)
		if last, _ := blk.Last(); last > low {
			break
		}
	}
	if holderDown {
		if err := f.Start(r.ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	p2 := r.open(f)
	for i, p := range []allocator.Backend{p2, p1} {
		more, err := leaseToEnd(r.ctx, p, "orders", 10)
		r.blocks = append(r.blocks, more...)
		if !errors.Is(err, allocator.ErrExhausted) {
			t.Fatalf("process %d leasing to the ceiling: %v, want ErrExhausted", i+1, err)
		}
	}
	checkBelow(t, r.blocks, 1, high)
}

// operatorRun is one case's backends and every block they leased.
type operatorRun struct {
	t      *testing.T
	ctx    context.Context
	blocks []allocator.Block
}

func (r *operatorRun) open(f Fleet) allocator.Backend {
	r.t.Helper()
	b := f.Open(r.t)
	r.t.Cleanup(func() { _ = b.Close() })
	if _, ok := b.(preferring); !ok {
		r.t.Fatalf("%T has no LeaseFrom", b)
	}
	return b
}

// leaseFrom leases n blocks preferring server and keeps them; it fails the test on an error.
func (r *operatorRun) leaseFrom(b allocator.Backend, server string, n int) []allocator.Block {
	r.t.Helper()
	var got []allocator.Block
	for range n {
		blk, err := b.(preferring).LeaseFrom(r.ctx, "orders", 0, server)
		if err != nil {
			r.t.Fatalf("lease preferring %s: %v", server, err)
		}
		got = append(got, blk)
	}
	r.blocks = append(r.blocks, got...)
	return got
}

// untilFrom leases preferring server until a block comes from it, and returns that block.
func (r *operatorRun) untilFrom(b allocator.Backend, server string) allocator.Block {
	r.t.Helper()
	got := LeaseUntil(r.t, server, func() (allocator.Block, error) {
		return b.(preferring).LeaseFrom(r.ctx, "orders", 0, server)
	})
	r.blocks = append(r.blocks, got...)
	return got[len(got)-1]
}

func (r *operatorRun) disjoint() {
	r.t.Helper()
	if err := CheckDisjoint(r.blocks); err != nil {
		r.t.Fatal(err)
	}
}

// FencedHealth waits until b reports server fenced, with a reason that names the repair, and returns
// its health; it fails t when that has not happened within 20 seconds. (A server may first be out of
// rotation for another reason — a check that met the restore half done, say — until it is checked
// again.)
func FencedHealth(t testing.TB, b allocator.Backend, server string) allocator.ServerHealth {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var last allocator.ServerHealth
		for _, h := range b.(allocator.HealthReporter).Health() {
			if h.Name == server {
				last = h
			}
		}
		if last.Fenced && !last.Healthy && strings.Contains(last.Error, "ticketd repair") {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: health %+v, want fenced with a reason that names `ticketd repair`", server, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runRollback takes server B back in time with rollback while three processes know of it: p1 leased
// from B after the backup, p2 never leased from B but read a peer's water mark for it, p3 starts after
// the rollback. None may take a block from B; each must report B fenced; a repair then makes B serve
// above everything it issued.
func runRollback(t *testing.T, f Fleet, rollback func(context.Context, Fleet, func(context.Context) error) error) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p1 := r.open(f)
	if _, err := p1.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, b, 5)
	r.leaseFrom(p1, a, 5)
	restore, err := f.Backup(r.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, b, 20) // B issues IDs the backup does not know of
	// Another process leases from B and stops: its water marks reach the peers when it closes.
	p0 := r.open(f)
	highestP0 := Highest(r.leaseFrom(p0, b, 5), b)
	if err := p0.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := r.open(f) // reads A's mark for B while checking B
	r.leaseFrom(p2, a, 2)
	highestB := Highest(r.blocks, b)

	if err := rollback(r.ctx, f, restore); err != nil {
		t.Fatal(err)
	}
	for i, p := range []allocator.Backend{p1, p2} {
		blk, err := p.(preferring).LeaseFrom(r.ctx, "orders", 0, b)
		if err == nil {
			r.blocks = append(r.blocks, blk)
			if blk.Server == b {
				t.Fatalf("process %d leased %v from %s after it went back in time (it had issued up to %d)", i+1, blk, b, highestB)
			}
		}
		FencedHealth(t, p, b)
	}
	p3 := r.open(f)
	FencedHealth(t, p3, b)
	if blk, err := p3.(preferring).LeaseFrom(r.ctx, "orders", 0, b); err != nil || blk.Server != a {
		t.Fatalf("a process started after the rollback: %v, %v; want a block from %s", blk, err, a)
	} else {
		r.blocks = append(r.blocks, blk)
	}
	r.disjoint()

	// The repair: B serves again, above every ID it issued.
	res, err := p3.(allocator.Repairer).Repair(r.ctx, "orders", b, allocator.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fenced || res.After <= highestB || res.Watermark <= highestP0 || res.MarginWhy == "" {
		t.Fatalf("repair %+v; %s had issued up to %d", res, b, highestB)
	}
	for _, p := range []allocator.Backend{p3, p1, p2} {
		if blk := r.untilFrom(p, b); blk.Start <= highestB {
			t.Fatalf("after the repair %s leased %v, not above %d", b, blk, highestB)
		}
	}
	r.disjoint()
}

// runStartAdvanced stops B, advances the namespace's start (A applies it) and brings B back: B's next
// block starts at or above the new start, in this process and in a new one. With holderDown, A stops
// before B returns, so only the process's own knowledge of the change can raise B.
func runStartAdvanced(t *testing.T, f Fleet, holderDown bool) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p1 := r.open(f)
	if _, err := p1.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, a, 3)
	r.leaseFrom(p1, b, 3)
	if err := f.Stop(1); err != nil {
		t.Fatal(err)
	}
	const start = 1_000_000_000
	up, err := p1.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 20, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	if up.Start != start {
		t.Fatalf("update returned start %d, want %d", up.Start, start)
	}
	if blk := r.untilFrom(p1, a); blk.Start < start {
		t.Fatalf("%s leased %v after the start was advanced to %d", a, blk, start)
	}
	if holderDown {
		if err := f.Stop(0); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Start(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	check := func(who string, blk allocator.Block) {
		t.Helper()
		if blk.Start < start || blk.Size != 20 {
			t.Fatalf("%s: %s came back and leased %v; want blocks of 20 from %d on", who, b, blk, start)
		}
	}
	check("the process that made the change", r.untilFrom(p1, b))
	if holderDown {
		if err := f.Start(r.ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	p2 := r.open(f)
	check("a new process", r.untilFrom(p2, b))
	ns, err := p2.Namespace(r.ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if ns.Start != start || ns.BlockSize != 20 {
		t.Fatalf("settings after the servers met again: %+v", ns)
	}
	for _, st := range ns.Servers {
		if st.Healthy && st.Next < start {
			t.Fatalf("%s's counter %d is below the start %d", st.Server, st.Next, start)
		}
	}
	r.disjoint()
}

// runRestoredAcrossStartAdvance: server A is restored from a physical copy taken before the namespace's
// start was advanced, after A issued IDs from the new start; B, which would hold A's water marks, is
// down from before the change to the end, so only the processes know how far A went. p2 leased from A
// after the copy and read the new settings, but took nothing from A since the change. When A comes
// back, p2 checks it again: A's counter is below what p2 saw there, so p2 must fence A — not first
// bring A's counter up to the new start, which would hide the restore and issue again the IDs A issued
// from there. p1 fences it too; a repair then makes A serve above everything it issued.
func runRestoredAcrossStartAdvance(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p1 := r.open(f)
	if _, err := p1.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, a, 2)
	r.leaseFrom(p1, b, 2)
	putBack, err := f.ColdCopy(r.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	p2 := r.open(f)
	r.untilFrom(p2, a) // p2's view of A is now above the copy
	r.untilFrom(p1, a)
	if err := f.Stop(1); err != nil {
		t.Fatal(err)
	}
	const start = 1_000_000_000
	if _, err := p1.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 10, Start: start}); err != nil {
		t.Fatal(err)
	}
	if ns, err := p2.Namespace(r.ctx, "orders"); err != nil || ns.Start != start {
		t.Fatalf("p2 reading the settings: %+v, %v; want start %d", ns, err, start)
	}
	for range 3 {
		if blk := r.untilFrom(p1, a); blk.Start < start {
			t.Fatalf("%s leased %v after the start was advanced to %d", a, blk, start)
		}
	}
	highestA := Highest(r.blocks, a)

	if err := f.Stop(0); err != nil {
		t.Fatal(err)
	}
	// Nothing answers now: both processes take A out of rotation at their next lease.
	for i, p := range []allocator.Backend{p1, p2} {
		if blk, err := p.(preferring).LeaseFrom(r.ctx, "orders", 0, a); err == nil {
			t.Fatalf("process %d leased %v with both servers stopped", i+1, blk)
		}
	}
	if err := putBack(); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(r.ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i, p := range []allocator.Backend{p2, p1} {
		deadline := time.Now().Add(20 * time.Second)
		for fenced := false; !fenced; {
			blk, err := p.(preferring).LeaseFrom(r.ctx, "orders", 0, a)
			if err == nil {
				r.blocks = append(r.blocks, blk)
				t.Fatalf("process %d leased %v from %s, restored from a copy older than the IDs it issued up to %d", 2-i, blk, a, highestA)
			}
			for _, h := range p.(allocator.HealthReporter).Health() {
				fenced = fenced || h.Name == a && h.Fenced
			}
			if !fenced && time.Now().After(deadline) {
				t.Fatalf("process %d: %s not fenced after its restore; last lease: %v", 2-i, a, err)
			}
			if !fenced {
				time.Sleep(20 * time.Millisecond)
			}
		}
		FencedHealth(t, p, a)
	}
	r.disjoint()

	res, err := p1.(allocator.Repairer).Repair(r.ctx, "orders", a, allocator.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fenced || res.After <= highestA {
		t.Fatalf("repair %+v; %s had issued up to %d", res, a, highestA)
	}
	for _, p := range []allocator.Backend{p1, p2} {
		if blk := r.untilFrom(p, a); blk.Start <= highestA {
			t.Fatalf("after the repair %s leased %v, not above %d", a, blk, highestA)
		}
	}
	r.disjoint()
}
