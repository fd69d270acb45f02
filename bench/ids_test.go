package bench

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
	"github.com/rs/xid"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/inprocess"
)

// sink keeps results alive; each goroutine adds to it once, at its end, so that no benchmark writes a
// shared cache line per ID.
var sink atomic.Int64

// benchClient is a Client on an in-memory backend with the namespace's default settings except a
// larger maximum block, warmed up: what Next costs once a block is cached.
func benchClient(b *testing.B, maxBlock int64) *client.Client {
	b.Helper()
	fake := allocatortest.NewFake(allocatortest.Config{Servers: []string{"fake"},
		Namespaces: []allocator.Namespace{{Name: "bench", MaxBlockSize: maxBlock}}})
	c, err := client.New(inprocess.Source(fake), "bench")
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
//	go test -run '^$' -bench BenchmarkIDs -cpu 2 -benchtime 2s ./bench/
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
