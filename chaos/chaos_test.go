package chaos_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/chaos"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestShortChaosRun runs the whole fault schedule briefly on both backends, on throwaway servers of its
// own, and checks the summary: no duplicate, no parity or start violation, no ID above a ceiling in
// force, every fault was applied and met leases, each restore and the promoted replica were fenced,
// each misconfiguration refused, and the lowered ceiling refused while a server was cut off and then
// reached. It is long enough for the schedule's server restarts, which take seconds each.
func TestShortChaosRun(t *testing.T) {
	testenv.RequireMariaDB(t)
	testenv.RequireRedis(t)
	var logs allocatortest.LogBuffer
	sum, err := chaos.Run(context.Background(), chaos.Config{Dir: testenv.ShortTempDir(t), Duration: 45 * time.Second,
		Clients: 16, MinIDs: 30_000, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(func() {
		if t.Failed() { // what the servers and the faults did, to find why
			for _, line := range strings.Split(logs.String(), "\n") {
				if !strings.Contains(line, "chaos: drawing") {
					t.Log(line)
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// The progress line says which fault runs and how long is left.
	if out := logs.String(); !strings.Contains(out, "msg=\"chaos: drawing\" backend=mysql stage=") || !strings.Contains(out, "left=") {
		t.Errorf("no progress line with the stage and the time left in the log")
	}
	t.Logf("%+v", sum)
	if err := sum.OK(30_000); err != nil {
		t.Fatal(err)
	}
	faults, expected := map[string]int{}, map[string]map[string]int{chaos.BackendMySQL: {}, chaos.BackendRedis: {}}
	for _, f := range sum.Faults {
		if !f.Applied {
			t.Errorf("%s: fault %q not applied: %s %s", f.Backend, f.Name, f.Error, f.Detail)
		}
		faults[f.Backend]++
		expected[f.Backend][f.Expect]++
	}
	if faults[chaos.BackendMySQL] != 15 || faults[chaos.BackendRedis] != 12 {
		t.Fatalf("faults by backend %v, want the 15 of the MariaDB schedule and the 12 of the Redis one: %+v", faults, sum.Faults)
	}
	// Restores and promoted replicas fenced, misconfigurations refused, start advances, ceilings.
	want := map[string]map[string]int{
		chaos.BackendMySQL: {chaos.ExpectFenced: 3, chaos.ExpectRefused: 1, chaos.ExpectStart: 1, chaos.ExpectCeiling: 1},
		chaos.BackendRedis: {chaos.ExpectFenced: 2, chaos.ExpectRefused: 1, chaos.ExpectStart: 1, chaos.ExpectCeiling: 1},
	}
	for b, w := range want {
		for e, n := range w {
			if expected[b][e] != n {
				t.Fatalf("%s: faults by expectation %v, want %v", b, expected[b], w)
			}
		}
	}
	if len(sum.Backends) != 2 {
		t.Fatalf("figures of %d backends, want both: %+v", len(sum.Backends), sum.Backends)
	}
	if sum.FailedAttempts == 0 || sum.Blocks < 50 {
		t.Fatalf("the faults met no lease (failed attempts %d, blocks %d): the run proves nothing", sum.FailedAttempts, sum.Blocks)
	}
	if sum.LostInFlightIDs < 0 {
		t.Fatalf("the servers' counters moved less than the blocks issued: %d", sum.LostInFlightIDs)
	}
}

// TestShortGaleraChaosRun runs the schedule against a 3-node Galera cluster: nodes killed, a node whose
// data directory is wiped rejoining by state transfer (never fenced, serving again without a repair), a
// start advanced while a node is down; no ID issued twice. The cluster's own steps take seconds (a
// killed node's eviction, a state transfer), so the schedule needs a longer run than the pair's.
func TestShortGaleraChaosRun(t *testing.T) {
	testenv.RequireGalera(t)
	sum, err := chaos.Run(context.Background(), chaos.Config{Backends: []string{chaos.BackendGalera}, Dir: testenv.ShortTempDir(t),
		Duration: 90 * time.Second, Clients: 16, MinIDs: 60_000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", sum)
	if err := sum.OK(60_000); err != nil {
		t.Fatal(err)
	}
	healed := 0
	for _, f := range sum.Faults {
		if !f.Applied {
			t.Errorf("fault %q not applied: %s %s", f.Name, f.Error, f.Detail)
		}
		if f.Expect == chaos.ExpectHealed && !f.FencedOrRefused && f.Checked > 0 {
			healed++
		}
	}
	if healed != 1 {
		t.Fatalf("the wiped node did not rejoin, serve and stay unfenced: %+v", sum.Faults)
	}
}
