package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
	"github.com/rs/xid"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
)

// sink keeps results alive; each goroutine adds to it once, at its end, so that no benchmark writes a
// shared cache line per ID.
var sink atomic.Int64

// benchClient is a Client on an in-memory backend with the namespace's default settings except a
// larger maximum block, warmed up: what Next costs once a block is cached.
func benchClient(b *testing.B, maxBlock int64) *Client {
	b.Helper()
	fake := newFake(allocator.Namespace{Name: "bench", MaxBlockSize: maxBlock})
	c, err := New(FromBackend(fake), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	if _, err := c.Next(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

// iter hands out a benchmark's iterations: b.N of them on one goroutine, or RunParallel's share.
// Each scheme below runs its own loop over it, so that no indirect call per ID blurs the comparison.
type iter struct {
	n  int
	pb *testing.PB
}

func (it *iter) next() bool {
	if it.pb != nil {
		return it.pb.Next()
	}
	it.n--
	return it.n >= 0
}

// BenchmarkIDs compares one ID from the SDK's cache with the coordination-free schemes, in one run:
// each scheme on one goroutine ("single") and from 8×GOMAXPROCS goroutines at once ("parallel").
//
//	go test -run '^$' -bench BenchmarkIDs -cpu 2 -benchtime 2s ./client/
func BenchmarkIDs(b *testing.B) {
	node, err := snowflake.NewNode(1)
	if err != nil {
		b.Fatal(err)
	}
	var counter atomic.Int64
	ticketd := func(maxBlock int64) func(b *testing.B) func(*iter) int64 {
		return func(b *testing.B) func(*iter) int64 {
			c := benchClient(b, maxBlock)
			return func(it *iter) (sum int64) {
				ctx := context.Background()
				for it.next() {
					id, err := c.Next(ctx)
					if err != nil {
						b.Fatal(err)
					}
					sum += id
				}
				return sum
			}
		}
	}
	schemes := []struct {
		name string
		loop func(b *testing.B) func(*iter) int64 // returns a loop that makes one ID per iteration
	}{
		{"ticketd_Next", ticketd(allocator.MaxBlockSizeLimit)},
		{"ticketd_Next_1M_blocks", ticketd(allocator.DefaultMaxBlockSize)},
		{"atomic_counter", func(*testing.B) func(*iter) int64 {
			return func(it *iter) (sum int64) {
				for it.next() {
					sum += counter.Add(1)
				}
				return sum
			}
		}},
		{"uuid_NewV7", func(b *testing.B) func(*iter) int64 {
			return func(it *iter) (sum int64) {
				for it.next() {
					u, err := uuid.NewV7()
					if err != nil {
						b.Fatal(err)
					}
					sum += int64(u[15])
				}
				return sum
			}
		}},
		{"ulid_Make", func(*testing.B) func(*iter) int64 { // monotonic within a millisecond, one process-wide lock
			return func(it *iter) (sum int64) {
				for it.next() {
					sum += int64(ulid.Make()[15])
				}
				return sum
			}
		}},
		{"snowflake_Generate", func(*testing.B) func(*iter) int64 { // 4,096 IDs per millisecond, then it waits
			return func(it *iter) (sum int64) {
				for it.next() {
					sum += node.Generate().Int64()
				}
				return sum
			}
		}},
		{"xid_New", func(*testing.B) func(*iter) int64 {
			return func(it *iter) (sum int64) {
				for it.next() {
					sum += int64(xid.New()[11])
				}
				return sum
			}
		}},
	}
	for _, s := range schemes {
		b.Run(s.name+"/single", func(b *testing.B) {
			loop := s.loop(b)
			b.ReportAllocs()
			b.ResetTimer()
			sink.Add(loop(&iter{n: b.N}))
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "MIDs/s")
		})
		b.Run(s.name+"/parallel", func(b *testing.B) {
			loop := s.loop(b)
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) { sink.Add(loop(&iter{pb: pb})) })
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "MIDs/s")
		})
	}
}

