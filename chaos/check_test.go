package chaos

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/testservers"
)

// names maps the servers' names as blocks give them to their index.
func names(n map[string]int) func(string) (int, bool) {
	return func(s string) (int, bool) { i, ok := n[s]; return i, ok }
}

var ab = names(map[string]int{"a": 0, "b": 1})

func blk(server string, start, size int64) allocator.Block {
	return allocator.Block{Namespace: Namespace, Server: server, Start: start, Step: pairLayout.step, Size: size}
}

func TestFaultProblems(t *testing.T) {
	cases := []struct {
		name string
		f    FaultResult
		want string // in the problem; empty: none
	}{
		{"nothing expected", FaultResult{Applied: true}, ""},
		{"nothing expected, not applied", FaultResult{}, ""},
		{"fenced", FaultResult{Applied: true, Expect: ExpectFenced, FencedOrRefused: true}, ""},
		{"restore unnoticed", FaultResult{Applied: true, Expect: ExpectFenced}, "went unnoticed"},
		{"misconfiguration unnoticed", FaultResult{Applied: true, Expect: ExpectRefused}, "refused"},
		{"restore not applied", FaultResult{Expect: ExpectFenced}, "was not applied"},
		{"repair failed", FaultResult{Applied: true, Expect: ExpectFenced, FencedOrRefused: true, Error: "revert: repair of server b: boom"}, "boom"},
		{"dump missing", FaultResult{Expect: ExpectFenced, Error: "apply: no dump of server b was taken"}, "no dump"},
		{"start checked", FaultResult{Applied: true, Expect: ExpectStart, Checked: 3}, ""},
		{"start not exercised", FaultResult{Applied: true, Expect: ExpectStart}, "not exercised"},
		{"ceiling refused and checked", FaultResult{Applied: true, Expect: ExpectCeiling, FencedOrRefused: true, Checked: 4}, ""},
		{"ceiling lowered past a server cut off", FaultResult{Applied: true, Expect: ExpectCeiling, Checked: 4}, "was not refused as unavailable, or changed the ceiling"},
		{"ceiling never met", FaultResult{Applied: true, Expect: ExpectCeiling, FencedOrRefused: true}, "no block was leased after the ceiling was lowered"},
		{"ceiling not lowered", FaultResult{Applied: true, Expect: ExpectCeiling, FencedOrRefused: true, Checked: 4,
			Error: "apply: lowering max_id with every server in reach: boom"}, "boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.f.problem()
			if (p == "") != (c.want == "") || !strings.Contains(p, c.want) {
				t.Fatalf("problem %q, want one saying %q", p, c.want)
			}
			err := Summary{Faults: []FaultResult{c.f}}.OK(0)
			if (err == nil) != (c.want == "") {
				t.Fatalf("OK: %v, want a failure only when the fault has a problem", err)
			}
		})
	}
}

