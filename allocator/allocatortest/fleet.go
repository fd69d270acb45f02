package allocatortest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// ProcessOptions tune a process a test opens on a fleet. The zero value is a process as Fleet.Open
// opens it.
type ProcessOptions struct {
	// Proxied reaches each server through a proxy of the process's own, so that Process.Cut can break
	// the way from this process to one server while other processes still reach it.
	Proxied bool
	// BeforeChange runs before each server takes a namespace change this process makes: after the
	// change's checks, before its write there.
	BeforeChange func(server string)
	// MarksWriting runs as each background write of the process's water marks begins.
	MarksWriting func()
	// WatermarkInterval, SettingsTTL and ProbeInterval replace the fleet's when not zero.
	WatermarkInterval, SettingsTTL, ProbeInterval time.Duration
}

// Process is a backend opened as one ticketd process, and what a test can do to that process.
type Process struct {
	allocator.Backend
	cut   func(i int)
	crash func()
}

// NewProcess is a fleet's process: b, with cut breaking its way to server i (nil when it has no
// proxies) and crash stopping it as a kill would.
func NewProcess(b allocator.Backend, cut func(i int), crash func()) *Process {
	return &Process{Backend: b, cut: cut, crash: crash}
}

// LeaseFrom leases preferring a server, as the backend's LeaseFrom does.
func (p *Process) LeaseFrom(ctx context.Context, namespace string, size int64, prefer string) (allocator.Block, error) {
	return p.Backend.(preferring).LeaseFrom(ctx, namespace, size, prefer)
}

// Health is the backend's health of each server.
func (p *Process) Health() []allocator.ServerHealth {
	return p.Backend.(allocator.HealthReporter).Health()
}

// Repair is the backend's repair.
func (p *Process) Repair(ctx context.Context, namespace, server string, opts allocator.RepairOptions) (allocator.RepairResult, error) {
	return p.Backend.(allocator.Repairer).Repair(ctx, namespace, server, opts)
}

// Cut breaks the process's way to server i: its connections there fail, and so do new ones. The
// process must have been opened Proxied.
func (p *Process) Cut(t testing.TB, i int) {
	t.Helper()
	if p.cut == nil {
		t.Fatal("Cut on a process opened without proxies")
	}
	p.cut(i)
}

// Crash stops the process as a kill does: its background work ends and it writes nothing more, not
// even the water marks a Close writes.
func (p *Process) Crash() { p.crash() }

// Replica is an asynchronous replica of one server of a fleet.
type Replica interface {
	// Freeze waits until the replica holds everything its server wrote, then stops it receiving
	// more: from here on it lags behind its server.
	Freeze(ctx context.Context) error
	// Promote kills the server and puts the replica in its place, at its address, as a failover
	// tool (or a virtual IP moved) does.
	Promote(ctx context.Context) error
}

// fleetCases are the cases of RunOperatorFaults that a fleet of processes, rather than one, breaks.
func fleetCases(t *testing.T, newFleet func(t *testing.T) Fleet) {
	t.Run("CeilingLoweredWhileAServerLeasesPastIt", func(t *testing.T) {
		runCeilingLoweredUnderALease(t, newFleet(t))
	})
	t.Run("CeilingLoweredWithAServerCutOff", func(t *testing.T) {
		runCeilingCutOffBefore(t, newFleet(t))
	})
	t.Run("CeilingLoweredWhileTheWayToAServerBreaks", func(t *testing.T) {
		runCeilingCutOff(t, newFleet(t), false)
	})
	t.Run("CeilingLeftOnOneServer", func(t *testing.T) {
		runCeilingCutOff(t, newFleet(t), true)
	})
	t.Run("StartAdvancedWhileTheWayToAServerBreaks", func(t *testing.T) {
		runStartCutOff(t, newFleet(t))
	})
	t.Run("RepairAfterAFleetCrash", func(t *testing.T) {
		runFleetCrash(t, newFleet(t))
	})
	t.Run("ReplicaPromotedInAServersPlace", func(t *testing.T) {
		runReplicaPromoted(t, newFleet(t))
	})
	t.Run("StartAdvancedThenAServerLostItsData", func(t *testing.T) {
		runStartAdvancedThenLost(t, newFleet(t))
	})
	t.Run("RestoredFromACopyOlderThanALowering", func(t *testing.T) {
		runRestoredAcrossLowering(t, newFleet(t))
	})
	t.Run("StartAdvancedOnAFencedServerWhileTheOtherIsDown", func(t *testing.T) {
		runStartOnFenced(t, newFleet(t))
	})
	t.Run("PeerRestoredThenTheServerLostItsData", func(t *testing.T) {
		runPeerRestoredThenLost(t, newFleet(t))
	})
	t.Run("ChangeBetweenALeftLoweringAndTheOldCeiling", func(t *testing.T) {
		runChangeBetweenCeilings(t, newFleet(t))
	})
	t.Run("ChangeWhileTheServerWithTheOldCeilingIsDown", func(t *testing.T) {
		runChangeWhileOldCeilingDown(t, newFleet(t))
	})
}

