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
// the summary: no duplicate, no parity violation, the faults were applied and met leases.
func TestShortChaosRun(t *testing.T) {
	testenv.RequireMariaDB(t)
	sum, err := chaos.Run(context.Background(), chaos.Config{Dir: testenv.ShortTempDir(t), Duration: 15 * time.Second,
		Clients: 16, MinIDs: 30_000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", sum)
	if err := sum.OK(30_000); err != nil {
		t.Fatal(err)
	}
	if len(sum.Faults) != 7 {
		t.Fatalf("applied %d faults, want the 7 of the schedule: %v", len(sum.Faults), sum.Faults)
	}
	if sum.FailedAttempts == 0 || sum.Blocks < 50 {
		t.Fatalf("the faults met no lease (failed attempts %d, blocks %d): the run proves nothing", sum.FailedAttempts, sum.Blocks)
	}
	if sum.LostInFlightIDs < 0 {
		t.Fatalf("the servers' counters moved less than the blocks issued: %d", sum.LostInFlightIDs)
	}
}
