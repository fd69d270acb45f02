package bench

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestFlickrTicketsParityAndUniqueness: the baseline is Flickr's scheme as published. The odd server
// issues odd tickets, the even one even tickets, and no ticket comes twice.
func TestFlickrTicketsParityAndUniqueness(t *testing.T) {
	dsns := testenv.Pair(t)
	f, err := openFlickrTickets(context.Background(), dsns, 8, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	ids := allocatortest.NewIDSet(4000)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed atomic.Value
	servers := map[string]bool{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				id, srv, err := f.Ticket(ctx)
				if err != nil {
					if isDeadlock(err) {
						continue // Flickr's scheme deadlocks under contention; counted by the load report
					}
					failed.Store(err)
					return
				}
				want := int64(1)
				if srv == mysql.ServerName(dsns[1]) {
					want = 0
				}
				if id%2 != want {
					failed.Store(fmt.Errorf("ticket %d from %s breaks parity", id, srv))
					return
				}
				mu.Lock()
				ids.Add(id)
				servers[srv] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if len(ids.Duplicates) > 0 || ids.Len() < 900 || len(servers) != 2 {
		t.Fatalf("%d tickets from %v, duplicates %v", ids.Len(), servers, ids.Duplicates)
	}
}

// BenchmarkLeaseVersusTicket compares, on the same two servers in the same run, a block lease (one
// UPDATE, shared by the leases that arrive while another is in flight) with Flickr's per-ID REPLACE INTO
// Tickets64, at 1, 4, 16 and 64 concurrent callers. statements/call is what the servers counted
// (Com_update, Com_replace) per call.
//
//	scripts/with-servers.sh go test -run '^$' -bench BenchmarkLeaseVersusTicket -benchtime 3s ./bench/
func BenchmarkLeaseVersusTicket(b *testing.B) {
	dsns := testenv.Pair(b)
	ctx := context.Background()
	p, err := mysql.Open(ctx, mysql.Config{DSNs: dsns, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	f, err := openFlickrTickets(ctx, dsns, maxConns, opTimeout)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	// ok/s counts successful calls; a deadlock is a call that failed (Flickr's REPLACE under contention).
	for _, g := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("lease/clients=%d", g), func(b *testing.B) {
			before := f.statements(b, "Com_update")
			allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "ok/s", Tolerated: "deadlocks",
				Call: func() error {
					_, err := p.Lease(ctx, "bench", 1000)
					return err
				}})
			b.ReportMetric(float64(f.statements(b, "Com_update")-before)/float64(b.N), "statements/call")
		})
		b.Run(fmt.Sprintf("flickr-replace/clients=%d", g), func(b *testing.B) {
			before := f.statements(b, "Com_replace")
			allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "ok/s", Tolerated: "deadlocks", Tolerate: isDeadlock,
				Call: func() error {
					_, _, err := f.Ticket(ctx)
					return err
				}})
			b.ReportMetric(float64(f.statements(b, "Com_replace")-before)/float64(b.N), "statements/call")
		})
	}
}

// statements sums a global statement counter over the servers (the harness's servers, which nothing
// else uses while a benchmark runs).
func (f *flickrTickets) statements(b *testing.B, counter string) int64 {
	b.Helper()
	var total int64
	for _, db := range f.dbs {
		var name string
		var v int64
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE '"+counter+"'").Scan(&name, &v); err != nil {
			b.Fatal(err)
		}
		total += v
	}
	return total
}
