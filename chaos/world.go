package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/testservers"
	"github.com/ticketd/ticketd/server"
)

const adminToken = "chaos-admin-token-0123456789"

// ticketServers is one backend's two ticket servers as a run drives them, and how a replica opens the
// backend on them.
type ticketServers interface {
	// start starts the servers (or checks the given ones) and applies any schema.
	start(ctx context.Context) error
	// addrs are the servers' host:port, server a first.
	addrs() []string
	// layout is how the servers split the IDs.
	layout() layout
	// open opens the backend a replica serves from, on the servers in the order of ends, each reached
	// at its end's address (the replica's proxy).
	open(ctx context.Context, ends []endpoint, obs allocator.Observer, log *slog.Logger) (leaser, error)
	// kill stops server i at once, as a crash would; restart starts it again on its data.
	kill(i int) error
	restart(ctx context.Context, i int) error
	canKill() bool
	// faults are the backend's own faults, scheduled with those every backend gets.
	faults(w *world) []fault
	close()
}

// endpoint is where a replica reaches server index.
type endpoint struct {
	index int
	addr  string
}

// leaser is what a replica needs of a backend: leases, also from a chosen server, namespaces, health and
// the servers' names in configuration order. *mysql.Store and *redis.Store are leasers.
type leaser interface {
	allocator.Backend
	allocator.HealthReporter
	server.PreferLeaser
	Servers() []string
}

// world is one backend under faults: its ticket servers, the proxies between them and the two replicas,
// the replicas, and everything the run records of them.
type world struct {
	cfg     Config
	log     *slog.Logger
	backend string
	servers ticketServers

	layout layout

	toxi *toxiproxy.ApiServer
	// proxies[r][i] sits between replica r and server i.
	proxies  [2][]*toxiproxy.Proxy
	rec      recorder
	attempts attempts
	degraded atomic.Bool
	stage    atomic.Pointer[string]   // the fault being applied or active; nil between faults
	lastOver atomic.Pointer[faultEnd] // the fault that ended last, once one has

	ports  [2]*port      // each replica's address, kept across its restarts
	before map[int]int64 // each server's counter when the clients started

	mu       sync.Mutex
	replicas [2]*replica    // nil while stopped
	index    map[string]int // the servers' names, as the replicas' backends give them, to their index
	// resets are the counter values an operator's action moved each server's counter to (a repair, a
	// start advance); advances are the start advances.
	resets    map[int][]int64
	advances  []advance
	ceilings  ceilings  // the ceiling namespace's, in the order they came in force
	clients   []*drawer // the run's namespace's clients, then the ceiling namespace's
	faultsRun []FaultResult
}

func newWorld(cfg Config, backend string) *world {
	w := &world{cfg: cfg, backend: backend, log: cfg.Logger.With("backend", backend), index: map[string]int{}, resets: map[int][]int64{}}
	switch backend {
	case BackendMySQL:
		w.servers = &mysqlServers{cfg: cfg, log: w.log}
	case BackendRedis:
		w.servers = &redisServers{cfg: cfg, log: w.log}
	case BackendGalera:
		w.servers = &galeraServers{cfg: cfg, log: w.log}
	}
	return w
}

// label names server i in fault names and details.
func label(i int) string { return string(rune('a' + i)) }

// prepare starts the servers, the proxies and both replicas, creates the namespace and reads the
// counters the run starts from.
func (w *world) prepare(ctx context.Context) error {
	if err := w.servers.start(ctx); err != nil {
		return err
	}
	w.layout = w.servers.layout()
	if err := w.startProxies(); err != nil {
		return err
	}
	for r := range 2 {
		p, err := openPort()
		if err != nil {
			return err
		}
		w.ports[r] = p
	}
	for r := range 2 {
		if err := w.startReplica(ctx, r, w.layout.indexes()); err != nil {
			return err
		}
	}
	// Small blocks: the clients refill often, so the faults meet many leases.
	if _, err := w.replica(0).backend.CreateNamespace(ctx, allocator.Namespace{Name: Namespace, BlockSize: 100, MaxBlockSize: 2000}); err != nil && !errors.Is(err, allocator.ErrExists) {
		return err
	}
	// The ceiling namespace starts each run at its first ceiling: a run on servers given to it finds
	// the one an earlier run lowered, and raises it back.
	b := w.replica(0).backend
	_, err := b.CreateNamespace(ctx, ceilingSettings(ceilingMaxID))
	if errors.Is(err, allocator.ErrExists) {
		_, err = b.UpdateNamespace(ctx, ceilingSettings(ceilingMaxID))
	}
	if err != nil {
		return fmt.Errorf("chaos: %s: %w", CeilingNamespace, err)
	}
	w.lowered(ceilingMaxID, time.Now())
	before, err := w.counters(ctx)
	if err != nil {
		return err
	}
	w.before = before
	return nil
}

