package mysql

import (
	"context"
	"fmt"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// BenchmarkPair compares, on the same two servers in the same run, a block lease (one UPDATE per block)
// with Flickr's per-ID REPLACE INTO Tickets64, at 1, 4, 16 and 64 concurrent callers.
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
			allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "ok/s", Tolerated: "deadlocks",
				Call: func() error {
					_, err := p.Lease(ctx, "bench", 1000)
					return err
				}})
		})
		b.Run(fmt.Sprintf("flickr-replace/clients=%d", g), func(b *testing.B) {
			allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: g, Unit: "ok/s", Tolerated: "deadlocks", Tolerate: isDeadlock,
				Call: func() error {
					_, _, err := p.Ticket(ctx)
					return err
				}})
		})
	}
}
