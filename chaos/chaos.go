// Package chaos shows, with figures, that ticketd never issues an ID twice under faults: SDK clients draw
// IDs through two ticketd replicas from a MariaDB ticket pair while a schedule of faults runs — a
// server SIGKILLed and restarted, injected latency, replies lost after the UPDATE committed, connection
// resets, a replica restarted — and every ID drawn is checked for duplicates and for parity.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/testservers"
	"github.com/ticketd/ticketd/schema"
)

// Config configures a run. The zero value of each field means its default.
type Config struct {
	// MySQL are the DSNs of ticket servers the run does not own, odd first; empty starts a throwaway
	// MariaDB pair in Dir. With MySQL set, KillCmd and StartCmd stop and start server i (sh -c, with
	// CHAOS_SERVER=a or b in the environment); without them no server is killed.
	MySQL             []string
	KillCmd, StartCmd string
	// Dir holds the throwaway servers' data; default a new temporary directory, removed afterwards.
	Dir string
	// Duration of the run. Default 60s.
	Duration time.Duration
	// Clients is the number of SDK clients, each with its own cache, as separate application instances
	// would have. Default 64.
	Clients int
	// MinIDs is how many IDs the run must draw; it fails otherwise. Default 1,000,000.
	MinIDs int64
	// Rate is the IDs per second all clients draw together. Default 1.5 × MinIDs / Duration.
	Rate float64
	// Logger receives the run's progress. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
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

// Summary is the run's result; its JSON is the last line `ticketd chaos` prints.
type Summary struct {
	IDs              int64 `json:"ids"`
	Duplicates       int64 `json:"duplicates"`
	ParityViolations int64 `json:"parity_violations"`
	// ServedWhileDegraded is the share of Next calls made while a fault was active that returned an ID.
	ServedWhileDegraded float64 `json:"served_while_degraded"`
	LongestStallMS      float64 `json:"longest_stall_ms"`
	// Blocks is how many blocks the ticket servers issued to the replicas; Faults the faults applied.
	Blocks int64    `json:"blocks"`
	Faults []string `json:"faults"`
	// NextErrors counts Next calls that returned an error; FailedAttempts the lease attempts on a ticket
	// server that failed (each retried elsewhere), Failovers how often a lease moved to the other server.
	NextErrors int64 `json:"next_errors"`
	// LostInFlightIDs are IDs whose lease committed on a server but whose answer never arrived: gaps.
	LostInFlightIDs int64   `json:"lost_in_flight_ids"`
	FailedAttempts  int64   `json:"failed_attempts"`
	Failovers       int64   `json:"failovers"`
	DurationS       float64 `json:"duration_s"`
}

// OK reports whether the run met its promise: no duplicate, no parity violation, enough IDs.
func (s Summary) OK(minIDs int64) error {
	var errs []error
	if s.Duplicates != 0 {
		errs = append(errs, fmt.Errorf("%d duplicate IDs", s.Duplicates))
	}
	if s.ParityViolations != 0 {
		errs = append(errs, fmt.Errorf("%d IDs outside the parity of the server that issued them", s.ParityViolations))
	}
	if s.IDs < minIDs {
		errs = append(errs, fmt.Errorf("only %d IDs drawn, below --min-ids %d", s.IDs, minIDs))
	}
	return errors.Join(errs...)
}

// Namespace is the namespace the run draws from.
const Namespace = "chaos"

// Run runs the clients and the fault schedule and checks every ID drawn.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg = cfg.withDefaults()
	log := cfg.Logger
	e := &env{cfg: cfg, log: log}
	defer e.close()
	if err := e.startServers(ctx); err != nil {
		return Summary{}, err
	}
	if err := e.startProxies(); err != nil {
		return Summary{}, err
	}
	for i := range 2 {
		if err := e.startReplica(ctx, i); err != nil {
			return Summary{}, err
		}
	}
	// Small blocks: the clients refill often, so the faults meet many leases.
	if _, err := e.replicas[0].pair.CreateNamespace(ctx, allocator.Namespace{Name: Namespace, BlockSize: 100, MaxBlockSize: 2000}); err != nil && !errors.Is(err, allocator.ErrExists) {
		return Summary{}, err
	}

	before, err := e.counters(ctx)
	if err != nil {
		return Summary{}, err
	}

	urls := []string{e.replicas[0].url, e.replicas[1].url}
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	clients := make([]*drawer, cfg.Clients)
	var wg sync.WaitGroup
	started := time.Now()
	for i := range clients {
		c, err := client.New(client.HTTP(urls...), Namespace, client.WithToken(adminToken),
			client.WithRequestTimeout(2*time.Second), client.WithMaxWait(15*time.Second),
			client.WithBackoff(20*time.Millisecond, time.Second))
		if err != nil {
			return Summary{}, err
		}
		clients[i] = &drawer{c: c, degraded: &e.degraded}
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients[i].draw(runCtx, cfg.Rate/float64(cfg.Clients))
		}()
	}
	faultsDone := make(chan []string, 1)
	go func() { faultsDone <- e.schedule(runCtx) }()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-progress.C:
			var n int64
			for _, d := range clients {
				n += d.count.Load()
			}
			log.Info("chaos: drawing", "ids", n, "elapsed", time.Since(started).Round(time.Second).String(), "degraded", e.degraded.Load())
		}
	}
	wg.Wait()
	faults := <-faultsDone
	for _, d := range clients {
		_ = d.c.Close()
	}
	sum := e.summarize(clients, faults, time.Since(started))
	after, err := e.counters(ctx)
	if err != nil {
		return sum, err
	}
	// IDs the servers' counters moved past but no lease returned: ranges taken by UPDATEs that
	// committed while their reply was lost. They are gaps, never issued.
	consumed := (after["a"] - before["a"] + after["b"] - before["b"]) / 2
	var recorded int64
	for _, b := range e.rec.blocks() {
		recorded += b.Size
	}
	sum.LostInFlightIDs = consumed - recorded
	return sum, nil
}

