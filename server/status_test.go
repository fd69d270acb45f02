package server

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/api"
)

func TestStatusPageNeedsTheAdminToken(t *testing.T) {
	s := newTestServer(t, nil)
	tests := []struct {
		name   string
		req    request
		status int
		code   string
	}{
		{"no token", request{method: "GET", path: "/"}, 401, api.CodeMissingToken},
		{"unknown token", request{method: "GET", path: "/", token: "not-a-token-of-ours-at-all"}, 401, api.CodeInvalidToken},
		{"namespace token", request{method: "GET", path: "/", token: ordersTok}, 403, api.CodeForbidden},
		{"a token in the query is no token", request{method: "GET", path: "/?token=" + adminTok}, 401, api.CodeMissingToken},
		{"query parameters", request{method: "GET", path: "/?refresh=5", token: adminTok}, 400, api.CodeUnknownParameter},
		{"wrong method", request{method: "POST", path: "/", token: adminTok}, 405, api.CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		w := s.do(t, tt.req)
		if e := decode[api.Error](t, w); w.Code != tt.status || e.Error.Code != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, w.Code, e.Error.Code, tt.status, tt.code)
		}
		if strings.Contains(w.Body.String(), adminTok) || strings.Contains(w.Body.String(), ordersTok) {
			t.Errorf("%s: a token is in the answer", tt.name)
		}
	}
	w := s.do(t, request{method: "GET", path: "/", token: adminTok})
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("admin: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	for h, want := range map[string]string{"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
		"Content-Security-Policy": "default-src 'none'", "Referrer-Policy": "no-referrer"} {
		if !strings.Contains(w.Header().Get(h), want) {
			t.Errorf("%s: %q, want %q", h, w.Header().Get(h), want)
		}
	}
	if strings.Contains(w.Body.String(), "<script") || strings.Contains(w.Body.String(), adminTok) {
		t.Fatal("the page has a script or shows the token")
	}
	open := newTestServer(t, func(c *Config) { c.Auth = Auth{Disabled: true} })
	if w := open.do(t, request{method: "GET", path: "/"}); w.Code != 200 {
		t.Fatalf("authentication off: %d", w.Code)
	}
}

