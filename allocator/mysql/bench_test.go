package mysql

import (
	"context"
	"fmt"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// BenchmarkPair compares, on the same two servers in the same run, a block lease (one UPDATE, shared
// by the leases that arrive while another is in flight) with Flickr's per-ID REPLACE INTO Tickets64, at
// 1, 4, 16 and 64 concurrent callers. statements/call is what the servers counted (Com_update,
// Com_replace) per call.
//
//	scripts/with-servers.sh go test -run '^$' -bench BenchmarkPair -benchtime 3s ./allocator/mysql/
func BenchmarkPair(b *testing.B) {
	p := openPair(b, testenv.Pair(b), nil)
	ctx := context.Background()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	// ok/s counts successful calls; a deadlock is a call that failed (Flickr's REPLACE under contention).
	for _, g := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("lease/clients=%d", g), func(b *testing.B) {
			before := statements(b, p, "Com_update")
			allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "ok/s", Tolerated: "deadlocks",
				Call: func() error {
					_, err := p.Lease(ctx, "bench", 1000)
					return err
				}})
			b.ReportMetric(float64(statements(b, p, "Com_update")-before)/float64(b.N), "statements/call")
		})
		b.Run(fmt.Sprintf("flickr-replace/clients=%d", g), func(b *testing.B) {
			before := statements(b, p, "Com_replace")
			allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "ok/s", Tolerated: "deadlocks", Tolerate: isDeadlock,
				Call: func() error {
					_, _, err := p.Ticket(ctx)
					return err
				}})
			b.ReportMetric(float64(statements(b, p, "Com_replace")-before)/float64(b.N), "statements/call")
		})
	}
}

// statements sums a global statement counter over the pair's servers (the harness's servers, which
// nothing else uses while a benchmark runs).
func statements(b *testing.B, p *Pair, counter string) int64 {
	b.Helper()
	var total int64
	for _, s := range p.set.All() {
		var name string
		var v int64
		if err := s.ctl.QueryRow("SHOW GLOBAL STATUS LIKE '"+counter+"'").Scan(&name, &v); err != nil {
			b.Fatal(err)
		}
		total += v
	}
	return total
}
