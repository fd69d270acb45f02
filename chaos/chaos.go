// Package chaos shows, with figures, that ticketd never issues an ID twice under faults: for each
// backend, SDK clients draw IDs through two ticketd replicas while a schedule of faults runs — servers
// killed, the network degraded, a replica restarted, and what operators do to ticket servers (backups
// restored into them, settings changed under them, a start advanced while one is down) — and every ID
// drawn is checked for duplicates, for parity and against the blocks the servers issued.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The backends a run can put under faults.
const (
	// BackendMySQL is a MariaDB ticket pair (odd/even).
	BackendMySQL = "mysql"
	// BackendRedis is two Redis instances (odd/even).
	BackendRedis = "redis"
	// BackendGalera is a 3-node MariaDB Galera cluster (offsets 1, 2, 3 of 4). Not in the default run.
	BackendGalera = "galera"
)

// Backends are the backend names Config.Backends accepts.
var Backends = []string{BackendMySQL, BackendRedis, BackendGalera}

// DefaultBackends run when Config.Backends is empty.
var DefaultBackends = []string{BackendMySQL, BackendRedis}

// Config configures a run. The zero value of each field means its default.
type Config struct {
	// Backends names the backends to run, each as a world of its own with its servers, two replicas,
	// clients and checks, all at once. Default: DefaultBackends.
	Backends []string
	// MySQL are the DSNs of ticket servers the run does not own, odd first; empty starts a throwaway
	// MariaDB pair in Dir. With MySQL set, KillCmd and StartCmd stop and start server i (sh -c, with
	// CHAOS_SERVER=a or b in the environment); without them no server is killed. The operator faults
	// that restore backups or change settings need servers the run owns: with MySQL set they are left
	// out.
	MySQL             []string
	KillCmd, StartCmd string
	// Dir holds the throwaway servers' data; default a new temporary directory, removed afterwards.
	Dir string
	// Duration of the run. Default 60s.
	Duration time.Duration
	// Clients is the number of SDK clients of each backend, each with its own cache, as separate
	// application instances would have. Default 64.
	Clients int
	// MinIDs is how many IDs the run must draw from each backend; it fails otherwise. Default 1,000,000.
	MinIDs int64
	// Rate is the IDs per second the clients of one backend draw together. Default 1.5 × MinIDs / Duration.
	Rate float64
	// Logger receives the run's progress. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if len(c.Backends) == 0 {
		c.Backends = slices.Clone(DefaultBackends)
	}
	if c.Duration <= 0 {
		c.Duration = 60 * time.Second
	}
	if c.Clients <= 0 {
		c.Clients = 64
	}
	if c.MinIDs <= 0 {
		c.MinIDs = 1_000_000
	}
	if c.Rate <= 0 {
		c.Rate = 1.5 * float64(c.MinIDs) / c.Duration.Seconds()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	seen := map[string]bool{}
	for _, b := range c.Backends {
		if !slices.Contains(Backends, b) {
			return fmt.Errorf("chaos: unknown backend %q; the backends are %v", b, Backends)
		}
		if seen[b] {
			return fmt.Errorf("chaos: backend %q is named twice", b)
		}
		seen[b] = true
	}
	if len(c.MySQL) > 0 && !seen[BackendMySQL] {
		return fmt.Errorf("chaos: MariaDB servers are given but the %s backend is not run", BackendMySQL)
	}
	return nil
}

// Figures are what a run found and measured, for one backend or added up over all.
type Figures struct {
	IDs        int64 `json:"ids"`
	Duplicates int64 `json:"duplicates"`
	// ReissuedIDs counts IDs that lie in two blocks the ticket servers issued, drawn or not: a block
	// leased twice is a duplicate even when the run drew only one of its copies.
	ReissuedIDs int64 `json:"reissued_ids"`
	// ReissuedFirst names the first two blocks found to share IDs, and when their leases began.
	ReissuedFirst    string `json:"reissued_first,omitempty"`
	ParityViolations int64  `json:"parity_violations"`
	// StartViolations counts blocks that started below a namespace's start although their lease began
	// after the start was advanced.
	StartViolations int64 `json:"start_violations"`
	// IDsAboveMaxID counts IDs, drawn or not, of blocks that lie above the namespace's ceiling (max_id)
	// in force when their lease began (see ceiling).
	IDsAboveMaxID int64 `json:"ids_above_max_id"`
	// ServedWhileDegraded is the share of Next calls made while a fault was active that returned an ID.
	ServedWhileDegraded float64 `json:"served_while_degraded"`
	// LongestStallMS is the longest a Next call took, and LongestStallDuring the fault that was active
	// when it began ("between faults" when none was), over every call but those that began during an
	// outage (see FaultResult.Outage): while a server could issue, no caller should wait for long.
	LongestStallMS     float64 `json:"longest_stall_ms"`
	LongestStallDuring string  `json:"longest_stall_during"`
	// LongestStallAfter is, for a longest stall between faults, the fault that had ended last when the
	// call began and how long before.
	LongestStallAfter string `json:"longest_stall_after,omitempty"`
	// LongestOutageStallMS is the longest Next call that began during an outage: it lasts about as long
	// as the outage, whose end callers can only wait for.
	LongestOutageStallMS float64 `json:"longest_outage_stall_ms"`
	// ExhaustedWaits counts the calls of the ceiling namespace, once drawn up to its ceiling on every
	// server, that waited for a server out of rotation and returned unavailable (no server can issue
	// its IDs; one that is out may hold none either, and the SDK waits for it); LongestExhaustedWaitMS
	// is the longest. They are neither stalls nor errors.
	ExhaustedWaits         int64   `json:"exhausted_waits"`
	LongestExhaustedWaitMS float64 `json:"longest_exhausted_wait_ms"`
	// Blocks is how many blocks the ticket servers issued to the replicas.
	Blocks int64 `json:"blocks"`
	// NextErrors counts Next calls that returned an error; FailedAttempts the lease attempts on a ticket
	// server that failed (each retried elsewhere), Failovers how often a lease moved to the other server.
	NextErrors int64 `json:"next_errors"`
	// LostInFlightIDs are IDs whose lease committed on a server but whose answer never arrived: gaps.
	// The counters an operator moved (a repair, a start advance) are left out.
	LostInFlightIDs int64 `json:"lost_in_flight_ids"`
	FailedAttempts  int64 `json:"failed_attempts"`
	Failovers       int64 `json:"failovers"`

	degradedCalls, degradedOK int64 // behind ServedWhileDegraded, so that figures add up
}