// runChangeWhileOldCeilingDown: a lowering to N fails half-way and stays on A; B keeps the old ceiling.
// B stops, and a change to a max_id above N (but below B's) is asked of A alone: it could be taken for
// a raise of A's N, yet it lowers B's, which cannot take it. It must be refused, naming B, and change
// nothing: before, it returned success, and a process that could read only B once it was back leased
// above the max_id the change had set.
func runChangeWhileOldCeilingDown(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	r.serving(f, ProcessOptions{})
	n := max(Highest(r.blocks, a), Highest(r.blocks, b)) + 2000
	r.leaveLowering(f, n)
	if err := f.Stop(1); err != nil {
		t.Fatal(err)
	}
	between := n + 500
	p := r.open(f)
	_, err := p.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: between})
	if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), b+" did not") {
		t.Fatalf("max_id %d with %s (which holds the old ceiling) down: %v; want ErrUnavailable naming %s", between, b, err, b)
	}
	t.Logf("refused as it should be: %v", err)
	if err := f.Start(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := maxIDOf(t, r.open(f), "orders"); got == between {
		t.Fatalf("a new process reads max_id %d after the change was refused", got)
	}
	r.disjoint()
}

// leaveLowering lowers max_id of orders to n with an admin whose way to both servers is cut between
// its writes on A and B: A keeps n (the undo is cut off too), B the old ceiling.
func (r *operatorRun) leaveLowering(f Fleet, n int64) {
	t := r.t
	a, b := f.Name(0), f.Name(1)
	var admin *Process
	admin = f.Process(t, ProcessOptions{Proxied: true, ProbeInterval: time.Hour, WatermarkInterval: time.Hour, BeforeChange: func(server string) {
		if server == b {
			admin.Cut(t, 1)
			admin.Cut(t, 0)
		}
	}})
	if _, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: n}); !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), a+" still hold") {
		t.Fatalf("lowering max_id to %d with the way to both servers cut half-way: %v; want ErrUnavailable saying %s still holds it", n, err, a)
	}
	admin.Crash()
}

// runChangeBetweenCeilings: a lowering to N fails half-way and stays on A (its undo cut off too); B
// keeps the old ceiling, and a process that read the settings before and is cut off from A leases
// there above N. A change to a max_id between N and what B issued is a lowering of B's ceiling: it
// must be refused, naming what B issued, and change nothing; before, it was taken for a raise above A's
// N and returned success while B kept its old ceiling.
func runChangeBetweenCeilings(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	serving := r.serving(f, ProcessOptions{Proxied: true, SettingsTTL: time.Hour})
	n := max(Highest(r.blocks, a), Highest(r.blocks, b)) + 2000
	r.leaveLowering(f, n)
	serving.Cut(t, 0) // it cannot read A's N, nor bring B's row up to it
	for Highest(r.blocks, b) <= n+1000 {
		r.leaseFrom(serving, b, 1)
	}
	issued := Highest(r.blocks, b)
	between := n + 500
	p := r.open(f)
	_, err := p.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: between})
	if !errors.Is(err, allocator.ErrInvalidSettings) {
		t.Fatalf("max_id %d, between %s's %d and what %s issued (%d): %v; want ErrInvalidSettings", between, a, n, b, issued, err)
	}
	t.Logf("refused as it should be: %v", err)
	if got := maxIDOf(t, r.open(f), "orders"); got == between {
		t.Fatalf("a new process reads max_id %d after the change was refused", got)
	}
	r.disjoint()
}

