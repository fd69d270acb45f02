package chaos

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestPortOutlivesItsReplica: a replica's port closes connections while no replica runs, hands them to
// the one that runs, and stays the same address across restarts.
func TestPortOutlivesItsReplica(t *testing.T) {
	p, err := openPort()
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	addr := p.ln.Addr().String()
	closedAtOnce := func(when string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("%s: dial: %v", when, err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("%s: read: %v, want the connection closed", when, err)
		}
	}
	served := func(l net.Listener) {
		t.Helper()
		got := make(chan error, 1)
		go func() {
			c, err := l.Accept()
			if err == nil {
				_, err = c.Write([]byte("x"))
				c.Close()
			}
			got <- err
		}()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil || b[0] != 'x' {
			t.Fatalf("read %q, %v: want the replica's answer", b, err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}

	closedAtOnce("before any replica")
	first := p.attach()
	if first.Addr().String() != addr {
		t.Fatalf("the replica listens at %s, not at the port %s", first.Addr(), addr)
	}
	served(first)
	first.Close()
	if _, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	closedAtOnce("while the replica is stopped")
	served(p.attach())
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}
