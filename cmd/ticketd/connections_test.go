package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// healthzOn sends GET /healthz on c and returns the answer's status, or the error.
func healthzOn(c net.Conn) string {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return err.Error()
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err.Error()
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Status
}

func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdBusy opens n connections to addr from 127.0.0.1 that send only part of a request's headers: busy,
// not idle, until the read-header timeout.
func holdBusy(t *testing.T, addr, path string, n int) {
	t.Helper()
	for range n {
		if _, err := io.WriteString(dialFrom(t, "127.0.0.1", addr), "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
}

// closedAtOnce reports whether the server closes a new connection from 127.0.0.1 without a request.
func closedAtOnce(t *testing.T, addr string) bool {
	t.Helper()
	c := dialFrom(t, "127.0.0.1", addr)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil
}

// TestIdleConnectionsCannotHoldTheServer: with --max-connections 20, 20 idle keep-alive connections do
// not keep a new client waiting: the one idle the longest is closed for it.
func TestIdleConnectionsCannotHoldTheServer(t *testing.T) {
	p := startServe(t, map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}, "--data-dir", t.TempDir(),
		"--max-connections", "20", "--idle-timeout", "10m")
	addr := strings.TrimPrefix(p.URL, "http://")
	var idle []net.Conn
	for i := range 20 {
		c := dialFrom(t, "127.0.0.1", addr)
		if st := healthzOn(c); st != "200 OK" {
			t.Fatalf("connection %d within the cap: %s", i+1, st)
		}
		idle = append(idle, c)
	}
	if st := healthzOn(dialFrom(t, "127.0.0.3", addr)); st != "200 OK" {
		t.Fatalf("a new client while 20 idle connections held the cap of 20: %s", st)
	}
	_ = idle[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := idle[0].Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the connection idle the longest is still open: %d %v", n, err)
	}
}

// TestConnectionsPerClientAddress: --max-connections-per-client bounds the busy connections of one
// address; another address is served meanwhile; a negative value is refused with what it means.
func TestConnectionsPerClientAddress(t *testing.T) {
	env := map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}
	if _, errOut, code := run(t, env, "serve", "--data-dir", t.TempDir(), "--max-connections-per-client", "-1", "--listen", "127.0.0.1:0"); code != 2 || !strings.Contains(errOut, "--max-connections-per-client -1 must not be negative") {
		t.Fatalf("--max-connections-per-client -1: exit %d %q", code, errOut)
	}
	p := startServe(t, env, "--data-dir", t.TempDir(), "--max-connections-per-client", "3")
	addr := strings.TrimPrefix(p.URL, "http://")
	holdBusy(t, addr, "/healthz", 3)
	if !closedAtOnce(t, addr) {
		t.Fatal("a fourth connection from one address with a bound of 3 was kept")
	}
	if st := healthzOn(dialFrom(t, "127.0.0.2", addr)); st != "200 OK" {
		t.Fatalf("another client address: %s", st)
	}
}
