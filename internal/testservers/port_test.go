package testservers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestFreePortIsReservedBelowTheEphemeralRange: ports come from below the range outgoing connections
// use, are not handed out twice, and a port reserved here cannot be reserved again.
func TestFreePortIsReservedBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p >= low || p < 1024 || seen[p] {
			t.Fatalf("FreePort = %d (ephemeral range starts at %d; seen before: %v)", p, low, seen[p])
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d from FreePort cannot be bound: %v", p, err)
		}
		l.Close()
		if reservePort(filepath.Join(os.TempDir(), "ticketd-test-ports"), p) {
			t.Fatalf("port %d reserved twice", p)
		}
	}
}

// TestKilledServerLeavesItsPortFree: once Kill returns, the port can be bound again at once. Redis
// runs several threads: its main thread can be a zombie while the others still hold the listening
// socket, and a restart in that window failed with "address already in use"; and once the process is
// reaped, the kernel can still hold the port for a moment (this failed once in 30 runs of 30 kills).
func TestKilledServerLeavesItsPortFree(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed (package redis-server)")
		}
		t.Skip("redis-server is not installed (package redis-server)")
	}
	r, err := StartRedis(context.Background(), RedisOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Kill() })
	for i := range 30 {
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", r.Addr())
		if err != nil {
			t.Fatalf("after kill %d, the port cannot be bound: %v", i+1, err)
		}
		l.Close()
		if err := r.Start(context.Background()); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
	}
}
