package sim

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// budget is the fixed number of schedules the suite explores.
const budget = 1000

func TestSimulation(t *testing.T) {
	sum := Explore(1, budget, runtime.GOMAXPROCS(0), 1, Off{})
	fmt.Printf("%d schedules in %s, %d violations\n", sum.Schedules, sum.Elapsed.Round(1e6), len(sum.Violations))
	for _, v := range sum.Violations {
		t.Fatal(v.Report(80))
	}
	if sum.Schedules != budget {
		t.Fatalf("%d schedules explored, want %d", sum.Schedules, budget)
	}
	for _, kind := range []string{"lease", "restore physical", "restore logical", "data loss", "replica promoted", "settings", "repair", "process crash", "server crash", "network fault"} {
		if sum.Events[kind] == 0 {
			t.Errorf("no %q event in %d schedules: %v", kind, budget, sum.Events)
		}
	}
}

func TestSimulationReplaysASeed(t *testing.T) {
	for _, seed := range []uint64{3, 41, 105} {
		a, b := Run(seed, Off{}), Run(seed, Off{})
		if !slices.Equal(a.Trace, b.Trace) {
			t.Fatalf("seed %d: two runs differ:\n%s\n----\n%s", seed, a.Report(1000), b.Report(1000))
		}
		if len(a.Trace) < 10 {
			t.Fatalf("seed %d: a trace of %d lines", seed, len(a.Trace))
		}
	}
}
