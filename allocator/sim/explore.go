package sim

import (
	"sync"
	"time"
)

// Summary is what a run of many schedules found.
type Summary struct {
	Schedules int
	// Events counts the events applied, by kind ("skipped: …" are those the guarantees' conditions
	// refused).
	Events map[string]int
	// Violations are the schedules that broke an invariant, by seed.
	Violations []Result
	Elapsed    time.Duration
}

// Explore runs the schedules of seeds first, first+1, … (n of them) on workers goroutines, each
// schedule in one goroutine of its own, and stops early after stopAfter violations (0: never).
func Explore(first uint64, n, workers, stopAfter int, off Off) Summary {
	began := time.Now()
	sum := Summary{Events: map[string]int{}}
	var mu sync.Mutex
	seeds := make(chan uint64)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var once sync.Once
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seeds {
				r := Run(seed, off)
				mu.Lock()
				sum.Schedules++
				for k, v := range r.Counts {
					sum.Events[k] += v
				}
				if r.Failed() {
					sum.Violations = append(sum.Violations, r)
					if stopAfter > 0 && len(sum.Violations) >= stopAfter {
						once.Do(func() { close(stop) })
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range n {
		select {
		case seeds <- first + uint64(i):
		case <-stop:
			break feed
		}
	}
	close(seeds)
	wg.Wait()
	sum.Elapsed = time.Since(began)
	return sum
}