// add adds o to f.
func (f *Figures) add(o Figures) {
	f.IDs += o.IDs
	f.Duplicates += o.Duplicates
	f.ReissuedIDs += o.ReissuedIDs
	if f.ReissuedFirst == "" {
		f.ReissuedFirst = o.ReissuedFirst
	}
	f.ParityViolations += o.ParityViolations
	f.StartViolations += o.StartViolations
	f.IDsAboveMaxID += o.IDsAboveMaxID
	if o.LongestStallMS > f.LongestStallMS || f.LongestStallMS == 0 && f.LongestStallDuring == "" {
		f.LongestStallMS, f.LongestStallDuring, f.LongestStallAfter = o.LongestStallMS, o.LongestStallDuring, o.LongestStallAfter
	}
	f.LongestOutageStallMS = max(f.LongestOutageStallMS, o.LongestOutageStallMS)
	f.ExhaustedWaits += o.ExhaustedWaits
	f.LongestExhaustedWaitMS = max(f.LongestExhaustedWaitMS, o.LongestExhaustedWaitMS)
	f.Blocks += o.Blocks
	f.NextErrors += o.NextErrors
	f.LostInFlightIDs += o.LostInFlightIDs
	f.FailedAttempts += o.FailedAttempts
	f.Failovers += o.Failovers
	f.degradedCalls += o.degradedCalls
	f.degradedOK += o.degradedOK
	f.ServedWhileDegraded = 1
	if f.degradedCalls > 0 {
		f.ServedWhileDegraded = float64(f.degradedOK) / float64(f.degradedCalls)
	}
}

// BackendFigures are one backend's figures.
type BackendFigures struct {
	Backend string `json:"backend"`
	Figures
}

// What a fault must do to a ticket server (FaultResult.Expect).
const (
	// ExpectFenced: the fault takes a server back in time; every replica must fence it.
	ExpectFenced = "fenced"
	// ExpectRefused: the fault misconfigures a server; a replica that checks it must refuse it.
	ExpectRefused = "refused"
	// ExpectStart: a namespace's start is advanced while a server is down; every block leased after the
	// change, the returned server's included, must start at or above it.
	ExpectStart = "start"
	// ExpectHealed: a server loses its data and its cluster gives it back (a Galera state transfer): no
	// replica may fence or refuse it, and it must serve again without a repair.
	ExpectHealed = "healed"
	// ExpectCeiling: a namespace's max_id is lowered while a server is out of the admin's reach, which
	// must be refused as unavailable and change nothing, then with every server in reach; the
	// namespace is then drawn up to the ceiling, and no block leased after the lowering may pass it
	// (ids_above_max_id).
	ExpectCeiling = "ceiling"
)

// FaultResult is one fault of the schedule and what came of it.
type FaultResult struct {
	Backend string `json:"backend"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
	// Expect is what the fault must do (ExpectFenced, ExpectRefused, ExpectStart, ExpectHealed,
	// ExpectCeiling); empty when the replicas only have to ride it out.
	Expect string `json:"expect,omitempty"`
	// Outage is whether the fault takes every server out by design while it lasts (a setting that
	// could make them issue duplicates, on all of them): no ID may be issued until it is reverted.
	Outage bool `json:"outage,omitempty"`
	// FencedOrRefused is whether a server was seen fenced or refused while the fault lasted; for
	// ExpectCeiling, whether the lowering the cut-off server could not take was refused and changed
	// nothing.
	FencedOrRefused bool `json:"fenced_or_refused"`
	// LongestStallMS is the longest Next call that began while the fault was being applied or active.
	LongestStallMS float64 `json:"longest_stall_ms"`
	// Checked counts, for ExpectStart, the blocks the returned server issued after the start was
	// advanced and that were checked against it; for ExpectCeiling, the blocks leased after the
	// lowering was in force, each checked against it.
	Checked int64  `json:"checked,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Error is why the fault could not be applied or reverted.
	Error string `json:"error,omitempty"`
}