// runPeerRestoredThenLost: A is copied; p leases from B for a few seconds, its marks of B reaching A;
// A is put back from the copy, and the marks of B it kept go back with it. p fences A, and must write
// its marks of B there again (A keeps marks while fenced). Then p crashes and B loses its data: the
// repair of B, sized from A's marks, must move B past every ID it issued.
func runPeerRestoredThenLost(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	const interval = 300 * time.Millisecond
	p := f.Process(t, ProcessOptions{WatermarkInterval: interval})
	t.Cleanup(func() { _ = p.Close() })
	if _, err := p.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxBlockSize: 100}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p, a, 2)
	r.leaseFrom(p, b, 2)
	putBack, err := f.ColdCopy(r.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.untilFrom(p, a)
	r.leaseFrom(p, a, 2) // A's copy is behind what p saw there: p will fence A
	for range 100 {      // a steady pace: the margin covers a few intervals of it, not all of it
		r.leaseFrom(p, b, 1)
		time.Sleep(30 * time.Millisecond)
	}
	highestB := Highest(r.blocks, b)
	if err := f.Stop(0); err != nil {
		t.Fatal(err)
	}
	if err := putBack(); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(r.ctx, 0); err != nil {
		t.Fatal(err)
	}
	FencedHealth(t, p, a)
	time.Sleep(10 * interval) // p writes its marks of B to A again
	p.Crash()
	if err := f.Wipe(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	p2 := f.Process(t, ProcessOptions{WatermarkInterval: interval})
	t.Cleanup(func() { _ = p2.Close() })
	r.repairPast(p2, b, highestB, "the marks "+a+" kept of it went back with its restore, and were not written there again")
}

// runStartOnFenced: B is put back from a dump under p, which fences it and leaves it fenced (no
// repair). A goes down; an admin process, which cannot read A's marks of B, advances the start on B
// alone. A comes back. p, whose settings expire quickly, must lease nothing from A below the new start:
// the change is on B alone, and B, fenced, still holds what it was told since.
func runStartOnFenced(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p := r.serving(f, ProcessOptions{SettingsTTL: 200 * time.Millisecond})
	restore, err := f.Backup(r.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p, b, 3)
	if err := restore(r.ctx); err != nil {
		t.Fatal(err)
	}
	r.untilFrom(p, a) // p leases on from A, and finds B went back
	FencedHealth(t, p, b)
	if err := f.Stop(0); err != nil {
		t.Fatal(err)
	}
	const start = 1_000_000_000
	admin := f.Process(t, ProcessOptions{})
	if _, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, Start: start}); err != nil {
		t.Fatal(err)
	}
	admin.Crash()
	if err := f.Start(r.ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // p's settings are older than their TTL
	blk := r.untilFrom(p, a)
	if blk.Start < start {
		t.Fatalf("%s leased %v after the start was advanced to %d on %s, fenced in the process, while %s was down", a, blk, start, b, a)
	}
	r.disjoint()
}

