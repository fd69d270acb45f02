//go:build race

package sim

import (
	"runtime"
	"testing"
)

// TestExploreInParallel runs a few schedules on parallel workers under the race detector: the
// schedules share nothing but the summary (the budget and the invariants are sim_test.go's, run
// without the detector).
func TestExploreInParallel(t *testing.T) {
	const n = 8
	sum := Explore(1, n, max(2, runtime.GOMAXPROCS(0)), 0, Off{})
	if sum.Schedules != n {
		t.Fatalf("%d schedules explored, want %d", sum.Schedules, n)
	}
	if len(sum.Violations) != 0 {
		t.Fatal(sum.Violations[0].Report(80))
	}
	if sum.Events["lease"] == 0 {
		t.Fatalf("no lease in %d schedules: %v", n, sum.Events)
	}
}