// ceilingClients is how many clients draw from the ceiling namespace beside the cfg.Clients of the
// run's own.
func (c Config) ceilingClients() int { return max(1, c.Clients/ceilingClientsPer) }

// run draws IDs with the clients while the schedule runs, until ctx ends.
func (w *world) run(ctx context.Context) error {
	urls := []string{w.ports[0].url(), w.ports[1].url()}
	clients := make([]*drawer, w.cfg.Clients+w.cfg.ceilingClients())
	for i := range clients {
		ns := Namespace
		if i >= w.cfg.Clients {
			ns = CeilingNamespace
		}
		c, err := client.New(client.HTTP(urls...), ns, client.WithToken(adminToken),
			client.WithRequestTimeout(2*time.Second), client.WithMaxWait(15*time.Second),
			client.WithBackoff(20*time.Millisecond, time.Second))
		if err != nil {
			for _, d := range clients[:i] {
				_ = d.c.Close()
			}
			return err
		}
		clients[i] = &drawer{c: c, namespace: ns, degraded: &w.degraded, stage: &w.stage, lastOver: &w.lastOver}
	}
	w.mu.Lock()
	w.clients = clients
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range clients {
		rate := w.cfg.Rate / float64(w.cfg.Clients)
		if d.namespace == CeilingNamespace {
			rate = w.cfg.Rate * ceilingShare / float64(w.cfg.ceilingClients())
		}
		wg.Go(func() { d.draw(ctx, rate) })
	}
	faults := w.schedule(ctx)
	wg.Wait()
	for _, d := range clients {
		_ = d.c.Close()
	}
	w.mu.Lock()
	w.faultsRun = faults
	w.mu.Unlock()
	return nil
}

// drawn is how many IDs the clients have drawn so far.
func (w *world) drawn() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, d := range w.clients {
		n += d.count.Load()
	}
	return n
}

func (w *world) startProxies() error {
	w.toxi = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for r := range 2 {
		w.proxies[r] = make([]*toxiproxy.Proxy, len(w.servers.addrs()))
		for i, addr := range w.servers.addrs() {
			port, err := testservers.FreePort()
			if err != nil {
				return err
			}
			p := toxiproxy.NewProxy(w.toxi, fmt.Sprintf("%s-r%d-%s", w.backend, r+1, label(i)), fmt.Sprintf("127.0.0.1:%d", port), addr)
			if err := p.Start(); err != nil {
				return fmt.Errorf("chaos: proxy to %s: %w", addr, err)
			}
			w.proxies[r][i] = p
		}
	}
	return nil
}

// replica returns replica r, nil while it is stopped.
func (w *world) replica(r int) *replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replicas[r]
}

// running returns the replicas that run, by number.
func (w *world) running() map[int]*replica {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int]*replica{}
	for r, rep := range w.replicas {
		if rep != nil {
			out[r] = rep
		}
	}
	return out
}

func (w *world) close() {
	for r := range 2 {
		w.stopReplica(r)
		if w.ports[r] != nil {
			w.ports[r].close()
		}
	}
	for r := range 2 {
		for _, p := range w.proxies[r] {
			if p != nil {
				p.Stop()
			}
		}
	}
	w.servers.close()
}

// indexOf is the server a name given by a replica's backend stands for.
func (w *world) indexOf(name string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, ok := w.index[name]
	return i, ok
}

// health is server i as replica r sees it; ok is false when r is stopped.
func (w *world) health(r, i int) (allocator.ServerHealth, bool) {
	rep := w.replica(r)
	if rep == nil {
		return allocator.ServerHealth{}, false
	}
	for _, h := range rep.backend.Health() {
		if j, ok := w.indexOf(h.Name); ok && j == i {
			return h, true
		}
	}
	return allocator.ServerHealth{}, false
}