// runRestoredAcrossLowering: B is copied; it issues more; max_id is lowered (every server takes it);
// B is put back from the copy, which holds the old ceiling. The repair moves B's counter past the marks
// by its margin, past the new ceiling: B has nothing left to issue. p2, which read the settings before
// the lowering and keeps them for an hour, must still lease nothing above the ceiling, from B or A.
func runRestoredAcrossLowering(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	b := f.Name(1)
	p1 := r.serving(f, ProcessOptions{})
	p2 := f.Process(t, ProcessOptions{SettingsTTL: time.Hour})
	t.Cleanup(func() { _ = p2.Close() })
	r.leaseFrom(p2, b, 1)
	putBack, err := f.ColdCopy(r.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	r.untilFrom(p1, b)
	r.leaseFrom(p1, b, 3)
	ceiling := Highest(r.blocks, f.Name(0))
	ceiling = max(ceiling, Highest(r.blocks, b)) + 3000
	if _, err := p1.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: ceiling}); err != nil {
		t.Fatal(err)
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Stop(1); err != nil {
		t.Fatal(err)
	}
	if err := putBack(); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	p3 := f.Process(t, ProcessOptions{})
	t.Cleanup(func() { _ = p3.Close() })
	FencedHealth(t, p3, b)
	res, err := p3.Repair(r.ctx, "orders", b, allocator.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("repair: %d -> %d (mark %d, margin %d: %s)", res.Before, res.After, res.Watermark, res.Margin, res.MarginWhy)
	for i := 0; ; i++ {
		blk, err := p2.Lease(r.ctx, "orders", 0)
		if errors.Is(err, allocator.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatalf("leasing to the ceiling: %v, want ErrExhausted", err)
		}
		r.blocks = append(r.blocks, blk)
		if last, _ := blk.Last(); last > ceiling {
			t.Fatalf("a process that read the settings before max_id was lowered to %d leased %v after %s came back from an older copy and was repaired", ceiling, blk, blk.Server)
		}
		if i > 100 { // at most 3000 IDs are left below the ceiling, in blocks of 100
			t.Fatalf("%d leases below max_id %d and no end", i, ceiling)
		}
	}
	r.disjoint()
}

// runStartAdvancedThenLost: an admin process advances the namespace's start far above the water marks
// and exits before it writes a mark; a process leases from A from the new start and crashes before its
// first mark; then A loses its data. The marks the peers hold for A are from before the advance, so a
// repair that adds its margin to them alone puts A's counter back at the start, and A issues again the
// IDs it issued from there. The repair must count from the start at least.
func runStartAdvancedThenLost(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a := f.Name(0)
	p1 := r.serving(f, ProcessOptions{})
	if err := p1.Close(); err != nil { // its last marks: B holds A's counter from before the advance
		t.Fatal(err)
	}
	const start = 1_000_000_000
	admin := f.Process(t, ProcessOptions{WatermarkInterval: time.Hour})
	if _, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, Start: start}); err != nil {
		t.Fatal(err)
	}
	admin.Crash()
	p2 := f.Process(t, ProcessOptions{WatermarkInterval: time.Hour})
	for _, blk := range r.leaseFrom(p2, a, 3) {
		if blk.Server != a || blk.Start < start {
			t.Fatalf("after the start was advanced to %d, a lease preferring %s returned %v", start, a, blk)
		}
	}
	p2.Crash()
	highestA := Highest(r.blocks, a)
	if err := f.Wipe(r.ctx, 0); err != nil {
		t.Fatal(err)
	}
	p3 := f.Process(t, ProcessOptions{})
	t.Cleanup(func() { _ = p3.Close() })
	r.repairPast(p3, a, highestA, fmt.Sprintf("it issued them from the start %d, above the marks", start))
}

// repairPast waits until p fences server, repairs it with the default margin, and fails the test
// unless the repair moved its counter past highest, the highest ID it issued before it went back (why
// says how those IDs came to be unmarked), and its next block starts above that; then it checks that no
// ID was issued twice.
func (r *operatorRun) repairPast(p *Process, server string, highest int64, why string) {
	r.t.Helper()
	FencedHealth(r.t, p, server)
	res, err := p.Repair(r.ctx, "orders", server, allocator.RepairOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("repair: mark %d, margin %d (%s), counter now %d; %s issued up to %d", res.Watermark, res.Margin, res.MarginWhy, res.After, server, highest)
	if res.After <= highest {
		r.t.Fatalf("the repair moved %s to %d, but it had issued up to %d (%s): they would be issued again (mark %d, margin %d: %s)",
			server, res.After, highest, why, res.Watermark, res.Margin, res.MarginWhy)
	}
	if blk := r.untilFrom(p, server); blk.Start <= highest {
		r.t.Fatalf("after the repair %s leased %v, not above %d", server, blk, highest)
	}
	r.disjoint()
}

// serving opens a process tuned by o, creates namespace "orders" (blocks of 100) through it and leases
// two blocks from each server, kept with the run's blocks.
func (r *operatorRun) serving(f Fleet, o ProcessOptions) *Process {
	p := f.Process(r.t, o)
	r.t.Cleanup(func() { _ = p.Close() })
	if _, err := p.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100}); err != nil {
		r.t.Fatal(err)
	}
	r.leaseFrom(p, f.Name(0), 2)
	r.leaseFrom(p, f.Name(1), 2)
	return p
}

