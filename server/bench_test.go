package server

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testenv"
)

// serveOn starts h on a loopback listener and returns its URL; it stops with the benchmark.
func serveOn(b *testing.B, h http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	b.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

// latencies are the latencies of a load's requests, in microseconds. (A sorted slice, not HdrHistogram:
// the server module stays free of the histogram library and the numeric one it brings along.)
type latencies []int64

// quantile is the nearest-rank q-th percentile; 0 when empty.
func (l latencies) quantile(q float64) int64 {
	if len(l) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(l))
	rank := int(math.Ceil(q / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// loadFor sends POSTs to url from clients goroutines, each on its own kept-alive connection, for d,
// adding each latency in microseconds to h. It returns the requests answered.
func loadFor(b *testing.B, client *http.Client, url, token, body string, clients int, d time.Duration, h *latencies) int64 {
	hists := make([]latencies, clients)
	var n atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(h *latencies) {
			defer wg.Done()
			for time.Now().Before(stop) {
				req, _ := http.NewRequest("POST", url, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				*h = append(*h, time.Since(t0).Microseconds())
				n.Add(1)
			}
		}(&hists[c])
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatalf("%s: %v", url, err)
	}
	for _, x := range hists {
		*h = append(*h, x...)
	}
	return n.Load()
}

// BenchmarkServe measures block leases over HTTP with the segment cache on and off, on the MariaDB
// pair, side by side with an echo handler that returns a constant JSON of the same length (the
// framework's ceiling on this machine), at 1, 16, 64 and 256 concurrent clients. Each request leases
// 1,000 IDs with a namespace token. So that a shared, noisy machine weighs on all three alike, the
// handlers take turns in rounds of half a second (six rounds each per client count), and the
// cache/constant ratios compare the totals. Each sub-benchmark runs once, whatever b.N.
//
//	scripts/with-servers.sh go test -run '^$' -bench BenchmarkServe -benchtime 1x ./server/
func BenchmarkServe(b *testing.B) {
	dsns := testenv.Pair(b)
	for _, dsn := range dsns {
		if _, err := mysql.MigrateDSN(context.Background(), dsn); err != nil {
			b.Fatal(err)
		}
	}
	open := func() (*mysql.Store, *Metrics) {
		m := NewMetrics()
		p, err := mysql.Open(context.Background(), mysql.Config{DSNs: dsns, Logger: quiet, Observer: m, Failover: allocator.Failover{MaxConns: 64}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = p.Close() })
		return p, m
	}
	pair, m := open()
	if _, err := pair.CreateNamespace(context.Background(), allocator.Namespace{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	auth := Auth{Tokens: []NamespaceToken{{Namespace: "bench", Token: ordersTok}}}
	newServer := func(p *mysql.Store, m *Metrics, cache CacheConfig) string {
		s, err := New(Config{Backend: p, Auth: auth, Cache: cache, Logger: quiet, Metrics: m})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return serveOn(b, s.Handler())
	}
	pair2, m2 := open()
	urls := map[string]string{
		"cache":   newServer(pair, m, CacheConfig{}) + "/v1/namespaces/bench/blocks",
		"nocache": newServer(pair2, m2, CacheConfig{Disabled: true}) + "/v1/namespaces/bench/blocks",
	}
	// The constant answer has the length of a real block.
	constant := []byte(`{"namespace":"bench","start":"1000001","step":2,"size":1000,"last":"1001999","expires_at":null,"server":"127.0.0.1:33061"}`)
	e := echo.New()
	e.POST("/v1/namespaces/bench/blocks", func(c echo.Context) error { return c.JSONBlob(http.StatusOK, constant) })
	urls["constant"] = serveOn(b, e) + "/v1/namespaces/bench/blocks"

	const rounds, round = 6, 500 * time.Millisecond
	handlers := []string{"constant", "cache", "nocache"}
	for _, clients := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			hists := map[string]*latencies{}
			counts := map[string]int64{}
			for _, h := range handlers {
				hists[h] = &latencies{}
				loadFor(b, client, urls[h], ordersTok, `{"size":1000}`, clients, 100*time.Millisecond, &latencies{}) // warm up
			}
			b.ResetTimer()
			for r := 0; r < rounds; r++ {
				for _, h := range handlers {
					counts[h] += loadFor(b, client, urls[h], ordersTok, `{"size":1000}`, clients, round, hists[h])
				}
			}
			b.StopTimer()
			secs := (rounds * round).Seconds()
			for _, h := range handlers {
				b.ReportMetric(float64(counts[h])/secs, h+"-req/s")
				b.ReportMetric(float64(hists[h].quantile(50)), h+"-p50-µs")
				b.ReportMetric(float64(hists[h].quantile(99)), h+"-p99-µs")
				b.ReportMetric(float64(hists[h].quantile(99.9)), h+"-p999-µs")
			}
			b.ReportMetric(counterTotal(b, m, "ticketd_cache_stalls_total"), "cache-stalls")
			b.ReportMetric(float64(counts["cache"])/float64(counts["constant"]), "cache/constant-req/s")
			b.ReportMetric(float64(hists["cache"].quantile(99))/float64(hists["constant"].quantile(99)), "cache/constant-p99")
		})
	}
}

// counterTotal sums a counter's series.
func counterTotal(t testing.TB, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, s := range mf.GetMetric() {
				total += s.GetCounter().GetValue()
			}
		}
	}
	return total
}

// BenchmarkHandler measures the server's own cost per lease, without the network: ServeHTTP on a
// recorder, cache on the fake pair, next to the same constant echo handler.
//
//	go test -run '^$' -bench BenchmarkHandler -benchmem ./server/
func BenchmarkHandler(b *testing.B) {
	f := allocatortest.NewFake(allocatortest.Config{})
	if _, err := f.CreateNamespace(context.Background(), allocator.Namespace{Name: "bench"}); err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Backend: f, Auth: Auth{Tokens: []NamespaceToken{{Namespace: "bench", Token: ordersTok}}}, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	constant := []byte(`{"namespace":"bench","start":"1000001","step":2,"size":1000,"last":"1001999","expires_at":null,"server":"127.0.0.1:33061"}`)
	e := echo.New()
	e.POST("/v1/namespaces/bench/blocks", func(c echo.Context) error { return c.JSONBlob(http.StatusOK, constant) })
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"constant", e}, {"cache", s.Handler()}} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", "/v1/namespaces/bench/blocks", strings.NewReader(`{"size":1000}`))
					req.Header.Set("Authorization", "Bearer "+ordersTok)
					w := &discardWriter{h: http.Header{}}
					h.h.ServeHTTP(w, req)
					if w.code != 200 {
						b.Fatalf("status %d", w.code)
					}
				}
			})
		})
	}
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// TestLatenciesQuantile: the benchmark's percentiles are nearest-rank.
func TestLatenciesQuantile(t *testing.T) {
	l := latencies{50, 10, 40, 30, 20, 100, 90, 80, 70, 60}
	for q, want := range map[float64]int64{50: 50, 99: 100, 99.9: 100, 10: 10, 11: 20, 0: 10} {
		if got := l.quantile(q); got != want {
			t.Errorf("quantile(%v) = %d, want %d", q, got, want)
		}
	}
	if got := (latencies{}).quantile(99); got != 0 {
		t.Errorf("empty: %d", got)
	}
}
