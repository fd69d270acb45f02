package allocatortest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent is a benchmark of one call made from many goroutines at once.
type Concurrent struct {
	// Goroutines share the b.N calls.
	Goroutines int
	// Call is what is measured.
	Call func() error
	// Unit names the rate of successful calls: "ok/s", "leases/s".
	Unit string
	// Tolerate, if set, picks out the errors that are part of what is measured, such as deadlocks
	// under contention: they count as calls, not as successes. Any other error fails the benchmark.
	Tolerate func(error) bool
	// Tolerated, if set, names the metric that counts the tolerated errors: "deadlocks".
	Tolerated string
}

// RunConcurrent runs b.N calls of c.Call spread over c.Goroutines goroutines and reports the
// successful calls per second as c.Unit (and the tolerated errors as c.Tolerated).
func RunConcurrent(b *testing.B, c Concurrent) {
	var left, tolerated, failures atomic.Int64
	var firstErr atomic.Value
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range c.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := c.Call(); err != nil {
					if c.Tolerate != nil && c.Tolerate(err) {
						tolerated.Add(1)
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
	ok := int64(b.N) - tolerated.Load() - failures.Load()
	b.ReportMetric(float64(ok)/elapsed.Seconds(), c.Unit)
	if c.Tolerated != "" {
		b.ReportMetric(float64(tolerated.Load()), c.Tolerated)
	}
}