func TestSummaryFails(t *testing.T) {
	ok := Summary{Backends: []BackendFigures{{Backend: BackendMySQL, Figures: Figures{IDs: 10}}, {Backend: BackendRedis, Figures: Figures{IDs: 10}}}}
	if err := ok.OK(10); err != nil {
		t.Fatalf("a clean run: %v", err)
	}
	cases := []struct {
		name   string
		change func(*Summary)
		want   string
	}{
		{"duplicate", func(s *Summary) { s.Duplicates = 1 }, "1 duplicate"},
		{"block issued twice", func(s *Summary) { s.ReissuedIDs = 3 }, "3 IDs issued in two blocks, first"},
		{"parity", func(s *Summary) { s.ParityViolations = 2 }, "parity"},
		{"start", func(s *Summary) { s.StartViolations = 1 }, "below the namespace's start"},
		{"above max_id", func(s *Summary) { s.IDsAboveMaxID = 7 }, "7 IDs above the namespace's max_id"},
		{"one backend short", func(s *Summary) { s.Backends[1].IDs = 9 }, "redis: only 9 IDs"},
		{"restore unnoticed", func(s *Summary) {
			s.Faults = append(s.Faults, FaultResult{Backend: BackendMySQL, Name: "restored", Applied: true, Expect: ExpectFenced})
		}, `mysql: "restored" went unnoticed`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ok
			s.Backends = slices.Clone(ok.Backends)
			c.change(&s)
			if err := s.OK(10); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OK: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestSummaryJSON: the summary names every fault with what came of it, beside the figures.
func TestSummaryJSON(t *testing.T) {
	var s Summary
	fig := Figures{IDs: 5, Blocks: 2, degradedCalls: 4, degradedOK: 3}
	s.add(fig)
	s.Backends = []BackendFigures{{Backend: BackendMySQL, Figures: fig}}
	s.Faults = []FaultResult{{Backend: BackendMySQL, Name: "restored", Applied: true, Expect: ExpectFenced, FencedOrRefused: true, Detail: "repaired"}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ids", "duplicates", "reissued_ids", "parity_violations", "start_violations", "ids_above_max_id", "served_while_degraded", "longest_stall_ms", "longest_outage_stall_ms",
		"blocks", "next_errors", "lost_in_flight_ids", "failed_attempts", "failovers", "faults", "backends", "duration_s"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if got["served_while_degraded"] != 0.75 {
		t.Errorf("served_while_degraded %v, want 3 of 4", got["served_while_degraded"])
	}
	f := got["faults"].([]any)[0].(map[string]any)
	for k, v := range map[string]any{"backend": "mysql", "name": "restored", "applied": true, "expect": "fenced", "fenced_or_refused": true, "detail": "repaired"} {
		if f[k] != v {
			t.Errorf("fault %s = %v, want %v", k, f[k], v)
		}
	}
}

// TestFiguresAdd: the figures of two backends add up; the served share weighs each backend's calls.
func TestFiguresAdd(t *testing.T) {
	var s Figures
	s.add(Figures{IDs: 10, Duplicates: 1, IDsAboveMaxID: 3, LongestStallMS: 5, LongestStallDuring: "kill", degradedCalls: 10, degradedOK: 10})
	s.add(Figures{IDs: 20, StartViolations: 2, IDsAboveMaxID: 4, LongestStallMS: 3, LongestStallDuring: "between faults", degradedCalls: 30, degradedOK: 0})
	if s.IDs != 30 || s.Duplicates != 1 || s.StartViolations != 2 || s.IDsAboveMaxID != 7 || s.LongestStallMS != 5 || s.LongestStallDuring != "kill" ||
		s.ServedWhileDegraded != 0.25 {
		t.Fatalf("%+v", s)
	}
}

func TestParityViolations(t *testing.T) {
	blocks := []allocator.Block{
		blk("a", 1, 10),  // odd from a
		blk("b", 22, 10), // even from b
		blk("a", 42, 3),  // even from a
		blk("c", 61, 4),  // unknown server
		{Namespace: Namespace, Server: "b", Start: 100, Step: 4, Size: 5}, // another step
	}
	if got := pairLayout.parityViolations(blocks, ab); got != 3+4+5 {
		t.Fatalf("parity violations %d, want 12", got)
	}
}

func TestOutsideBlocks(t *testing.T) {
	blocks := []allocator.Block{blk("a", 1, 3), blk("b", 2, 2), blk("b", 10, 1)} // 1 3 5 | 2 4 | 10
	ids := []int64{1, 2, 3, 4, 5, 6, 7, 10, 12}
	if got := pairLayout.outsideBlocks(ids, blocks); got != 3 { // 6, 7, 12
		t.Fatalf("IDs outside every block: %d, want 3", got)
	}
}

// TestReissued: an ID in two blocks of its residue counts once per extra block, drawn or not; blocks
// that only touch, or share no residue, count nothing.
func TestReissued(t *testing.T) {
	cases := []struct {
		name   string
		blocks []allocator.Block
		want   int64
	}{
		{"disjoint", []allocator.Block{blk("a", 1, 3), blk("a", 7, 2), blk("b", 2, 5)}, 0}, // 1 3 5 | 7 9 | 2…10
		{"overlap", []allocator.Block{blk("a", 1, 5), blk("a", 7, 4)}, 2},                  // 1…9 | 7…13: 7, 9
		{"the same block twice", []allocator.Block{blk("b", 20, 10), blk("b", 20, 10)}, 10},
		{"inside a larger one", []allocator.Block{blk("a", 1, 100), blk("a", 51, 3), blk("a", 101, 10)}, 3 + 10},
		{"empty blocks", []allocator.Block{blk("a", 1, 3), blk("a", 3, 0)}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rec []recorded
			for _, b := range c.blocks {
				rec = append(rec, recorded{Block: b})
			}
			got, first := pairLayout.reissued(rec)
			if got != c.want {
				t.Fatalf("reissued %d, want %d", got, c.want)
			}
			if (got > 0) != (first != "") {
				t.Fatalf("reissued %d, first pair %q: want the pair named when there is one", got, first)
			}
		})
	}
}

func TestDuplicates(t *testing.T) {
	if got := duplicates([]int64{1, 2, 2, 3, 3, 3, 4}); got != 3 {
		t.Fatalf("duplicates %d, want 3", got)
	}
}

// TestStartAdvanceCheck: a block leased after the start was advanced that starts below it is a
// violation, whichever server issued it; blocks leased before the change are not held to it.
func TestStartAdvanceCheck(t *testing.T) {
	const start = 1_000_000
	a := advance{fault: "advanced", epoch: 1, start: start, returned: 1}
	blocks := []recorded{
		{Block: blk("b", 200, 10), epoch: 0},       // before the change: below is fine
		{Block: blk("a", 201, 10), epoch: 0},       // before the change, finished after it
		{Block: blk("a", start+1, 10), epoch: 1},   // a, above
		{Block: blk("b", start+200, 10), epoch: 1}, // b came back above
		{Block: blk("b", start, 10), epoch: 2},     // b, at the start
		{Block: blk("b", 220, 10), epoch: 1},       // b came back below: the fault
	}
	c := a.check(blocks, ab)
	if c.blocks != 4 || c.violations != 1 || c.returned != 3 || c.lowest != 220 {
		t.Fatalf("%+v, want 4 blocks checked, 1 violation, 3 from b, the lowest at 220", c)
	}
	clean := a.check(blocks[:5], ab)
	if clean.violations != 0 || clean.returned != 2 || clean.lowest != start {
		t.Fatalf("%+v, want no violation and b's lowest at the start", clean)
	}
}

func TestFirstOf(t *testing.T) {
	for _, c := range []struct{ i, start, want int64 }{{0, 10, 11}, {0, 11, 11}, {1, 10, 10}, {1, 11, 12}} {
		if got := pairLayout.firstOf(int(c.i), c.start); got != c.want {
			t.Errorf("firstOf(%d, %d) = %d, want %d", c.i, c.start, got, c.want)
		}
	}
}

// TestLostInFlight follows each server's counter: lost leases show as counter moves without blocks;
// a restore (the counter back) and its repair (the counter far ahead), or a start advance, are not
// leases and count nothing.
func TestLostInFlight(t *testing.T) {
	before := map[int]int64{0: 1, 1: 2}
	cases := []struct {
		name   string
		after  map[int]int64
		resets map[int][]int64
		blocks []allocator.Block
		want   int64
	}{
		{"nothing lost", map[int]int64{0: 41, 1: 22}, nil,
			[]allocator.Block{blk("a", 1, 10), blk("a", 21, 10), blk("b", 2, 10)}, 0},
		{"one lease lost on a", map[int]int64{0: 41, 1: 22}, nil,
			[]allocator.Block{blk("a", 1, 10), blk("b", 2, 10)}, 10},
		{"b restored and repaired to 1000", map[int]int64{0: 21, 1: 1040}, map[int][]int64{1: {1000}},
			[]allocator.Block{blk("a", 1, 10), blk("b", 2, 10), blk("b", 22, 5), blk("b", 1000, 20)}, 0},
		{"a lease lost after the repair", map[int]int64{0: 21, 1: 1060}, map[int][]int64{1: {1000}},
			[]allocator.Block{blk("a", 1, 10), blk("b", 2, 10), blk("b", 1000, 20)}, 10},
		{"start advanced, then a repair", map[int]int64{0: 5021, 1: 9002}, map[int][]int64{0: {5001}, 1: {5002, 9000}},
			[]allocator.Block{blk("a", 1, 10), blk("a", 5001, 10), blk("b", 2, 10), blk("b", 5002, 10)}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pairLayout.lostInFlight(before, c.after, c.resets, c.blocks, ab); got != c.want {
				t.Fatalf("lost in flight %d, want %d", got, c.want)
			}
		})
	}
}

// TestScheduleWindowsDoNotOverlap: in each backend's schedule every fault has a window of its own, and
// a name of its own.
func TestScheduleWindowsDoNotOverlap(t *testing.T) {
	mysqlWorld := newWorld(Config{}.withDefaults(), BackendMySQL)
	mysqlWorld.servers.(*mysqlServers).owned = []*testservers.MariaDB{{}, {}} // faults are built, not applied
	redisWorld := newWorld(Config{}.withDefaults(), BackendRedis)
	galeraWorld := newWorld(Config{}.withDefaults(), BackendGalera)
	galeraWorld.servers.(*galeraServers).nodes = []*testservers.MariaDB{{}, {}, {}}
	for _, w := range []*world{mysqlWorld, redisWorld, galeraWorld} {
		fs := w.faults()
		want := map[string]int{BackendMySQL: 15, BackendRedis: 12, BackendGalera: 9}[w.backend]
		if len(fs) != want {
			t.Errorf("%s: %d faults, want %d", w.backend, len(fs), want)
		}
		seen := map[string]bool{}
		for k, f := range fs {
			if f.at >= f.until || f.at <= 0 || f.until >= 1 {
				t.Errorf("%s: %q window %v–%v", w.backend, f.name, f.at, f.until)
			}
			if k > 0 && f.at < fs[k-1].until {
				t.Errorf("%s: %q (from %v) overlaps %q (until %v)", w.backend, f.name, f.at, fs[k-1].name, fs[k-1].until)
			}
			if seen[f.name] {
				t.Errorf("%s: two faults named %q", w.backend, f.name)
			}
			seen[f.name] = true
		}
		t.Log(w.backend, fmt.Sprint(len(fs)), "faults")
	}
}

// TestGaleraLayout: three nodes at offsets 1, 2, 3 of 4. Each node's blocks keep its residue, an ID of
// the unused residue 0 lies in no block, and a start advance moves each node to its first ID above it.
func TestGaleraLayout(t *testing.T) {
	g := layout{servers: 3, step: 4}
	if got := g.indexes(); len(got) != 3 || got[2] != 2 {
		t.Fatalf("indexes %v", got)
	}
	for i, want := range []int64{1, 2, 3} {
		if got := g.residue(i); got != want {
			t.Errorf("residue(%d) = %d, want %d", i, got, want)
		}
	}
	for _, c := range []struct {
		i           int
		start, want int64
	}{{0, 100, 101}, {1, 100, 102}, {2, 100, 103}, {0, 101, 101}, {2, 104, 107}} {
		if got := g.firstOf(c.i, c.start); got != c.want {
			t.Errorf("firstOf(%d, %d) = %d, want %d", c.i, c.start, got, c.want)
		}
	}
	abc := func(name string) (int, bool) {
		i := map[string]int{"a": 0, "b": 1, "c": 2}
		j, ok := i[name]
		return j, ok
	}
	blocks := []allocator.Block{
		{Namespace: Namespace, Server: "a", Start: 1, Step: 4, Size: 3},  // 1, 5, 9
		{Namespace: Namespace, Server: "c", Start: 3, Step: 4, Size: 2},  // 3, 7
		{Namespace: Namespace, Server: "b", Start: 3, Step: 4, Size: 4},  // c's residue from b
		{Namespace: Namespace, Server: "c", Start: 11, Step: 2, Size: 5}, // another step
	}
	if got := g.parityViolations(blocks, abc); got != 4+5 {
		t.Errorf("parity violations %d, want 9", got)
	}
	if got := g.outsideBlocks([]int64{1, 3, 4, 5, 7, 8, 9, 13}, blocks[:2]); got != 3 { // 4, 8, 13
		t.Errorf("IDs outside the blocks %d, want 3", got)
	}
}

// TestStallsLeaveOutagesApart: the longest stall is the longest call outside an outage, named by the
// fault it began in (between faults, by the fault that ended last); calls during an outage (every
// server out by design) are reported on their own.
func TestStallsLeaveOutagesApart(t *testing.T) {
	kill, settings := "server a SIGKILLed", "increment changed on both servers"
	faults := []FaultResult{{Name: kill}, {Name: settings, Outage: true}}
	clients := []*drawer{
		{longestBetween: 20 * time.Millisecond, longestIn: map[*string]time.Duration{&kill: 150 * time.Millisecond}},
		{longestBetween: 40 * time.Millisecond, longestIn: map[*string]time.Duration{&settings: 8 * time.Second},
			longestBetweenAfter: &faultEnd{name: kill, at: time.Unix(100, 0)}, longestBetweenBegan: time.Unix(101, 5e8)},
	}
	var f Figures
	stalls(&f, clients, faults)
	if f.LongestStallMS != 150 || f.LongestStallDuring != kill || f.LongestOutageStallMS != 8000 {
		t.Fatalf("longest %v ms during %q, outage %v ms; want 150 during %q, outage 8000", f.LongestStallMS, f.LongestStallDuring, f.LongestOutageStallMS, kill)
	}
	if faults[0].LongestStallMS != 150 || faults[1].LongestStallMS != 8000 {
		t.Fatalf("per fault: %+v", faults)
	}

	// With no fault stalling more than the calls between faults, the longest is between faults.
	f = Figures{}
	stalls(&f, clients[1:], faults)
	if f.LongestStallMS != 40 || f.LongestStallDuring != "between faults" {
		t.Fatalf("longest %v ms during %q; want 40 between faults", f.LongestStallMS, f.LongestStallDuring)
	}
	// A stall between faults names the fault that had ended last, and how long before.
	if want := kill + ", over 1.5 s before the call began"; f.LongestStallAfter != want {
		t.Fatalf("after %q, want %q", f.LongestStallAfter, want)
	}
}

// TestCeilingCheck: each block is held to the ceiling in force when its lease began — a lowering is in
// force once the update returned, so a lease that began before may still reach the ceiling before —
// and every ID above it counts, drawn or not.
func TestCeilingCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cs := ceilings{{maxID: 1_000_000, since: at(0)}, {maxID: 500, since: at(10)}}
	for _, c := range []struct {
		t    time.Time
		want int64
	}{{at(-1), 1_000_000}, {at(0), 1_000_000}, {at(9), 1_000_000}, {at(10), 500}, {at(60), 500}} {
		if got := cs.at(c.t); got != c.want {
			t.Errorf("ceiling at %v: %d, want %d", c.t.Sub(t0), got, c.want)
		}
	}
	ceil := func(server string, start, size int64, began time.Time) recorded {
		b := blk(server, start, size)
		b.Namespace = CeilingNamespace
		return recorded{Block: b, began: began}
	}
	cases := []struct {
		name                  string
		blocks                []recorded
		above, after, highest int64
	}{
		{"every block below its ceiling", []recorded{
			ceil("a", 1, 100, at(1)),   // 1…199
			ceil("a", 601, 10, at(9)),  // above 500, but leased before the lowering was in force
			ceil("b", 402, 50, at(11)), // 402…500
			ceil("a", 499, 1, at(12)),  // the ceiling's last odd ID
		}, 0, 2, 500},
		{"a block across the ceiling", []recorded{
			ceil("b", 402, 60, at(11)), // 402…520: 502…520 above, 10 IDs
		}, 10, 1, 520},
		{"a block wholly above it", []recorded{
			ceil("a", 501, 5, at(10)), // 501…509
			ceil("b", 2, 5, at(20)),
		}, 5, 2, 509},
		{"above the first ceiling", []recorded{
			ceil("a", 999_999, 3, at(5)), // 999999, 1000001, 1000003
		}, 2, 0, 0},
		{"empty blocks count nothing", []recorded{ceil("a", 901, 0, at(30))}, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := cs.check(c.blocks)
			if got.above != c.above || got.after != c.after || got.highest != c.highest {
				t.Fatalf("%+v, want %d IDs above, %d blocks after the lowering, the highest %d", got, c.above, c.after, c.highest)
			}
		})
	}
	// Before any lowering, nothing is "after" it.
	if got := cs[:1].check([]recorded{ceil("a", 1, 10, at(30))}); got.after != 0 || got.above != 0 {
		t.Fatalf("%+v with a single ceiling", got)
	}
}

