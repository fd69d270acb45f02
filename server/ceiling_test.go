package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestCeilingThroughTheAPI: max_id set by PUT (a string, or a JSON number below 2^53), leases from 16
// goroutines through the segment cache until 409 id_space_exhausted, no ID above max_id and none twice;
// the headroom in the namespace, the metrics and the status page; a lower max_id refused naming the
// highest ID issued.
func TestCeilingThroughTheAPI(t *testing.T) {
	store := testenv.Embedded(t)
	s := newTestServer(t, func(c *Config) { c.Backend = store })

	w := s.do(t, request{method: "PUT", path: "/v1/namespaces/small", token: adminTok, body: `{"block_size":10,"max_id":"1000"}`})
	if w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	ns := decode[api.Namespace](t, w)
	if ns.MaxID != "1000" || ns.IDsRemaining == nil || *ns.IDsRemaining != "1000" || ns.ExhaustsAt != nil {
		t.Fatalf("created %s", w.Body.String())
	}
	if w := s.do(t, request{method: "PUT", path: "/v1/namespaces/small", token: adminTok, body: `{"max_id":9007199254740993}`}); w.Code != 400 {
		t.Fatalf("a JSON number above 2^53: %d %s, want 400", w.Code, w.Body.String())
	}
	w = s.do(t, request{method: "PUT", path: "/v1/namespaces/small", token: adminTok, body: `{"max_id":2000}`})
	if ns = decode[api.Namespace](t, w); w.Code != 200 || ns.MaxID != "2000" || ns.BlockSize != 10 {
		t.Fatalf("a JSON number as max_id: %d %s", w.Code, w.Body.String())
	}
	// An update that does not name max_id keeps it.
	w = s.do(t, request{method: "PUT", path: "/v1/namespaces/small", token: adminTok, body: `{"block_size":20}`})
	if ns = decode[api.Namespace](t, w); w.Code != 200 || ns.MaxID != "2000" {
		t.Fatalf("an update without max_id: %d %s", w.Code, w.Body.String())
	}

	var mu sync.Mutex
	var blocks []allocator.Block
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				w := s.do(t, request{method: "POST", path: "/v1/namespaces/small/blocks", token: adminTok, body: fmt.Sprintf(`{"size":%d}`, 1+(g+i)%30)})
				if w.Code == 409 {
					if e := decode[api.Error](t, w); e.Error.Code != api.CodeExhausted {
						t.Errorf("409 %s, want %s", w.Body.String(), api.CodeExhausted)
					}
					return
				}
				if w.Code != 200 {
					t.Errorf("lease: %d %s", w.Code, w.Body.String())
					return
				}
				blk, err := decode[api.Block](t, w).ToBlock()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				blocks = append(blocks, blk)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, b := range blocks {
		if last, _ := b.Last(); last > 2000 {
			t.Fatalf("block %v passes max_id 2000", b)
		}
		n += b.Size
	}
	t.Logf("%d IDs in %d blocks below max_id 2000", n, len(blocks))
	// The segment the ceiling ends is served to its last ID, in short blocks, before the first 409.
	if n != 2000 {
		t.Fatalf("%d of the 2000 IDs below max_id were handed out before %s", n, api.CodeExhausted)
	}

	ns = decode[api.Namespace](t, s.do(t, request{method: "GET", path: "/v1/namespaces/small", token: adminTok}))
	if ns.IDsRemaining == nil || *ns.IDsRemaining != "0" {
		t.Fatalf("after the ceiling: %+v", ns)
	}
	w = s.do(t, request{method: "PUT", path: "/v1/namespaces/small", token: adminTok, body: `{"max_id":"1500"}`})
	if e := decode[api.Error](t, w); w.Code != 400 || e.Error.Code != api.CodeInvalidSettings || !strings.Contains(e.Error.Message, "2000") {
		t.Fatalf("max_id below the highest issued: %d %s", w.Code, w.Body.String())
	}
	metrics := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
	if !strings.Contains(metrics, `ticketd_namespace_ids_remaining{ticketd_namespace="small"} 0`) {
		t.Fatalf("no headroom gauge of 0 in the metrics:\n%s", metrics)
	}
	page := section(t, s.do(t, request{method: "GET", path: "/", token: adminTok}).Body.String(), "small")
	if got := attr(page, "data-ids-remaining"); len(got) != 1 || got[0] != "0" || attr(page, "data-soon")[0] != "true" {
		t.Fatalf("status page headroom %v, soon %v:\n%s", got, attr(page, "data-soon"), page)
	}
}

// TestHeadroomForecast: the rate comes from the oldest sample of the last hour; no rate, no date; a
// date past 9999 is none; a raised ceiling starts the rate again; red below 30 days.
func TestHeadroomForecast(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ns := func(next int64) allocator.Namespace {
		return allocator.Namespace{Name: "n", Start: 1, MaxID: 100_000_000, Servers: []allocator.ServerState{{Next: next, Step: 1}}}
	}
	var h headroom
	if f := h.observe(ns(1), t0); !f.Known || f.Left != 100_000_000 || !f.At.IsZero() || f.Fraction != 1 {
		t.Fatalf("first sample: %+v", f)
	}
	// 10 IDs/s for 30 minutes: about 116 days left.
	f := h.observe(ns(1+18_000), t0.Add(30*time.Minute))
	if want := t0.Add(30*time.Minute + (100_000_000-18_000)/10*time.Second); f.PerSecond != 10 || !f.At.Equal(want) {
		t.Fatalf("forecast %+v, want 10/s and %s", f, want)
	}
	if f.Soon(t0) {
		t.Fatal("a forecast 116 days out is red")
	}
	// Two hours later with nothing issued since: the samples of the last hour show no rate.
	h.observe(ns(1+18_000), t0.Add(90*time.Minute))
	if f := h.observe(ns(1+18_000), t0.Add(160*time.Minute)); f.PerSecond != 0 || !f.At.IsZero() {
		t.Fatalf("nothing issued in the last hour: %+v", f)
	}
	// One ID in an hour with 10^8 left: past the year 9999.
	slow := headroom{}
	big := func(next int64) allocator.Namespace {
		return allocator.Namespace{Name: "big", Start: 1, Servers: []allocator.ServerState{{Next: next, Step: 1}}}
	}
	slow.observe(big(1), t0)
	if f := slow.observe(big(2), t0.Add(time.Hour)); !f.At.IsZero() || f.PerSecond == 0 {
		t.Fatalf("a date past 9999: %+v", f)
	}
	// Fast: red.
	fast := headroom{}
	fast.observe(ns(1), t0)
	if f := fast.observe(ns(50_000_001), t0.Add(time.Hour)); !f.Soon(t0.Add(time.Hour)) || f.Fraction > 0.51 {
		t.Fatalf("half used in an hour: %+v, want red", f)
	}
	// A raised ceiling: more left than before; the rate starts again.
	raised := ns(50_000_001)
	raised.MaxID = 1_000_000_000
	if f := fast.observe(raised, t0.Add(61*time.Minute)); f.PerSecond != 0 {
		t.Fatalf("after a raise: %+v", f)
	}
}
