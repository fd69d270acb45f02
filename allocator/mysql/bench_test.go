package mysql

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/testenv"
)

// runConcurrent runs b.N calls of op spread over g goroutines and reports successful calls per second
// and deadlocks (which count as calls but not as successes).
func runConcurrent(b *testing.B, g int, op func() error, isDeadlock func(error) bool) {
	var left atomic.Int64
	var deadlocks, failures atomic.Int64
	var firstErr atomic.Value
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := op(); err != nil {
					if isDeadlock(err) {
						deadlocks.Add(1)
					} else {
						failures.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatalf("%d calls failed; first: %v", failures.Load(), err)
	}
	ok := int64(b.N) - deadlocks.Load() - failures.Load()
	b.ReportMetric(float64(ok)/elapsed.Seconds(), "ok/s")
	b.ReportMetric(float64(deadlocks.Load()), "deadlocks")
}

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
	never := func(error) bool { return false }
	for _, g := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("lease/clients=%d", g), func(b *testing.B) {
			runConcurrent(b, g, func() error {
				_, err := p.Lease(ctx, "bench", 1000)
				return err
			}, never)
		})
		b.Run(fmt.Sprintf("flickr-replace/clients=%d", g), func(b *testing.B) {
			runConcurrent(b, g, func() error {
				_, _, err := p.Ticket(ctx)
				return err
			}, isDeadlock)
		})
	}
}