// maxIDOf reads the namespace's max_id as a process sees it.
func maxIDOf(t testing.TB, b allocator.Backend, name string) int64 {
	t.Helper()
	ns, err := b.Namespace(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ns.MaxID
}

// runCeilingLoweredUnderALease: an admin process lowers max_id to N. After its checks (every counter
// below N) and before its write on B, a serving process leases from B past N. B's statement refuses
// the ceiling; the update must fail, say that B refused it, and leave the ceiling as it was on every
// server, so that what B issued above N lies below the ceiling in force.
func runCeilingLoweredUnderALease(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	// The serving process leases with the settings it read before the change: it learns of a ceiling
	// only when it reads them again.
	serving := r.serving(f, ProcessOptions{SettingsTTL: time.Hour, Proxied: true})
	n := Highest(r.blocks, b) + 1000 // room for a few of B's blocks, then B passes it
	passed := false
	// The admin's own background work stays away from B meanwhile: a probe that opens a connection
	// to B checks B and brings its row up to A's, which holds the change already.
	admin := f.Process(t, ProcessOptions{ProbeInterval: time.Hour, WatermarkInterval: time.Hour, BeforeChange: func(server string) {
		if server != b || passed {
			return
		}
		passed = true
		// Cut off from A, which took the change, the serving process cannot bring B's row up to A's
		// when it checks B again (a new connection, or a lease that timed out and took B out of
		// rotation): B passes N before the admin writes there, whatever the timing.
		serving.Cut(t, 0)
		for last := int64(0); last <= n; {
			blk := r.untilFrom(serving, b)
			last, _ = blk.Last()
		}
	}})
	t.Cleanup(func() { _ = admin.Close() })
	_, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: n})
	if !passed {
		t.Fatalf("the update never reached %s: %v", b, err)
	}
	if !errors.Is(err, allocator.ErrInvalidSettings) || !strings.Contains(err.Error(), b) {
		t.Fatalf("lowering max_id to %d while %s leased past it: %v; want ErrInvalidSettings naming %s", n, b, err, b)
	}
	t.Logf("refused as it should be: %v", err)
	after := r.open(f)
	for i, p := range []allocator.Backend{admin, serving, after} {
		if got := maxIDOf(t, p, "orders"); got != allocator.DefaultMaxID {
			t.Fatalf("process %d reads max_id %d after the lowering failed; want it left at %d", i+1, got, int64(allocator.DefaultMaxID))
		}
	}
	r.leaseFrom(after, a, 2)
	r.leaseFrom(after, b, 2)
	r.leaseFrom(serving, b, 2)
	r.disjoint()
}

// runCeilingCutOff: an admin process lowers max_id to N, and after its checks its way to B breaks
// (with stuck, its way to A too, once A took the change, so that A cannot be put back). The update
// must fail and name B. Without stuck, A is put back: the ceiling stays as it was. With stuck, A keeps
// N: then no process that knows A's settings may lease above N on either server, B included, although
// B's own copy says nothing of N.
func runCeilingCutOff(t *testing.T, f Fleet, stuck bool) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	serving := r.serving(f, ProcessOptions{})
	n := max(Highest(r.blocks, a), Highest(r.blocks, b)) + 2000
	var admin *Process
	admin = f.Process(t, ProcessOptions{Proxied: true, BeforeChange: func(server string) {
		if server != b {
			return
		}
		admin.Cut(t, 1)
		if stuck {
			admin.Cut(t, 0)
		}
	}})
	t.Cleanup(func() { _ = admin.Close() })
	_, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: n})
	if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), b) {
		t.Fatalf("lowering max_id to %d with the way to %s cut: %v; want ErrUnavailable naming %s", n, b, err, b)
	}
	t.Logf("refused as it should be: %v", err)
	if !stuck {
		for i, p := range []allocator.Backend{serving, r.open(f)} {
			if got := maxIDOf(t, p, "orders"); got != allocator.DefaultMaxID {
				t.Fatalf("process %d reads max_id %d after the lowering failed; want %s put back to %d", i+1, got, a, int64(allocator.DefaultMaxID))
			}
		}
		r.leaseFrom(serving, b, 2)
		r.disjoint()
		return
	}
	if !strings.Contains(err.Error(), a+" still hold") {
		t.Fatalf("the error does not say that %s keeps the lower ceiling: %v", a, err)
	}
	// Every process that reads A's settings keeps every lease at or below N: a new one, and the serving
	// one once it read them.
	fresh := r.open(f)
	if got := maxIDOf(t, serving, "orders"); got != n {
		t.Fatalf("the serving process reads max_id %d, want %d from %s", got, n, a)
	}
	for i, p := range []allocator.Backend{fresh, serving} {
		for {
			blk, err := p.(preferring).LeaseFrom(r.ctx, "orders", 0, b)
			if errors.Is(err, allocator.ErrExhausted) {
				break
			}
			if err != nil {
				t.Fatalf("process %d: %v", i+1, err)
			}
			r.blocks = append(r.blocks, blk)
			if last, _ := blk.Last(); last > n {
				t.Fatalf("process %d leased %v from %s, above max_id %d that %s holds", i+1, blk, blk.Server, n, a)
			}
		}
	}
	r.disjoint()
}