// TestIssueCheckKeepsNamespacesApart: the two namespaces are spaces of IDs of their own — an ID drawn
// from each is no duplicate, a block of one does not hold the other's IDs, and the start advances and
// the ceilings hold each namespace's blocks only — and the figures the ceiling fault needs are noted.
func TestIssueCheckKeepsNamespacesApart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	inCeiling := func(b allocator.Block, began time.Time) recorded {
		b.Namespace = CeilingNamespace
		return recorded{Block: b, began: began}
	}
	is := issue{
		blocks: []recorded{
			{Block: blk("a", 1, 100), began: t0},                   // 1…199 of the run's namespace
			{Block: blk("b", 2, 100), began: t0},                   // 2…200
			{Block: blk("a", 2001, 10), epoch: 1, began: t0},       // above the advanced start
			inCeiling(blk("a", 1, 10), t0),                         // 1…19 of the ceiling namespace
			inCeiling(blk("b", 2, 30), t0.Add(2*time.Second)),      // 2…60: 42…60 above the ceiling 40
			inCeiling(blk("a", 21, 10), t0.Add(-time.Millisecond)), // 21…39, before the lowering
		},
		advances:  []advance{{fault: "advance", epoch: 1, start: 2000, returned: 0}},
		ceilings:  ceilings{{maxID: ceilingMaxID, since: t0.Add(-time.Hour)}, {maxID: 40, since: t0}},
		exhausted: 9,
	}
	faults := []FaultResult{{Name: "advance", Expect: ExpectStart}, {Name: "lowered", Expect: ExpectCeiling}}
	drawn := map[string][]int64{Namespace: {3, 1, 2, 2001}, CeilingNamespace: {1, 2, 3, 60}}
	var f Figures
	is.check(&f, faults, drawn, pairLayout, ab)
	if f.IDs != 8 || f.Duplicates != 0 || f.ParityViolations != 0 || f.ReissuedIDs != 0 || f.StartViolations != 0 || f.Blocks != 6 {
		t.Fatalf("%+v: want 8 IDs, and no duplicate, parity or start violation, nor an ID in two blocks", f)
	}
	if f.IDsAboveMaxID != 10 { // 42, 44, …, 60
		t.Fatalf("%d IDs above max_id, want 10", f.IDsAboveMaxID)
	}
	if faults[0].Checked != 1 || faults[1].Checked != 2 || !strings.Contains(faults[1].Detail, "the highest ID 60") ||
		!strings.Contains(faults[1].Detail, "9 calls of its clients answered exhausted") {
		t.Fatalf("faults %+v", faults)
	}
	// An ID drawn twice from one namespace is a duplicate; an ID of a block of the other one is not.
	drawn = map[string][]int64{Namespace: {3, 3}, CeilingNamespace: {2001}}
	f = Figures{}
	is.check(&f, nil, drawn, pairLayout, ab)
	if f.Duplicates != 1 || f.ParityViolations != 1 {
		t.Fatalf("%+v: want 1 duplicate, and 1 ID outside its namespace's blocks", f)
	}
}
