// Package bench measures ticketd against the coordination-free ID schemes: how fast each scheme makes
// IDs, what each key does to an InnoDB B-tree, and how the ticket servers hold up under load.
// Every figure in a report comes from the run that wrote it.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// ErrInvalidOptions means the options are out of range; nothing was run.
var ErrInvalidOptions = errors.New("bench: invalid options")

// Options configure a run. The zero value of each field means its default.
type Options struct {
	// Duration is how long each timed measurement runs. Default 2s; Quick makes it 200ms.
	Duration time.Duration
	// Clients are the concurrency levels of the closed-loop load cases. Default 1, 4, 16, 64; Quick 1, 4.
	Clients []int
	// Rows is how many rows each B-tree table gets. Default 1,000,000; Quick 20,000.
	Rows int
	// Batch is how many rows one INSERT carries, the same for every table. Default 1,000.
	Batch int
	// MySQL are the DSNs of the ticket server pair. A DSN without a database makes the run create a
	// fresh database (ticketd_bench_…) on each server and drop it at the end. A database a DSN names
	// must be empty or one an earlier run made its own (it holds the table ticketd_bench), unless
	// ForceDatabase: the run creates namespaces there and moves their counters.
	MySQL []string
	// ForceDatabase lets the run use a database the DSNs name that holds other tables: ticketd's own
	// (a live ticket database) or any other.
	ForceDatabase bool
	// Redis is the address of a Redis server for the Redis backend's load case; empty skips it.
	Redis string
	// Galera are the DSNs of the nodes of a MariaDB Galera cluster, for the load case that compares
	// the cluster with the pair; empty skips it. Without a database name a fresh one is made (once: it
	// replicates) and dropped at the end.
	Galera []string
	// Quick makes every default small: a smoke run of seconds.
	Quick bool
	// Command is the command line the report shows, to reproduce the run.
	Command string
	// Progress receives the progress line: the stage, the step and the time left. nil means none.
	Progress io.Writer
	// LiveProgress rewrites one progress line in place (carriage returns), for a terminal; otherwise
	// Progress gets a line a step.
	LiveProgress bool

	line *progressLine // Progress, as Run plans it
}

func (o Options) withDefaults() Options {
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
		if o.Quick {
			o.Duration = 200 * time.Millisecond
		}
	}
	if len(o.Clients) == 0 {
		o.Clients = []int{1, 4, 16, 64}
		if o.Quick {
			o.Clients = []int{1, 4}
		}
	}
	if o.Rows == 0 {
		o.Rows = 1_000_000
		if o.Quick {
			o.Rows = 20_000
		}
	}
	if o.Batch == 0 {
		o.Batch = 1000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Duration < 10*time.Millisecond || o.Duration > time.Hour:
		return fmt.Errorf("%w: duration %s, want 10ms to 1h", ErrInvalidOptions, o.Duration)
	case o.Rows < 100 || o.Rows > 100_000_000:
		return fmt.Errorf("%w: rows %d, want 100 to 100,000,000", ErrInvalidOptions, o.Rows)
	case o.Batch < 1 || o.Batch > 10_000:
		return fmt.Errorf("%w: batch %d, want 1 to 10,000", ErrInvalidOptions, o.Batch)
	}
	for _, c := range o.Clients {
		if c < 1 || c > 4096 {
			return fmt.Errorf("%w: clients %d, want 1 to 4096", ErrInvalidOptions, c)
		}
	}
	return nil
}

// Report is everything one run measured.
type Report struct {
	Command string    `json:"command"`
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	// Duration is the length of each timed measurement.
	Duration string       `json:"duration"`
	Gen      *GenReport   `json:"gen,omitempty"`
	BTree    *BTreeReport `json:"btree,omitempty"`
	Load     *LoadReport  `json:"load,omitempty"`
	// Charts are the PNG files written beside the report, relative to its directory.
	Charts []string `json:"charts,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu,omitempty"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	// LoadAverage is /proc/loadavg's 1, 5 and 15 minute figures when the run began: other work on
	// the machine shows in every number.
	LoadAverage string `json:"load_average,omitempty"`
	MariaDB     string `json:"mariadb,omitempty"`
	Redis       string `json:"redis,omitempty"`
}

func thisMachine() Machine {
	return Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPU: cpuModel(),
		GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, LoadAverage: loadAverage()}
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Run runs the named parts ("gen", "btree", "load"; in that order whatever order they are named in)
// and returns their report. A part that cannot run (no --mysql for btree) fails the run.
func Run(ctx context.Context, opts Options, parts ...string) (*Report, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, p := range parts {
		switch p {
		case "gen", "btree", "load":
			want[p] = true
		default:
			return nil, fmt.Errorf("%w: unknown part %q (want gen, btree or load)", ErrInvalidOptions, p)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("%w: nothing to run", ErrInvalidOptions)
	}
	if (want["btree"] || want["load"]) && len(opts.MySQL) == 0 {
		return nil, fmt.Errorf("%w: btree and load need the ticket server pair (--mysql DSN,DSN)", ErrInvalidOptions)
	}
	rep := &Report{Command: opts.Command, Date: time.Now().UTC().Truncate(time.Second), Machine: thisMachine(),
		Duration: opts.Duration.String()}
	var env *mysqlEnv
	if len(opts.MySQL) > 0 {
		var err error
		if env, err = openMySQL(ctx, opts); err != nil {
			return nil, err
		}
		defer env.Close()
		rep.Machine.MariaDB = env.version
	}
	// Every step is known before the first runs, so that the progress line can say how long is left.
	var cases []loadCase
	var stages []stagePlan
	if want["gen"] {
		stages = append(stages, stagePlan{"gen", len(genSchemes(opts, env)), genStepPlan * opts.Duration})
	}
	if want["btree"] {
		stages = append(stages, stagePlan{"btree", len(btreeKeys(env)),
			time.Duration(float64(opts.Rows) / btreePlannedRowsPerSecond * float64(time.Second))})
	}
	if want["load"] {
		var skipped []string
		var err error
		if cases, skipped, err = loadCases(ctx, opts, env, &rep.Machine); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		rep.Load = &LoadReport{Skipped: skipped}
		stages = append(stages, stagePlan{"load", len(cases) * (len(opts.Clients) + 1), opts.Duration + loadStepOverhead})
	}
	opts.line = newProgressLine(opts.Progress, opts.LiveProgress, time.Now, stages)
	failed := true
	defer func() { opts.line.finish(failed) }()
	if want["gen"] {
		g, err := runGen(ctx, opts, env)
		if err != nil {
			return nil, fmt.Errorf("gen: %w", err)
		}
		rep.Gen = g
	}
	if want["btree"] {
		b, err := runBTree(ctx, opts, env)
		if err != nil {
			return nil, fmt.Errorf("btree: %w", err)
		}
		rep.BTree = b
	}
	if want["load"] {
		if err := runLoad(ctx, opts, env, cases, rep.Load); err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
	}
	failed = false
	return rep, nil
}

// What a step is planned to take, for the time left before the run has shown its own pace: a scheme
// is timed on one goroutine and on all, and its IDs collected twice, each for at most the duration; a
// B-tree table's inserts and rebuild go at about this many rows a second on the 2-core reference
// machine; a load measurement runs for the duration, after the servers settle.
const (
	genStepPlan               = 4
	btreePlannedRowsPerSecond = 50_000
	loadStepOverhead          = 500 * time.Millisecond
)
