package testservers

import (
	"fmt"
	"net"
	"os"
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
