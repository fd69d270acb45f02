package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/testenv"
)

// sink keeps results alive; each goroutine adds to it once, at its end.
var sink atomic.Int64

// BenchmarkBusyThroughTicketd is a busy service: goroutines take IDs as fast as they can through
// client.HTTP from a `ticketd serve` on the embedded store, in a namespace created with blocks of 1,000
// (so its maximum is the default 1,000,000), with nothing between two IDs or a time.Now call. After a
// warm-up second under the same load, no caller may wait for a refill: the "stalls" metric must stay
// 0. "in-flight" is the most leases the client had in flight at once. One op is one ID.
//
//	go test -run '^$' -bench BenchmarkBusyThroughTicketd -cpu 2 -benchtime 3s ./e2e/
func BenchmarkBusyThroughTicketd(b *testing.B) {
	dir := b.TempDir()
	create := exec.Command(testenv.Ticketd(b), "namespace", "create", "--data-dir", dir, "busy", "--block-size", "1000")
	if out, err := create.CombinedOutput(); err != nil {
		b.Fatalf("ticketd namespace create: %v\n%s", err, out)
	}
	td := startTicketd(b, []string{"--data-dir", dir}, "busy")
	for _, load := range []struct {
		goroutines int
		clock      bool // a time.Now call between two IDs, as a service that stamps its records
	}{{8, false}, {32, false}, {8, true}, {32, true}} {
		name := fmt.Sprintf("goroutines=%d", load.goroutines)
		if load.clock {
			name += "/time.Now"
		}
		b.Run(name, func(b *testing.B) {
			c, err := client.New(client.HTTP(td.URL), "busy", client.WithToken(e2eNSToken))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			busy(b, c, load.goroutines, load.clock, time.Second, 0) // the warm-up: blocks grow to the maximum
			warm := c.Stats()
			b.ResetTimer()
			busy(b, c, load.goroutines, load.clock, 0, b.N)
			b.StopTimer()
			st := c.Stats()
			b.ReportMetric(float64(st.Stalls-warm.Stalls), "stalls")
			b.ReportMetric(float64(warm.Stalls), "warmup-stalls")
			b.ReportMetric(float64(st.Refills-warm.Refills), "refills")
			b.ReportMetric(float64(st.RefillLatency)/float64(time.Millisecond), "refill-ms")
			b.ReportMetric(float64(st.LowWater), "low-water")
			b.ReportMetric(float64(st.BlockSize), "block")
			b.ReportMetric(float64(st.PeakInFlight), "in-flight")
			if elapsed := b.Elapsed(); elapsed > 0 {
				b.ReportMetric(float64(b.N)/elapsed.Seconds()/1e6, "MIDs/s")
			}
		})
	}
}

// busy has goroutines take IDs from c, with a time.Now call between two when clock is set: for d, or
// n IDs in all when d is 0.
func busy(b *testing.B, c *client.Client, goroutines int, clock bool, d time.Duration, n int) {
	var stop atomic.Bool
	if d > 0 {
		defer time.AfterFunc(d, func() { stop.Store(true) }).Stop()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		share := n / goroutines
		if g < n%goroutines {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var sum int64
			for i := 0; d > 0 || i < share; i++ {
				if d > 0 && i%4096 == 0 && stop.Load() {
					break
				}
				id, err := c.Next(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				sum += id
				if clock {
					sum += time.Now().UnixNano() & 1
				}
			}
			sink.Add(sum)
		}()
	}
	wg.Wait()
}
