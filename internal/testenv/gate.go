package testenv

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/ticketd/ticketd/internal/testservers"
)

// Fate is what a Gate does with a connection it accepts.
type Fate int

const (
	// Pass forwards the connection to the gate's target.
	Pass Fate = iota
	// Refuse closes it at once: a server that is gone.
	Refuse
	// Hold takes it and never answers: a server that hangs. The connection is closed when the gate's
	// fate changes or the gate closes.
	Hold
)

// Gate is a TCP proxy for fault tests that decides the fate of each connection when it accepts it.
// A toxiproxy toxic applies to every connection of its proxy; a gate's fate can depend on which of
// several gates is asked first after an outage (see RecoverSlowFirst). Safe for concurrent use.
type Gate struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	fate   func(*Gate) Fate
	conns  map[net.Conn]Fate // open connections, client side, and how they were let in
	closed bool
	wg     sync.WaitGroup
}

// StartGate starts a gate to target ("host:port") on a free loopback port; it passes every connection
// until told otherwise, and closes when the test ends.
func StartGate(t testing.TB, target string) *Gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{ln: ln, target: target, fate: func(*Gate) Fate { return Pass }, conns: map[net.Conn]Fate{}}
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(g.close)
	return g
}

// Addr is the gate's "host:port".
func (g *Gate) Addr() string { return g.ln.Addr().String() }

// Set gives every connection accepted from now on the fate f. Refuse also closes the connections
// that are open, as a server that goes away does; any change closes the connections held.
func (g *Gate) Set(f Fate) { g.decide(func(*Gate) Fate { return f }, f == Refuse) }

// decide makes fate decide the connections accepted from now on, and closes the connections held (and
// with all, every connection).
func (g *Gate) decide(fate func(*Gate) Fate, all bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fate = fate
	for c, how := range g.conns {
		if all || how == Hold {
			_ = c.Close()
			delete(g.conns, c)
		}
	}
}

// RecoverSlowFirst ends an outage of the servers behind gates: they take connections again, but the
// gate that is asked first from now on holds the first hold connections it accepts, or every one with
// hold 0 (the server asked first after the outage is slow to answer once, or hangs), while the others
// pass theirs on. It returns the gate that was asked first, nil until one was.
func RecoverSlowFirst(hold int, gates ...*Gate) (first func() *Gate) {
	var mu sync.Mutex
	var slow *Gate
	held := 0
	fate := func(g *Gate) Fate {
		mu.Lock()
		defer mu.Unlock()
		if slow == nil {
			slow = g
		}
		if g == slow && (hold == 0 || held < hold) {
			held++
			return Hold
		}
		return Pass
	}
	for _, g := range gates {
		g.decide(fate, false)
	}
	return func() *Gate {
		mu.Lock()
		defer mu.Unlock()
		return slow
	}
}

func (g *Gate) serve() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			_ = c.Close()
			return
		}
		fate := g.fate(g)
		if fate != Refuse {
			g.conns[c] = fate
		}
		g.mu.Unlock()
		switch fate {
		case Refuse:
			_ = c.Close()
		case Hold:
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				_, _ = io.Copy(io.Discard, c) // read what comes, answer nothing, until closed
				g.forget(c)
			}()
		case Pass:
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.pass(c)
			}()
		}
	}
}

// pass forwards c to the target both ways until either side closes.
func (g *Gate) pass(c net.Conn) {
	defer g.forget(c)
	up, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = c.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
}

func (g *Gate) forget(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	_ = c.Close()
}

func (g *Gate) close() {
	g.mu.Lock()
	g.closed = true
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	_ = g.ln.Close()
	g.wg.Wait()
}

// GatedRedis starts n throwaway Redis instances, each behind a gate of its own, and returns the gates
// and their addresses (the instances are reached through them).
func GatedRedis(t testing.TB, n int) ([]*Gate, []string) {
	t.Helper()
	var gates []*Gate
	var addrs []string
	for range n {
		r := PrivateRedis(t, testservers.RedisOptions{})
		g := StartGate(t, r.Addr())
		gates, addrs = append(gates, g), append(addrs, g.Addr())
	}
	return gates, addrs
}