// refused reports whether a health says the server was refused for its settings.
func refused(h allocator.ServerHealth) bool {
	return !h.Healthy && strings.Contains(h.Error, allocator.ErrMisconfigured.Error())
}

// everywhere reports whether every running replica sees server i as cond wants.
func (w *world) everywhere(i int, cond func(allocator.ServerHealth) bool) bool {
	for r := range w.running() {
		if h, ok := w.health(r, i); !ok || !cond(h) {
			return false
		}
	}
	return true
}

// waitUntil polls cond until it holds or limit passes, and reports whether it held.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Bounds on what a fault waits for. A server back from a restart is in rotation within a probe
// interval of its replicas; a restored one is fenced by the next lease or water-mark round.
const (
	healthyWithin = 30 * time.Second
	fencedWithin  = 20 * time.Second
)

// backInRotation waits until every running replica has server i in rotation.
func (w *world) backInRotation(i int) error {
	if !waitUntil(healthyWithin, func() bool { return w.everywhere(i, func(h allocator.ServerHealth) bool { return h.Healthy }) }) {
		return fmt.Errorf("server %s not back in rotation in every replica within %s", label(i), healthyWithin)
	}
	return nil
}

// counters reads each server's counter for the namespace, from a replica that has both in rotation.
// When none does in time, the error says what the last read found: the read's error, or the state of
// each server out of rotation.
func (w *world) counters(ctx context.Context) (map[int]int64, error) {
	last := "no replica running"
	for range 300 {
		for _, rep := range w.running() {
			ns, err := rep.backend.Namespace(ctx, Namespace)
			if err != nil {
				last = err.Error()
				continue
			}
			out := map[int]int64{}
			var down []string
			for _, s := range ns.Servers {
				i, ok := w.indexOf(s.Server)
				switch {
				case ok && s.Healthy:
					out[i] = s.Next
				case ok:
					down = append(down, fmt.Sprintf("server %s: %s", label(i), s.Error))
				}
			}
			if len(out) == w.layout.servers {
				return out, nil
			}
			last = fmt.Sprintf("%d of %d servers in rotation (%s)", len(out), w.layout.servers, strings.Join(down, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("chaos: %s: could not read every server's counter: %s", w.backend, last)
}

// attempts counts lease attempts on the ticket servers that failed, and failovers.
type attempts struct{ failed, failovers atomic.Int64 }

func (a *attempts) ObserveLease(_ string, _ time.Duration, err error) {
	if err != nil {
		a.failed.Add(1)
	}
}

func (a *attempts) ObserveFailover(string) { a.failovers.Add(1) }

// drawer is one SDK client drawing from a namespace at a steady rate.
type drawer struct {
	c         *client.Client
	namespace string
	degraded  *atomic.Bool
	stage     *atomic.Pointer[string] // the world's: the fault active, nil between faults
	lastOver  *atomic.Pointer[faultEnd]
	count     atomic.Int64

	ids                      []int64
	degradedCalls, degradeOK int64
	errors                   int64
	exhausted                int64                     // calls of the ceiling namespace that found it exhausted
	exhaustedWaits           int64                     // and, once it had, the calls that waited for a server out of rotation
	longestExhaustedWait     time.Duration             // the longest of those
	longestBetween           time.Duration             // the longest call that began between faults
	longestBetweenBegan      time.Time                 // when it began
	longestBetweenAfter      *faultEnd                 // the fault that had ended last then (nil: none yet)
	longestIn                map[*string]time.Duration // the longest call that began while each fault was active
}

// faultEnd is a fault that ended (its revert done) and when.
type faultEnd struct {
	name string
	at   time.Time
}

// maxOwed is how far behind its rate a drawer may fall and still catch up: a goroutine the scheduler
// ran late, or a call that waited a moment, is made up for; a long stall is not (its calls would come
// as one burst).
const maxOwed = time.Second

// draw calls Next at rate until ctx ends. Calls are owed by the clock, not by the ticks seen: a tick
// missed while the goroutine waited for a CPU or a call does not lower the rate. The clock starts when
// the first call returns: that call waits for the client's first block (start-up), and the calls it
// would otherwise owe, made at once, would be a burst no steady caller makes.
func (d *drawer) draw(ctx context.Context, rate float64) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var made, calls int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int64(rate*time.Since(start).Seconds()) - made
		if limit := int64(rate * maxOwed.Seconds()); due > limit {
			made, due = made+due-limit, limit
		}
		for ; due > 0; due-- {
			made++
			calls++
			degraded, stage := d.degraded.Load(), d.stage.Load()
			begin := time.Now()
			id, err := d.c.Next(ctx)
			took := time.Since(begin)
			if ctx.Err() != nil {
				return // the run ended during the call: neither a success nor a failure
			}
			if calls == 1 { // the first call waits for the client's first block: start-up
				start, made, due = time.Now(), 0, 1
			}
			if err != nil && d.namespace == CeilingNamespace && errors.Is(err, client.ErrExhausted) {
				// The answer a namespace drawn up to its ceiling must give: no ID is awaited, so the
				// call is neither a stall nor a failure (the SDK asks every ticketd before it gives
				// this answer, and waits for one that is down).
				d.exhausted++
				continue
			}
			if err != nil && d.namespace == CeilingNamespace && d.exhausted > 0 && errors.Is(err, client.ErrUnavailable) {
				// Once drawn up to its ceiling on every server, the namespace has no ID any server can
				// issue; while one is out of rotation (fenced, say) ticketd cannot tell that it holds
				// none either, and the SDK waits for it (WithMaxWait) before it gives up. No ID is
				// awaited: neither a stall nor a failure, counted apart.
				d.exhaustedWaits++
				d.longestExhaustedWait = max(d.longestExhaustedWait, took)
				continue
			}
			if calls > 1 {
				if stage == nil && took > d.longestBetween {
					d.longestBetween, d.longestBetweenBegan, d.longestBetweenAfter = took, begin, d.lastOver.Load()
				}
				if stage != nil && took > d.longestIn[stage] {
					if d.longestIn == nil {
						d.longestIn = map[*string]time.Duration{}
					}
					d.longestIn[stage] = took
				}
			}
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

// recorded is a block a ticket server issued, and the epoch (see advance) and time its lease began in.
type recorded struct {
	allocator.Block
	epoch int64
	began time.Time
}

// recorder wraps each replica's backend and records every block the ticket servers issue, so that every
// ID drawn can be traced to a block and its server's parity. Safe for concurrent use.
type recorder struct {
	epoch atomic.Int64 // raised by each start advance

	mu  sync.Mutex
	all []recorded
}

func (r *recorder) lease(lease func() (allocator.Block, error)) (allocator.Block, error) {
	epoch, began := r.epoch.Load(), time.Now()
	b, err := lease()
	if err == nil {
		r.mu.Lock()
		r.all = append(r.all, recorded{Block: b, epoch: epoch, began: began})
		r.mu.Unlock()
	}
	return b, err
}

func (r *recorder) blocks() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.all...)
}

// highest is the highest ID of any block recorded from the run's namespace.
func (r *recorder) highest() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var h int64
	for _, b := range r.all {
		if b.Namespace == Namespace {
			h = max(h, lastOf(b.Block))
		}
	}
	return h
}

func (r *recorder) wrap(b leaser) *recordingBackend { return &recordingBackend{leaser: b, rec: r} }

// recordingBackend is a backend whose leases are recorded.
type recordingBackend struct {
	leaser
	rec *recorder
}

var (
	_ allocator.Backend        = (*recordingBackend)(nil)
	_ server.PreferLeaser      = (*recordingBackend)(nil)
	_ allocator.HealthReporter = (*recordingBackend)(nil)
)

func (p *recordingBackend) Lease(ctx context.Context, ns string, size int64) (allocator.Block, error) {
	return p.rec.lease(func() (allocator.Block, error) { return p.leaser.Lease(ctx, ns, size) })
}

func (p *recordingBackend) LeaseFrom(ctx context.Context, ns string, size int64, prefer string) (allocator.Block, error) {
	return p.rec.lease(func() (allocator.Block, error) { return p.leaser.LeaseFrom(ctx, ns, size, prefer) })
}

// stageName is what the world is doing now, for the progress line.
func (w *world) stageName() string {
	if s := w.stage.Load(); s != nil {
		return *s
	}
	return "between faults"
}
