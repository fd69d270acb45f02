package mysql

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestBytesPerNamespace: what the store keeps of a namespace it created and leased from on both
// servers, once the guard has written and read back the water marks and a listing has read every
// row: one copy of its settings, and its floor on each server (never dropped: they keep a restored
// server from issuing an ID twice). A process serving 10,000 namespaces holds ten thousand times this.
func TestBytesPerNamespace(t *testing.T) {
	p := openStore(t, testenv.Pair(t), func(c *Config) {
		c.Failover.WatermarkInterval, c.Failover.ProbeInterval = time.Hour, time.Hour // no background work but the test's
	})
	ctx := context.Background()
	heap := allocatortest.LiveHeap
	round := func() {
		p.guard()
		if _, err := p.Namespaces(ctx); err != nil {
			t.Fatal(err)
		}
	}
	add := func(from, to int) {
		for i := from; i < to; i++ {
			name := fmt.Sprintf("ns%05d", i)
			if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: name}); err != nil {
				t.Fatal(err)
			}
			for _, server := range p.set.Names() {
				if _, err := p.LeaseFrom(ctx, name, 10, server); err != nil {
					t.Fatal(err)
				}
			}
		}
		round()
		round()
	}
	// The first namespaces also grow what does not grow with them past a point: the connections'
	// buffers, to the water-mark statements of markBatch namespaces.
	const n = 2000
	add(0, n)
	base := heap()
	add(n, 2*n)
	per := (heap() - base) / n
	runtime.KeepAlive(p)
	t.Logf("a namespace keeps %d bytes", per)
	if per > 700 { // 1,012 with two copies of the settings, Marks of strings and a map of every namespace in flight
		t.Errorf("a namespace keeps %d bytes, want at most 700", per)
	}
}