// runCeilingCutOffBefore: an admin process whose way to B is already broken lowers max_id. The update
// must fail as unavailable, name B (so that the operator knows what to bring back before running it
// again), and change nothing on any server.
func runCeilingCutOffBefore(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	b := f.Name(1)
	serving := r.serving(f, ProcessOptions{})
	n := max(Highest(r.blocks, f.Name(0)), Highest(r.blocks, b)) + 2000
	admin := f.Process(t, ProcessOptions{Proxied: true})
	t.Cleanup(func() { _ = admin.Close() })
	admin.Cut(t, 1)
	_, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxID: n})
	if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), b) {
		t.Fatalf("lowering max_id to %d with the way to %s cut: %v; want ErrUnavailable naming %s", n, b, err, b)
	}
	t.Logf("refused as it should be: %v", err)
	for i, p := range []allocator.Backend{serving, r.open(f)} {
		if got := maxIDOf(t, p, "orders"); got != allocator.DefaultMaxID {
			t.Fatalf("process %d reads max_id %d after the lowering failed; want it left at %d", i+1, got, int64(allocator.DefaultMaxID))
		}
	}
	r.leaseFrom(serving, b, 2)
	r.disjoint()
}

// runStartCutOff: an admin process advances the namespace's start, and its way to B breaks before B
// takes the change: the advance is in force on A, and B, live, keeps its old start. A process that
// reads the settings (one started now, or one whose copy of the settings expired) raises B's counter to
// the new start at its lease: B issues nothing below it to such a process. B takes the change itself
// when it is next checked.
func runStartCutOff(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	serving := r.serving(f, ProcessOptions{SettingsTTL: time.Hour})
	var admin *Process
	admin = f.Process(t, ProcessOptions{Proxied: true, BeforeChange: func(server string) {
		if server == b {
			admin.Cut(t, 1)
		}
	}})
	t.Cleanup(func() { _ = admin.Close() })
	const start = 1_000_000_000
	if _, err := admin.UpdateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, Start: start}); err != nil {
		t.Fatalf("advancing the start with %s cut off: %v; want it in force on %s", b, err, a)
	}
	if ns, err := serving.Namespace(r.ctx, "orders"); err != nil || ns.Start != start { // it reads them again
		t.Fatalf("the serving process reads %+v, %v; want start %d", ns, err, int64(start))
	}
	for i, p := range []allocator.Backend{r.open(f), serving} {
		if blk := r.untilFrom(p, b); blk.Start < start {
			t.Fatalf("process %d leased %v from %s, below the start %d in force on %s", i+1, blk, b, int64(start), a)
		}
	}
	r.disjoint()
}

// crashingProcesses is how many processes lease at once before they all crash.
const crashingProcesses = 8

