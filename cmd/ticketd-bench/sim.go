package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/ticketd/ticketd/allocator/sim"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func init() {
	commands["sim"] = commandInfo{usage: "ticketd-bench sim [flags]",
		summary: "Explore schedules of a simulated fleet, deterministically from seeds. Ticket servers that answer the MySQL backend's statements, ticketd processes running the real backend on simulated time, an admin, and a network; " +
			"leases, process and server crashes, restores from snapshots, data loss, replica promotion, settings changes from an admin that may be cut off half-way, servers listed in another order, repairs as the fence message says, network faults, and rolling upgrades in which processes sending the statements of 0.1.0 are replaced by processes of this release. " +
			"After every step it checks that no ID was issued twice, above the max_id in force or below the start, and that no healthy server is fenced; at the end, that every repaired server serves. " +
			"A violation prints its seed and trace; the same seed replays it. The last line is a JSON summary; the exit status is 1 when any schedule broke an invariant.",
		new: func() command { return &simCmd{} }}
}

type simCmd struct {
	schedules, workers, trace int64
	seed                      int64
	off                       string
	all                       bool
}

func (c *simCmd) flags(fs *flag.FlagSet) {
	fs.Var(cliflag.Int64(&c.schedules, 1, math.MaxInt64), "schedules", "how many `schedules` to explore (default 1000)")
	fs.Var(cliflag.Int64(&c.seed, 1, math.MaxInt64), "seed", "the `seed` of the first schedule; the next ones follow it (default 1)")
	fs.Var(cliflag.Int64(&c.workers, 1, 1024), "workers", "schedules explored at once, each in one goroutine (default GOMAXPROCS)")
	fs.Var(cliflag.Int64(&c.trace, 0, math.MaxInt32), "trace", "the `lines` of each violation's trace to print, the last ones (default 60)")
	fs.StringVar(&c.off, "off", "", "comma-separated guard mechanisms to switch off in the simulation: "+strings.Join(offNames, ", "))
	fs.BoolVar(&c.all, "keep-going", false, "explore every schedule even after a violation")
}

var offNames = []string{"floors", "peer-marks", "identity", "ceiling-bound", "repair-margin", "older-release"}

func parseOff(list string) (sim.Off, error) {
	var off sim.Off
	for _, name := range cliflag.SplitList(list) {
		switch name {
		case "floors":
			off.Floors = true
		case "peer-marks":
			off.PeerMarks = true
		case "identity":
			off.Identity = true
		case "ceiling-bound":
			off.CeilingBound = true
		case "repair-margin":
			off.RepairMargin = true
		case "older-release":
			off.OlderRelease = true
		default:
			return off, usagef("--off: unknown mechanism %q; choose from %s", name, strings.Join(offNames, ", "))
		}
	}
	return off, nil
}

func (c *simCmd) run(_ context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("sim takes no arguments")
	}
	off, err := parseOff(c.off)
	if err != nil {
		return err
	}
	if c.schedules == 0 {
		c.schedules = 1000
	}
	if c.seed == 0 {
		c.seed = 1
	}
	if c.workers == 0 {
		c.workers = int64(runtime.GOMAXPROCS(0))
	}
	if c.trace == 0 {
		c.trace = 60
	}
	if os.Getenv("GOGC") == "" {
		// The schedules allocate fast and keep little: a larger heap target spends a fifth less time
		// collecting, for some tens of megabytes per worker. GOGC, when set, is taken as it is.
		debug.SetGCPercent(400)
	}
	stopAfter := 1
	if c.all {
		stopAfter = 0
	}
	sum := sim.Explore(uint64(c.seed), int(c.schedules), int(c.workers), stopAfter, off)
	for _, v := range sum.Violations {
		fmt.Fprintln(m.Stdout, v.Report(int(c.trace)))
	}
	fmt.Fprintf(m.Stdout, "%d schedules in %s (%.0f a second), %d violations\n", sum.Schedules, sum.Elapsed.Round(1e6),
		float64(sum.Schedules)/sum.Elapsed.Seconds(), len(sum.Violations))
	for _, k := range sim.Kinds(sum.Events) {
		fmt.Fprintf(m.Stdout, "  %-26s %d\n", k, sum.Events[k])
	}
	seeds := make([]uint64, 0, len(sum.Violations))
	for _, v := range sum.Violations {
		seeds = append(seeds, v.Seed)
	}
	out, _ := json.Marshal(map[string]any{"schedules": sum.Schedules, "seconds": sum.Elapsed.Seconds(), "events": sum.Events,
		"violations": len(sum.Violations), "violating_seeds": seeds, "off": cliflag.SplitList(c.off)})
	fmt.Fprintln(m.Stdout, string(out))
	if len(sum.Violations) > 0 {
		return fmt.Errorf("%d of %d schedules broke an invariant; first seed %d", len(sum.Violations), sum.Schedules, sum.Violations[0].Seed)
	}
	return nil
}