// BenchmarkNextN is the batch call: IDs per second when taken 100 at a time.
func BenchmarkNextN(b *testing.B) {
	c := benchClient(b, allocator.MaxBlockSizeLimit)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]int64, 100)
		for pb.Next() {
			if _, err := c.NextN(ctx, buf); err != nil {
				b.Fatal(err)
			}
		}
		sink.Add(buf[0])
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds()/1e6, "MIDs/s")
}

// BenchmarkSteady10MWithSlowRefills asks for IDs at a steady 10 M/s while every lease takes 5 ms, with
// the namespace's default settings (blocks of 1,000, at most 1,000,000). After a warm-up second in
// which the block size adapts, no caller may wait: the "stalls" metric must stay 0. One op is one ID.
//
//	go test -run '^$' -bench BenchmarkSteady10M -cpu 2 -benchtime 3s ./client/
func BenchmarkSteady10MWithSlowRefills(b *testing.B) {
	const rate = 10_000_000
	const interval = time.Second / rate
	fake := newFake(allocator.Namespace{Name: "steady"})
	fake.SetDelay(5 * time.Millisecond)
	c, err := New(FromBackend(fake), "steady")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	paced := func(n int) {
		var sum int64
		start := time.Now()
		for i := range n {
			if i%10_000 == 0 { // the i-th ID is due at start + i×100ns; sleep in 1 ms steps
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					time.Sleep(d)
				}
			}
			id, err := c.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			sum += id
		}
		sink.Add(sum)
	}
	paced(rate) // one second of warm-up: the first blocks are small, and callers may wait for them
	warm := c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	paced(b.N)
	b.StopTimer()
	st := c.Stats()
	b.ReportMetric(float64(st.Stalls-warm.Stalls), "stalls")
	b.ReportMetric(float64(warm.Stalls), "warmup-stalls")
	b.ReportMetric(float64(st.Refills-warm.Refills), "refills")
	b.ReportMetric(float64(st.BlockSize), "block")
	if elapsed := b.Elapsed(); elapsed > 0 {
		b.ReportMetric(float64(b.N)/elapsed.Seconds()/1e6, "MIDs/s")
	}
}

// BenchmarkBusyThroughTicketd is a busy service: goroutines take IDs as fast as they can through
// client.HTTP from a `ticketd serve` on the embedded store, in a namespace created with blocks of 1,000
// (so its maximum is the default 1,000,000), with nothing between two IDs or a time.Now call. After a
// warm-up second under the same load, no caller may wait for a refill: the "stalls" metric must stay
// 0. "in-flight" is the most leases the client had in flight at once. One op is one ID.
//
//	go test -run '^$' -bench BenchmarkBusyThroughTicketd -cpu 2 -benchtime 3s ./client/
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
			c, err := New(HTTP(td.URL), "busy", WithToken(e2eNSToken))
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
func busy(b *testing.B, c *Client, goroutines int, clock bool, d time.Duration, n int) {
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

// answer is an http.RoundTripper that answers every lease in memory with the same block: what one
// lease costs the client's processors, without the network and the server.
type answer struct{ body []byte }

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(a.body)), ContentLength: int64(len(a.body)), Request: req}, nil
}

// BenchmarkLeaseHTTP is the client's own work for one lease through client.HTTP, on the processors
// that callers keep busy: building the request, reading and checking the answer.
//
//	go test -run '^$' -bench BenchmarkLeaseHTTP -benchmem ./client/
func BenchmarkLeaseHTTP(b *testing.B) {
	body, err := json.Marshal(api.FromBlock(allocator.Block{Namespace: "bench", Server: "a", Start: 1, Step: 2,
		Size: 1_000_000, ExpiresAt: time.Now().Add(time.Hour)}))
	if err != nil {
		b.Fatal(err)
	}
	cfg := config{httpClient: &http.Client{Transport: answer{body}}, token: "token"}.withDefaults()
	l, err := HTTP("http://ticketd-a:8080", "http://ticketd-b:8080").open("bench", &cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.lease(ctx, 1_000_000, &route{}, false); err != nil {
			b.Fatal(err)
		}
	}
}