// runFleetCrash: eight processes lease from B as fast as they can (blocks of 100, water marks every
// second). Then the way from every process to A, which keeps B's marks, breaks, and 0.9 s later they
// all crash: what they leased since their last marks reached A is in no mark. Then B loses its data.
// A fresh process fences B, and the repair with the default margin must move B past every ID any of
// the eight took from it: the margin covers what the whole fleet can have leased since the last mark,
// not what one process can.
func runFleetCrash(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	b := f.Name(1)
	admin := r.open(f)
	if _, err := admin.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxBlockSize: 100}); err != nil {
		t.Fatal(err)
	}
	_ = admin.Close()
	const interval = time.Second
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make([]error, crashingProcesses)
	procs := make([]*Process, crashingProcesses)
	for i := range procs {
		p := f.Process(t, ProcessOptions{Proxied: true, WatermarkInterval: interval})
		procs[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				blk, err := p.LeaseFrom(r.ctx, "orders", 100, b)
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				r.blocks = append(r.blocks, blk)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(4 * interval) // every process's pace reaches the marks a few times
	for _, p := range procs {
		p.Cut(t, 0)
	}
	time.Sleep(interval * 9 / 10)
	close(stop)
	wg.Wait()
	for _, p := range procs {
		p.Crash()
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	highestB := Highest(r.blocks, b)
	t.Logf("%d processes leased %d blocks; %s issued up to %d", crashingProcesses, len(r.blocks), b, highestB)
	if err := f.Wipe(r.ctx, 1); err != nil {
		t.Fatal(err)
	}
	p := f.Process(t, ProcessOptions{WatermarkInterval: interval}) // run as the fleet is
	t.Cleanup(func() { _ = p.Close() })
	r.repairPast(p, b, highestB, "the crashed processes took them")
}

// runReplicaPromoted: A has an asynchronous replica. p1 leases from A and closes (its marks reach B);
// the replica then stops receiving; p2 leases from A past the replica and dies with A, so that no mark
// holds what it took. A is killed and the replica takes its address, behind A but at or above every
// mark. Neither a process that ran all along (it read the marks, and leased from B only) nor one
// started now may lease from it: it is not the server the marks were taken on. The repair then makes
// A serve above everything it issued.
func runReplicaPromoted(t *testing.T, f Fleet) {
	r := &operatorRun{t: t, ctx: context.Background()}
	a, b := f.Name(0), f.Name(1)
	p1 := r.open(f)
	if _, err := p1.CreateNamespace(r.ctx, allocator.Namespace{Name: "orders", BlockSize: 100}); err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, a, 3)
	r.leaseFrom(p1, b, 3)
	replica, err := f.Replicate(r.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.leaseFrom(p1, a, 5)
	if err := p1.Close(); err != nil { // its marks reach B
		t.Fatal(err)
	}
	if err := replica.Freeze(r.ctx); err != nil {
		t.Fatal(err)
	}
	p2 := f.Process(t, ProcessOptions{WatermarkInterval: time.Hour})
	r.leaseFrom(p2, a, 3)
	p2.Crash()
	running := r.open(f)
	r.leaseFrom(running, b, 1)
	highestA := Highest(r.blocks, a)
	if err := replica.Promote(r.ctx); err != nil {
		t.Fatal(err)
	}
	for i, p := range []allocator.Backend{running, r.open(f)} {
		if blk, err := p.(preferring).LeaseFrom(r.ctx, "orders", 0, a); err == nil {
			r.blocks = append(r.blocks, blk)
			if blk.Server == a {
				t.Fatalf("process %d leased %v from the replica promoted in %s's place (A had issued up to %d)", i+1, blk, a, highestA)
			}
		}
		h := FencedHealth(t, p, a)
		t.Logf("process %d: %s", i+1, h.Error)
	}
	r.disjoint()
	res, err := running.(allocator.Repairer).Repair(r.ctx, "orders", a, allocator.RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fenced || res.After <= highestA {
		t.Fatalf("repair %+v; %s had issued up to %d", res, a, highestA)
	}
	for _, p := range []allocator.Backend{running, r.open(f)} {
		if blk := r.untilFrom(p, a); blk.Start <= highestA {
			t.Fatalf("after the repair %s leased %v, not above %d", a, blk, highestA)
		}
	}
	r.disjoint()
}
