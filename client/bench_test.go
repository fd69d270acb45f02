package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// sink keeps results alive; each goroutine adds to it once, at its end, so that no benchmark writes a
// shared cache line per ID.
var sink atomic.Int64

// benchClient is a Client on an in-memory backend with the namespace's default settings except a
// larger maximum block, warmed up: what Next costs once a block is cached.
func benchClient(b *testing.B, maxBlock int64) *Client {
	b.Helper()
	fake := newFake(testNS{Name: "bench", MaxBlockSize: maxBlock})
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

// BenchmarkNextN is the batch call: IDs per second when taken 100 at a time.
func BenchmarkNextN(b *testing.B) {
	c := benchClient(b, maxBlockSizeLimit)
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
	fake := newFake(testNS{Name: "steady"})
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
	body, err := json.Marshal(wireOf(Block{Namespace: "bench", Server: "a", Start: 1, Step: 2,
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
