package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/ticketd/ticketd/allocator"
	tmysql "github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testservers"
	"github.com/ticketd/ticketd/server"
)

const adminToken = "chaos-admin-token-0123456789"

// env is the run's world: servers, proxies, replicas.
type env struct {
	cfg    Config
	log    *slog.Logger
	dsns   []string
	owned  []*testservers.MariaDB
	ownDir string

	toxi *toxiproxy.ApiServer
	// proxies[r][i] sits between replica r and server i.
	proxies  [2][2]*toxiproxy.Proxy
	replicas [2]*replica
	rec      recorder
	attempts attempts
	degraded atomic.Bool
}

// attempts counts lease attempts on the ticket servers that failed, and failovers.
type attempts struct{ failed, failovers atomic.Int64 }

func (a *attempts) ObserveLease(_ string, _ time.Duration, err error) {
	if err != nil {
		a.failed.Add(1)
	}
}

func (a *attempts) ObserveFailover(string) { a.failovers.Add(1) }

// replica is one in-process ticketd: a Pair through its own proxies, and the HTTP server.
type replica struct {
	url    string
	addr   string
	pair   *tmysql.Pair
	srv    *server.Server
	cancel context.CancelFunc
	done   chan error
}

func openDB(dsn string) (*sql.DB, error) { return sql.Open("mysql", dsn) }

func (e *env) startProxies() error {
	e.toxi = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for r := range 2 {
		for i, dsn := range e.dsns {
			mc, err := mysql.ParseDSN(dsn)
			if err != nil {
				return err
			}
			port, err := testservers.FreePort()
			if err != nil {
				return err
			}
			p := toxiproxy.NewProxy(e.toxi, fmt.Sprintf("r%d-%c", r+1, 'a'+i), fmt.Sprintf("127.0.0.1:%d", port), mc.Addr)
			if err := p.Start(); err != nil {
				return fmt.Errorf("chaos: proxy to %s: %w", mc.Addr, err)
			}
			e.proxies[r][i] = p
		}
	}
	return nil
}

// proxiedDSN is dsn with its address replaced by the proxy's.
func proxiedDSN(dsn, addr string) (string, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	mc.Addr = addr
	return mc.FormatDSN(), nil
}

func (e *env) startReplica(ctx context.Context, r int) error {
	var dsns []string
	for i, dsn := range e.dsns {
		d, err := proxiedDSN(dsn, e.proxies[r][i].Listen)
		if err != nil {
			return err
		}
		dsns = append(dsns, d)
	}
	pair, err := tmysql.Open(ctx, tmysql.Config{DSNs: dsns, Names: []string{"a", "b"},
		AttemptTimeout: 700 * time.Millisecond, Timeout: 3 * time.Second, MaxBackoff: time.Second,
		Logger: e.log.With("replica", r+1), Observer: &e.attempts})
	if err != nil {
		return fmt.Errorf("chaos: replica %d: %w", r+1, err)
	}
	// Replica 1 serves from its segment cache; replica 2 leases every block from the servers, so that
	// the database faults meet many leases.
	srv, err := server.New(server.Config{Backend: e.rec.wrap(pair), Auth: server.Auth{Admin: adminToken},
		Cache:  server.CacheConfig{Disabled: r == 1, MinSegment: 2000, Target: time.Second},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
	if err != nil {
		pair.Close()
		return err
	}
	addr := "127.0.0.1:0"
	if old := e.replicas[r]; old != nil {
		addr = old.addr
	}
	var ln net.Listener
	for range 50 { // the old listener's port may take a moment to free
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		srv.Close()
		pair.Close()
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	rep := &replica{addr: ln.Addr().String(), url: "http://" + ln.Addr().String(), pair: pair, srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { rep.done <- srv.Serve(sctx, ln) }()
	e.replicas[r] = rep
	return nil
}

func (e *env) stopReplica(r int) {
	rep := e.replicas[r]
	if rep == nil {
		return
	}
	rep.cancel()
	<-rep.done
	rep.srv.Close()
	rep.pair.Close()
}

func (e *env) close() {
	for r := range 2 {
		e.stopReplica(r)
		e.replicas[r] = nil
	}
	for r := range 2 {
		for i := range 2 {
			if p := e.proxies[r][i]; p != nil {
				p.Stop()
			}
		}
	}
	for _, m := range e.owned {
		if m != nil {
			_ = m.Kill()
		}
	}
	if e.ownDir != "" {
		_ = os.RemoveAll(e.ownDir)
	}
}

// recorder wraps each replica's pair and records every block the ticket servers issue, so that every
// ID drawn can be traced to a block and its server's parity.
type recorder struct {
	mu  sync.Mutex
	all []allocator.Block
}

func (r *recorder) add(b allocator.Block, err error) (allocator.Block, error) {
	if err == nil {
		r.mu.Lock()
		r.all = append(r.all, b)
		r.mu.Unlock()
	}
	return b, err
}

func (r *recorder) blocks() []allocator.Block {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]allocator.Block(nil), r.all...)
}

func (r *recorder) wrap(p *tmysql.Pair) *recordingPair { return &recordingPair{Pair: p, rec: r} }

// recordingPair is a *mysql.Pair whose leases are recorded.
type recordingPair struct {
	*tmysql.Pair
	rec *recorder
}

var (
	_ allocator.Backend        = (*recordingPair)(nil)
	_ server.PreferLeaser      = (*recordingPair)(nil)
	_ allocator.HealthReporter = (*recordingPair)(nil)
)

func (p *recordingPair) Lease(ctx context.Context, ns string, size int64) (allocator.Block, error) {
	return p.rec.add(p.Pair.Lease(ctx, ns, size))
}

func (p *recordingPair) LeaseFrom(ctx context.Context, ns string, size int64, prefer string) (allocator.Block, error) {
	return p.rec.add(p.Pair.LeaseFrom(ctx, ns, size, prefer))
}

// toxic adds a toxic to a proxy; remove takes it away.
func toxic(p *toxiproxy.Proxy, name, typ, stream string, attrs string) error {
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	_, err := p.Toxics.AddToxicJson(strings.NewReader(js))
	return err
}

func removeToxic(p *toxiproxy.Proxy, name string) {
	_ = p.Toxics.RemoveToxic(context.Background(), name)
}
