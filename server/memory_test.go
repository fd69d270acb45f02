package server

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// TestBytesPerNamespace: what a process keeps of a namespace leased from once through the segment
// cache and read by a scrape (its cache, counters, last minute and forecast), and of one idle past the
// cache's IdleAfter (its counters and forecast), measured on the heap over many namespaces. A process
// serving 10,000 namespaces holds ten thousand times this: it must stay within a 64 MiB process with
// the runtime's defaults, which let the heap grow to twice what is live. The backend's own share is
// the backend's (see the failover package's tests).
func TestBytesPerNamespace(t *testing.T) {
	const n = 4000
	clk := allocatortest.NewClock()
	mem := allocatortest.NewMemory(allocatortest.Config{})
	ctx := context.Background()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ns%06d", i)
		if _, err := mem.CreateNamespace(ctx, allocator.Namespace{Name: names[i], BlockSize: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(Config{Backend: mem, Auth: Auth{Admin: adminTok}, now: clk.Now, Metrics: func() *Metrics { m := NewMetrics(); m.now = clk.Now; return m }()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := &testServer{Server: s}
	heap := allocatortest.LiveHeap
	// The first lease and scrape make what every namespace shares (pools, the registry's state).
	scrape := func() {
		if w := ts.do(t, request{method: "GET", path: "/metrics", token: adminTok}); w.Code != 200 {
			t.Fatalf("scrape: %d", w.Code)
		}
		waitIdle(t, s)
		// A reading the scrape started in the background holds every namespace's counters until
		// it ends: it is not what a namespace keeps.
		for {
			s.headroom.scrapeMu.Lock()
			reading := s.headroom.scrapeReading
			s.headroom.scrapeMu.Unlock()
			if !reading {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	lease := func(name string) {
		if w := ts.do(t, request{method: "POST", path: "/v1/namespaces/" + name + "/blocks", token: adminTok, body: `{"size":10}`}); w.Code != 200 {
			t.Fatalf("lease %s: %d %s", name, w.Code, w.Body.String())
		}
	}
	lease(names[0])
	waitIdle(t, s)
	scrape()
	base := heap()
	for _, name := range names[1:] {
		lease(name)
	}
	waitIdle(t, s)
	clk.Advance(headroomEvery)
	scrape() // starts a reading in the background
	clk.Advance(headroomEvery)
	scrape()
	cached := (heap() - base) / (n - 1)

	clk.Advance(s.cfg.Cache.withDefaults().IdleAfter + time.Minute)
	scrape() // drops the idle namespaces' caches
	idle := (heap() - base) / (n - 1)
	runtime.KeepAlive(s)
	t.Logf("a namespace leased from once keeps %d bytes, one idle %d", cached, idle)
	if cached > 900 || idle > 300 {
		t.Errorf("a namespace leased from once keeps %d bytes, one idle %d; want at most 900 and 300 (1,373 and 685 before the last minute, the cache and the forecasts were made smaller)", cached, idle)
	}
}
