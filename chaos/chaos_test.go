package chaos_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ticketd/ticketd/chaos"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestShortChaosRun runs the whole fault schedule briefly, on a throwaway pair of its own, and checks
// the summary: no duplicate, no parity or start violation, every fault was applied and met leases, and
// each restore was fenced and each misconfiguration refused. It is long enough for the schedule's
// server restarts, which take seconds each.
func TestShortChaosRun(t *testing.T) {
	testenv.RequireMariaDB(t)
	sum, err := chaos.Run(context.Background(), chaos.Config{Dir: testenv.ShortTempDir(t), Duration: 45 * time.Second,
		Clients: 16, MinIDs: 30_000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", sum)
	if err := sum.OK(30_000); err != nil {
		t.Fatal(err)
	}
	expected := map[string]int{}
	for _, f := range sum.Faults {
		if !f.Applied {
			t.Errorf("fault %q not applied: %s %s", f.Name, f.Error, f.Detail)
		}
		expected[f.Expect]++
	}
	if len(sum.Faults) != 13 {
		t.Fatalf("%d faults, want the 13 of the schedule: %+v", len(sum.Faults), sum.Faults)
	}
	if expected[chaos.ExpectFenced] != 2 || expected[chaos.ExpectRefused] != 1 || expected[chaos.ExpectStart] != 1 {
		t.Fatalf("faults by expectation %v, want 2 restores fenced, 1 misconfiguration refused, 1 start advance", expected)
	}
	if sum.FailedAttempts == 0 || sum.Blocks < 50 {
		t.Fatalf("the faults met no lease (failed attempts %d, blocks %d): the run proves nothing", sum.FailedAttempts, sum.Blocks)
	}
	if sum.LostInFlightIDs < 0 {
		t.Fatalf("the servers' counters moved less than the blocks issued: %d", sum.LostInFlightIDs)
	}
}