// counters reads each server's counter for the namespace.
func (e *env) counters(ctx context.Context) (map[string]int64, error) {
	for range 100 {
		for _, r := range e.replicas {
			if r == nil {
				continue
			}
			ns, err := r.pair.Namespace(ctx, Namespace)
			if err != nil {
				continue
			}
			out := map[string]int64{}
			for _, s := range ns.Servers {
				if s.Healthy {
					out[s.Server] = s.Next
				}
			}
			if len(out) == 2 {
				return out, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("chaos: could not read both servers' counters")
}

// drawer is one SDK client drawing at a steady rate.
type drawer struct {
	c        *client.Client
	degraded *atomic.Bool
	count    atomic.Int64

	ids                      []int64
	degradedCalls, degradeOK int64
	errors                   int64
	longest                  time.Duration
}

func (d *drawer) draw(ctx context.Context, rate float64) {
	const tick = 10 * time.Millisecond
	perTick := rate * tick.Seconds()
	t := time.NewTicker(tick)
	defer t.Stop()
	var owed float64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for owed += perTick; owed >= 1; owed-- {
			degraded := d.degraded.Load()
			start := time.Now()
			id, err := d.c.Next(ctx)
			took := time.Since(start)
			if ctx.Err() != nil {
				return // the run ended during the call: neither a success nor a failure
			}
			d.longest = max(d.longest, took)
			if degraded {
				d.degradedCalls++
			}
			if err != nil {
				d.errors++
				continue
			}
			if degraded {
				d.degradeOK++
			}
			d.ids = append(d.ids, id)
			d.count.Add(1)
		}
	}
}

// summarize checks every ID: sorted, no two equal; each inside a block the servers issued, with the
// parity of the server that issued it.
func (e *env) summarize(clients []*drawer, faults []string, took time.Duration) Summary {
	var all []int64
	s := Summary{Faults: faults, DurationS: took.Seconds()}
	var degraded, degradedOK int64
	var longest time.Duration
	for _, d := range clients {
		all = append(all, d.ids...)
		degraded += d.degradedCalls
		degradedOK += d.degradeOK
		s.NextErrors += d.errors
		longest = max(longest, d.longest)
	}
	s.IDs = int64(len(all))
	s.LongestStallMS = float64(longest.Microseconds()) / 1000
	s.ServedWhileDegraded = 1
	if degraded > 0 {
		s.ServedWhileDegraded = float64(degradedOK) / float64(degraded)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			s.Duplicates++
		}
	}
	blocks := e.rec.blocks()
	s.Blocks = int64(len(blocks))
	s.FailedAttempts, s.Failovers = e.attempts.failed.Load(), e.attempts.failovers.Load()
	wantParity := map[string]int64{"a": 1, "b": 0}
	for _, b := range blocks {
		if p, ok := wantParity[b.Server]; !ok || b.Start%2 != p || b.Step != 2 {
			s.ParityViolations += b.Size
		}
	}
	// Every ID must come from a block the servers issued: walk the sorted IDs against the sorted blocks
	// of each parity.
	for _, parity := range []int64{0, 1} {
		var bs []allocator.Block
		for _, b := range blocks {
			if b.Start%2 == parity {
				bs = append(bs, b)
			}
		}
		slices.SortFunc(bs, func(x, y allocator.Block) int { return compare(x.Start, y.Start) })
		j := 0
		for _, id := range all {
			if id%2 != parity {
				continue
			}
			for j < len(bs) && lastOf(bs[j]) < id {
				j++
			}
			if j == len(bs) || !bs[j].Contains(id) {
				s.ParityViolations++
			}
		}
	}
	return s
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func lastOf(b allocator.Block) int64 {
	l, _ := b.Last()
	return l
}

// startServers starts the throwaway pair, or checks the given one, and applies the schema.
func (e *env) startServers(ctx context.Context) error {
	if len(e.cfg.MySQL) > 0 {
		if len(e.cfg.MySQL) != 2 {
			return fmt.Errorf("chaos: --mysql needs the two servers of the pair, odd first")
		}
		e.dsns = e.cfg.MySQL
		for _, dsn := range e.dsns {
			if _, err := schemaMigrate(ctx, dsn); err != nil {
				return err
			}
		}
		return nil
	}
	dir := e.cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tkc")
		if err != nil {
			return err
		}
		dir, e.ownDir = d, d
	}
	pair, err := testservers.StartPair(ctx, dir)
	if err != nil {
		return fmt.Errorf("chaos: starting the MariaDB pair: %w", err)
	}
	e.owned = pair[:]
	for _, m := range e.owned {
		db, err := openDB(m.DSN(""))
		if err != nil {
			return err
		}
		_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS ticketd")
		db.Close()
		if err != nil {
			return err
		}
		e.dsns = append(e.dsns, m.DSN("ticketd"))
		if _, err := schemaMigrate(ctx, m.DSN("ticketd")); err != nil {
			return err
		}
	}
	e.log.Info("chaos: MariaDB pair up", "a", e.owned[0].Port, "b", e.owned[1].Port)
	return nil
}

func schemaMigrate(ctx context.Context, dsn string) ([]int, error) {
	db, err := openDB(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return schema.Migrate(ctx, db)
}

// kill and start server i (0 = a, 1 = b).
func (e *env) kill(i int) error {
	if e.owned != nil {
		return e.owned[i].Kill()
	}
	return e.runCmd(e.cfg.KillCmd, i)
}

func (e *env) start(ctx context.Context, i int) error {
	if e.owned != nil {
		return e.owned[i].Start(ctx)
	}
	return e.runCmd(e.cfg.StartCmd, i)
}

func (e *env) canKill() bool { return e.owned != nil || (e.cfg.KillCmd != "" && e.cfg.StartCmd != "") }

func (e *env) runCmd(cmd string, i int) error {
	c := exec.Command("sh", "-c", cmd)
	c.Env = append(os.Environ(), "CHAOS_SERVER="+string(rune('a'+i)))
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: %q for server %c: %w: %s", cmd, 'a'+i, err, out)
	}
	return nil
}
