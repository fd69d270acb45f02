// Package connlimit bounds the connections an HTTP server holds: in all, and per client address. It
// keeps idle keep-alive connections from taking every slot: near a bound, the oldest idle connection
// is closed to make room, and a request in flight is never cut off for it.
package connlimit

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"sync"

	"github.com/ticketd/ticketd/internal/clientip"
)

// Config bounds the connections of a Listener.
type Config struct {
	// Max is the connections open at once; past it, a new one waits to be accepted until one closes
	// (an idle one is closed for it). Required, at least 1.
	Max int
	// PerClient is the connections one client address (an IPv6 /64) may hold at once; a new one past
	// it closes that client's oldest idle connection, or is closed itself when none is idle. 0 means no
	// bound.
	PerClient int
	// OnRefused, when set, is called with the client address of each connection closed for PerClient.
	OnRefused func(client string)
}

// Listener is a net.Listener that keeps to a Config. Give its ConnState to the http.Server that serves
// it, so that it knows which connections are idle. Safe for concurrent use.
type Listener struct {
	net.Listener
	cfg        Config
	slots      chan struct{}
	becameIdle chan struct{} // poked when a connection becomes idle
	done       chan struct{}
	once       sync.Once

	mu      sync.Mutex
	clients map[string]int
	idle    *list.List              // of *conn, oldest idle first
	elems   map[*conn]*list.Element // conn → its place in idle
	high    int                     // open connections at which idle ones start to be closed
	open    int
}

// New wraps ln.
func New(ln net.Listener, cfg Config) *Listener {
	cfg.Max = max(1, cfg.Max)
	return &Listener{Listener: ln, cfg: cfg, slots: make(chan struct{}, cfg.Max), becameIdle: make(chan struct{}, 1), done: make(chan struct{}),
		clients: map[string]int{}, idle: list.New(), elems: map[*conn]*list.Element{},
		high: max(1, cfg.Max-cfg.Max/8)}
}

// Accept waits for a free slot (closing the oldest idle connection when there is none) and for a
// connection, and closes at once a connection past its client's bound.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if err := l.takeSlot(); err != nil {
			return nil, err
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		key := clientKey(c.RemoteAddr())
		if !l.admit(key) {
			_ = c.Close()
			<-l.slots
			if l.cfg.OnRefused != nil {
				l.cfg.OnRefused(key)
			}
			continue
		}
		return &conn{Conn: c, l: l, key: key}, nil
	}
}

// takeSlot takes a free slot; while there is none, it closes the oldest idle connection, or waits
// for a connection to close or to become idle.
func (l *Listener) takeSlot() error {
	for {
		select {
		case l.slots <- struct{}{}:
			return nil
		default:
		}
		if l.closeOldestIdle("") {
			continue
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.becameIdle:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

// admit counts a new connection of client key, closing idle ones to make room; false when the client
// holds its bound of busy connections.
func (l *Listener) admit(key string) bool {
	l.mu.Lock()
	full := l.cfg.PerClient > 0 && l.clients[key] >= l.cfg.PerClient
	l.mu.Unlock()
	if full && !l.closeOldestIdle(key) {
		return false
	}
	l.mu.Lock()
	l.clients[key]++
	l.open++
	near := l.open >= l.high
	l.mu.Unlock()
	if near {
		l.closeOldestIdle("")
	}
	return true
}

// closeOldestIdle closes the connection idle the longest, of client key or of anyone when key is
// empty; false when none is idle.
func (l *Listener) closeOldestIdle(key string) bool {
	l.mu.Lock()
	var victim *conn
	for e := l.idle.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*conn); key == "" || c.key == key {
			victim = c
			break
		}
	}
	if victim != nil {
		l.idle.Remove(l.elems[victim])
		delete(l.elems, victim)
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

// ConnState is the http.Server's ConnState hook: a connection is idle from the end of one request to
// the start of the next. One that has not finished sending its first request's headers is not idle
// (ReadHeaderTimeout bounds it), nor is one in the middle of a request.
func (l *Listener) ConnState(nc net.Conn, st http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, listed := l.elems[c]
	switch {
	case st == http.StateIdle && !listed && !c.isClosed():
		l.elems[c] = l.idle.PushBack(c)
		select {
		case l.becameIdle <- struct{}{}:
		default:
		}
	case st != http.StateIdle && listed:
		l.idle.Remove(e)
		delete(l.elems, c)
	}
}

// Close closes the listener; connections already accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// release forgets a closed connection and frees its slot.
func (l *Listener) release(c *conn) {
	l.mu.Lock()
	if e, ok := l.elems[c]; ok {
		l.idle.Remove(e)
		delete(l.elems, c)
	}
	if l.clients[c.key]--; l.clients[c.key] <= 0 {
		delete(l.clients, c.key)
	}
	l.open--
	l.mu.Unlock()
	<-l.slots
}

func clientKey(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return clientip.Key(ta.IP.String())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return clientip.Key(host)
}

type conn struct {
	net.Conn
	l      *Listener
	key    string
	once   sync.Once
	closed bool // guarded by l.mu
}

func (c *conn) isClosed() bool { return c.closed }

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		c.l.mu.Unlock()
		c.l.release(c)
	})
	return err
}
