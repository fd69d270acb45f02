package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/ticketd/ticketd/server"
)

// replica is one in-process ticketd: a backend through its own proxies, and the HTTP server.
type replica struct {
	backend leaser // unrecorded: for health, repairs and namespace changes
	srv     *server.Server
	cancel  context.CancelFunc
	done    chan error
}

// startReplica opens replica r's backend on the servers in the given order, each through the replica's
// own proxy, and serves it over HTTP at the replica's address.
func (w *world) startReplica(ctx context.Context, r int, order []int) error {
	ends := make([]endpoint, len(order))
	for k, i := range order {
		ends[k] = endpoint{index: i, addr: w.proxies[r][i].Listen}
	}
	b, err := w.servers.open(ctx, ends, &w.attempts, w.log.With("replica", r+1))
	if err != nil {
		return fmt.Errorf("chaos: replica %d: %w", r+1, err)
	}
	w.mu.Lock()
	for k, name := range b.Servers() {
		w.index[name] = order[k]
	}
	w.mu.Unlock()
	// Replica 1 serves from its segment cache; replica 2 leases every block from the servers, so that
	// the faults meet many leases.
	srv, err := server.New(server.Config{Backend: w.rec.wrap(b), Auth: server.Auth{Admin: adminToken},
		Cache:  server.CacheConfig{Disabled: r == 1, MinSegment: 2000, Target: time.Second},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownTimeout: 5 * time.Second})
	if err != nil {
		b.Close()
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	rep := &replica{backend: b, srv: srv, cancel: cancel, done: make(chan error, 1)}
	ln := w.ports[r].attach()
	go func() { rep.done <- srv.Serve(sctx, ln) }()
	w.mu.Lock()
	w.replicas[r] = rep
	w.mu.Unlock()
	return nil
}

func (w *world) stopReplica(r int) {
	w.mu.Lock()
	rep := w.replicas[r]
	w.replicas[r] = nil
	w.mu.Unlock()
	if rep == nil {
		return
	}
	rep.cancel()
	<-rep.done
	rep.srv.Close()
	rep.backend.Close()
}

// port is a replica's address, kept across the replica's restarts so that no other process can take
// it meanwhile: it hands connections to the replica that runs, and while none does it closes each at
// once, as an address with nothing behind it refuses it. Safe for concurrent use.
type port struct {
	ln net.Listener

	mu  sync.Mutex
	cur *portListener // the running replica's listener; nil, or closed, while none runs
}

func openPort() (*port, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &port{ln: ln}
	go p.accept()
	return p, nil
}

func (p *port) url() string { return "http://" + p.ln.Addr().String() }

func (p *port) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		cur := p.cur
		p.mu.Unlock()
		if cur == nil {
			_ = c.Close()
			continue
		}
		select {
		case cur.conns <- c:
		case <-cur.closed:
			_ = c.Close()
		}
	}
}

// attach returns the listener a newly started replica serves on.
func (p *port) attach() net.Listener {
	l := &portListener{addr: p.ln.Addr(), conns: make(chan net.Conn), closed: make(chan struct{})}
	p.mu.Lock()
	p.cur = l
	p.mu.Unlock()
	return l
}

func (p *port) close() { _ = p.ln.Close() }

// portListener is one replica's view of its port; closing it (the replica's shutdown does) hands the
// port back to refusing.
type portListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *portListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *portListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *portListener) Addr() net.Addr { return l.addr }