// problem says why the fault fails the run: a fault that must do something was not applied, could not
// be reverted, or went unnoticed. Empty when it did what it must, or when it must do nothing.
func (f FaultResult) problem() string {
	switch {
	case f.Expect == "":
		return ""
	case f.Error != "":
		return "failed: " + f.Error
	case !f.Applied:
		return "was not applied (the run ended first; give it more time)"
	case (f.Expect == ExpectFenced || f.Expect == ExpectRefused) && !f.FencedOrRefused:
		return "went unnoticed: no replica reported the server " + f.Expect
	case f.Expect == ExpectStart && f.Checked == 0:
		return "was not exercised: the server that was down issued no block after its return"
	case f.Expect == ExpectHealed && f.FencedOrRefused:
		return "was fenced or refused: a server its cluster rebuilt must need no repair"
	case f.Expect == ExpectHealed && f.Checked == 0:
		return "was not exercised: the rebuilt server issued no block after it rejoined"
	case f.Expect == ExpectCeiling && !f.FencedOrRefused:
		return "went unnoticed: the lowering that a server could not take was not refused as unavailable, or changed the ceiling"
	case f.Expect == ExpectCeiling && f.Checked == 0:
		return "was not exercised: no block was leased after the ceiling was lowered"
	}
	return ""
}

// Summary is the run's result; its JSON is the last line `ticketd-bench chaos` prints. The figures at its top
// add up those of Backends; the longest stall is the longest of any.
type Summary struct {
	Figures
	Faults    []FaultResult    `json:"faults"`
	Backends  []BackendFigures `json:"backends"`
	DurationS float64          `json:"duration_s"`
}

// OK reports whether the run met its promise: no duplicate, no parity or start violation, no ID above
// a ceiling in force, every fault that must fence or refuse a server did, and enough IDs from each
// backend.
func (s Summary) OK(minIDs int64) error {
	var errs []error
	if s.Duplicates != 0 {
		errs = append(errs, fmt.Errorf("%d duplicate IDs", s.Duplicates))
	}
	if s.ReissuedIDs != 0 {
		errs = append(errs, fmt.Errorf("%d IDs issued in two blocks, first %s", s.ReissuedIDs, s.ReissuedFirst))
	}
	if s.ParityViolations != 0 {
		errs = append(errs, fmt.Errorf("%d IDs outside the parity of the server that issued them", s.ParityViolations))
	}
	if s.StartViolations != 0 {
		errs = append(errs, fmt.Errorf("%d blocks below the namespace's start, leased after it was advanced", s.StartViolations))
	}
	if s.IDsAboveMaxID != 0 {
		errs = append(errs, fmt.Errorf("%d IDs above the namespace's max_id in force when their lease began", s.IDsAboveMaxID))
	}
	for _, f := range s.Faults {
		if p := f.problem(); p != "" {
			errs = append(errs, fmt.Errorf("%s: %q %s", f.Backend, f.Name, p))
		}
	}
	for _, b := range s.Backends {
		if b.IDs < minIDs {
			errs = append(errs, fmt.Errorf("%s: only %d IDs drawn, below --min-ids %d", b.Backend, b.IDs, minIDs))
		}
	}
	return errors.Join(errs...)
}

// Namespace is the namespace the run draws from (see also CeilingNamespace).
const Namespace = "chaos"

// Run runs each backend's clients and fault schedule at once and checks every ID drawn.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Summary{}, err
	}
	worlds := make([]*world, len(cfg.Backends))
	for i, b := range cfg.Backends {
		worlds[i] = newWorld(cfg, b)
	}
	defer func() {
		for _, w := range worlds {
			w.close()
		}
	}()
	// Servers take seconds to install and start: every backend's at once.
	errs := make([]error, len(worlds))
	var wg sync.WaitGroup
	for i, w := range worlds {
		wg.Go(func() { errs[i] = w.prepare(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Summary{}, err
	}

	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	started := time.Now()
	for i, w := range worlds {
		wg.Go(func() { errs[i] = w.run(runCtx) })
	}
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-progress.C:
			elapsed := time.Since(started)
			for _, w := range worlds {
				cfg.Logger.Info("chaos: drawing", "backend", w.backend, "stage", w.stageName(), "ids", w.drawn(),
					"elapsed", elapsed.Round(time.Second).String(), "left", max(cfg.Duration-elapsed, 0).Round(time.Second).String())
			}
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Summary{}, err
	}
	sum := Summary{DurationS: time.Since(started).Seconds()}
	sum.ServedWhileDegraded = 1
	for _, w := range worlds {
		fig, faults, err := w.summarize(ctx)
		sum.Figures.add(fig)
		sum.Backends = append(sum.Backends, BackendFigures{Backend: w.backend, Figures: fig})
		sum.Faults = append(sum.Faults, faults...)
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}