// attr returns the values of an attribute in the page, in order.
func attr(page, name string) []string {
	var out []string
	for _, m := range regexp.MustCompile(name+`="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

// section returns the part of the page about one namespace.
func section(t *testing.T, page, ns string) string {
	t.Helper()
	i := strings.Index(page, `data-namespace="`+ns+`"`)
	if i < 0 {
		t.Fatalf("no section for %s", ns)
	}
	rest := page[i:]
	if j := strings.Index(rest, "</section>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func TestStatusPageShowsServersSegmentsRatesAndLatency(t *testing.T) {
	clk := allocatortest.NewClock()
	m := NewMetrics()
	m.now = clk.Now
	s := newTestServer(t, func(c *Config) { c.now, c.Metrics = clk.Now, m })
	issued := int64(0)
	for _, size := range []int64{10, 20, 30} {
		w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: fmt.Sprintf(`{"size":%d}`, size)})
		if w.Code != 200 {
			t.Fatal(w.Body.String())
		}
		issued += size
		clk.Advance(time.Second)
	}
	waitIdle(t, s.Server)
	for _, ms := range []int{1, 2, 3, 4, 100} {
		m.ObserveLease("a", time.Duration(ms)*time.Millisecond, nil)
	}
	m.ObserveLease("a", 5*time.Second, fmt.Errorf("timeout"))
	s.fake.Fence("b", `counter below the <b>water mark</b>; run ticketd repair`)
	s.fake.SetReplication("a", "Galera cluster 3adab761 (3 nodes; this node Synced, component Primary)")

	page := s.do(t, request{method: "GET", path: "/", token: adminTok}).Body.String()
	if !strings.Contains(page, `<span class="muted" data-replication>Galera cluster 3adab761 (3 nodes; this node Synced, component Primary)</span>`) {
		t.Error("the status page does not say how server a replicates")
	}
	if got := strings.Join(attr(page, "data-namespace"), ","); got != "links,orders" {
		t.Fatalf("namespaces %q, want links,orders", got)
	}
	if got := strings.Join(attr(page, "data-fenced"), ","); got != "false,true" {
		t.Fatalf("fenced %q, want b only", got)
	}
	if strings.Contains(page, "<b>water mark</b>") || !strings.Contains(page, "&lt;b&gt;water mark&lt;/b&gt;") {
		t.Fatal("an error from the backend was not escaped")
	}
	// Server a: five leases in the last minute, one failure; p50 within the 2.5 ms bucket, max 100 ms.
	row := page[strings.Index(page, `data-server="a" data-healthy`):]
	row = row[:strings.Index(row, "</tr>")]
	for _, want := range []string{`<td class="n">5</td><td class="n">1</td>`, `22.0 ms`, `100 ms</td>`} {
		if !strings.Contains(row, want) {
			t.Errorf("server a's row lacks %q:\n%s", want, row)
		}
	}
	orders := section(t, page, "orders")
	counters := s.fake.Counters()
	for _, server := range []string{"a", "b"} {
		want := fmt.Sprintf(`data-server="%s" data-next="%d"`, server, counters["orders@"+server])
		if !strings.Contains(orders, want) {
			t.Errorf("orders lacks the counter %s", want)
		}
	}
	if got := attr(orders, "data-ids-last-minute"); len(got) != 1 || got[0] != fmt.Sprint(issued) {
		t.Errorf("IDs in the last minute %v, want %d", got, issued)
	}
	if got := strings.Join(attr(orders, "data-role"), ","); got != "current,next" && got != "current" {
		t.Errorf("segments %q", got)
	}
	// The current segment's remaining IDs are what the cache says.
	cur := s.cache.views()[0].Segments[0]
	if got := attr(orders, "data-remaining"); len(got) == 0 || got[0] != fmt.Sprint(cur.Remaining) || cur.Taken != issued {
		t.Errorf("remaining %v, cache %+v", got, cur)
	}
	if strings.Contains(section(t, page, "links"), "data-role") {
		t.Error("links shows segments, though nothing was leased from it")
	}

	// A minute later the rate and the latency have aged out; the counters stay.
	clk.Advance(61 * time.Second)
	page = s.do(t, request{method: "GET", path: "/", token: adminTok}).Body.String()
	if got := attr(section(t, page, "orders"), "data-ids-last-minute"); len(got) != 1 || got[0] != "0" {
		t.Errorf("IDs in the last minute a minute later: %v", got)
	}
	if sum := m.recentLatency()["a"]; sum.Leases != 0 || sum.Errors != 0 {
		t.Errorf("latency a minute later: %+v", sum)
	}
}

func TestStatusPageReportsABackendThatCannotList(t *testing.T) {
	s := newTestServer(t, nil)
	if w := s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok}); w.Code != 200 {
		t.Fatal(w.Body.String())
	}
	s.fake.SetDown("a", "")
	s.fake.SetDown("b", "")
	s.fake.SetListErr(fmt.Errorf("fake: both servers down"))
	w := s.do(t, request{method: "GET", path: "/", token: adminTok})
	page := w.Body.String()
	if w.Code != 200 || !strings.Contains(page, "could not list the namespaces: fake: both servers down") || !strings.Contains(page, "not ready") {
		t.Fatalf("%d\n%s", w.Code, page)
	}
	// What this replica knows by itself is still shown.
	if got := attr(page, "data-namespace"); len(got) != 1 || got[0] != "orders" {
		t.Fatalf("namespaces %v", got)
	}
}

func TestIDWindow(t *testing.T) {
	var w idWindow
	t0 := time.Unix(1_700_000_000, 0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				w.add(t0.Add(time.Duration(i%3)*time.Second), 2)
			}
		}()
	}
	wg.Wait()
	got := w.last(t0.Add(2 * time.Second))
	if got[57] != 8*334*2 || got[58] != 8*333*2 || got[59] != 8*333*2 {
		t.Fatalf("last three seconds %v", got[57:])
	}
	for _, n := range got[:57] {
		if n != 0 {
			t.Fatalf("older seconds %v", got[:57])
		}
	}
	// A slot is reused 60 seconds later: the old count is not added to the new.
	w.add(t0.Add(60*time.Second), 5)
	if got := w.last(t0.Add(60 * time.Second)); got[59] != 5 || got[0] != 8*333*2 || got[1] != 8*333*2 || got[2] != 0 {
		t.Fatalf("after a minute %v", got)
	}
	// A count too large for a slot saturates rather than wrapping into the second.
	big := time.Unix(1_800_000_000, 0)
	w.add(big, countMask)
	w.add(big, 10)
	if got := w.last(big); got[59] != countMask {
		t.Fatalf("saturated %d", got[59])
	}
}

// TestLastMinute: a namespace handed IDs within one second of the last minute keeps them in one slot,
// without a window; IDs in several seconds make the window, and every ID counts once, also when
// concurrent adds race to make it; a slot a minute old is reused for a new second.
func TestLastMinute(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var once lastMinute
	if n := testing.AllocsPerRun(100, func() { once.add(t0, 1) }); n != 0 || once.window.Load() != nil {
		t.Fatalf("IDs within one second: %v allocations, window %v", n, once.window.Load() != nil)
	}
	if got, ok := once.last(t0.Add(59 * time.Second)); !ok || got[0] != 101 || sum(got[:]) != 101 {
		t.Fatalf("59 s later: %v %v", ok, got)
	}
	if _, ok := once.last(t0.Add(60 * time.Second)); ok {
		t.Fatal("a minute later the slot still shows")
	}
	once.add(t0.Add(60*time.Second), 4) // the slot is reused: still no window
	if got, ok := once.last(t0.Add(60 * time.Second)); !ok || got[59] != 4 || sum(got[:]) != 4 || once.window.Load() != nil {
		t.Fatalf("the slot reused: %v %v, window %v", ok, got, once.window.Load() != nil)
	}

	var l lastMinute
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				l.add(t0.Add(time.Duration(i%3)*time.Second), 2)
			}
		}()
	}
	wg.Wait()
	got, ok := l.last(t0.Add(2 * time.Second))
	if !ok || l.window.Load() == nil || got[57] != 8*334*2 || got[58] != 8*333*2 || got[59] != 8*333*2 || sum(got[:]) != 8*1000*2 {
		t.Fatalf("last three seconds %v (window %v)", got[57:], l.window.Load() != nil)
	}
	l.dropIdle(t0.Add(30 * time.Second))
	if l.window.Load() == nil {
		t.Fatal("a window with IDs of the last minute was dropped")
	}
	l.dropIdle(t0.Add(70 * time.Second))
	if _, ok := l.last(t0.Add(70 * time.Second)); ok || l.window.Load() != nil {
		t.Fatal("a window idle for a minute was kept")
	}
}

func sum(counts []int64) (n int64) {
	for _, c := range counts {
		n += c
	}
	return n
}

// TestStatusPageFillsTheRowsItShows: past maxStatusNamespaces the page names how many more there are,
// and what it gathers for them is their names: a page of a process with tens of thousands of
// namespaces handed IDs of late does not build a row, a chart and counters for each.
func TestStatusPageFillsTheRowsItShows(t *testing.T) {
	s := newTestServer(t, nil)
	ctx := context.Background()
	const extra = 2000
	now := s.cfg.now()
	for i := range maxStatusNamespaces + extra {
		name := fmt.Sprintf("ns%05d", i)
		if _, err := s.fake.CreateNamespace(ctx, allocator.Namespace{Name: name}); err != nil {
			t.Fatal(err)
		}
		s.metrics.observeIssued(name, 1, true, now)
	}
	s.status(ctx) // the forecasts' first samples
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p := s.status(ctx)
	runtime.ReadMemStats(&after)
	if p.Hidden != extra+2 || len(p.Namespaces) != maxStatusNamespaces || p.Namespaces[0].Name != "links" || p.Namespaces[1].Name != "ns00000" {
		t.Fatalf("%d rows from %s, %d hidden", len(p.Namespaces), p.Namespaces[0].Name, p.Hidden)
	}
	if r := p.Namespaces[1]; !r.Known || r.Rate.Total != 1 || len(r.Counters) == 0 {
		t.Fatalf("a row shown is not filled in: %+v", r)
	}
	// Most of it is the backend's listing; a row, chart and counters each was 5.8 KB a namespace.
	if per := (after.TotalAlloc - before.TotalAlloc) / (maxStatusNamespaces + extra); per > 2500 {
		t.Errorf("the page's data allocated %d bytes a namespace, want at most 2500", per)
	}
}

func TestLatencyQuantiles(t *testing.T) {
	var w latencyWindow
	now := time.Unix(1_700_000_000, 0)
	// 100 leases: 98 of 0.3 ms (bucket 0.25–0.5 ms), 2 of 40 ms (bucket 25–50 ms).
	for i := 0; i < 98; i++ {
		w.add(now, 300*time.Microsecond, false)
	}
	w.add(now, 40*time.Millisecond, false)
	w.add(now.Add(-30*time.Second), 40*time.Millisecond, false)
	w.add(now.Add(-95*time.Second), 3*time.Second, false) // too old
	sum := w.summary(now)
	if sum.Leases != 100 || sum.Max != 40*time.Millisecond {
		t.Fatalf("%+v", sum)
	}
	if sum.P50 <= 250*time.Microsecond || sum.P50 > 500*time.Microsecond {
		t.Errorf("p50 %v, want within 0.25–0.5 ms", sum.P50)
	}
	if sum.P99 <= 25*time.Millisecond || sum.P99 > 40*time.Millisecond {
		t.Errorf("p99 %v, want within 25–40 ms", sum.P99)
	}
	if want := (98*300*time.Microsecond + 80*time.Millisecond) / 100; sum.Mean != want {
		t.Errorf("mean %v, want %v", sum.Mean, want)
	}
	// Beyond the last bucket, the largest value seen bounds the estimate.
	var slow latencyWindow
	slow.add(now, 9*time.Second, false)
	if s := slow.summary(now); s.P99 <= 5*time.Second || s.P99 > 9*time.Second || s.P50 <= 5*time.Second || s.Max != 9*time.Second {
		t.Errorf("beyond the buckets: %+v", s)
	}
}

func TestFormatCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 9223372036854775807: "9,223,372,036,854,775,807"} {
		if got := formatCount(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}
