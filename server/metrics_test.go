package server

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// scrapeLabels are the labels a Prometheus scrape adds to every series (the target's job and instance,
// and on Kubernetes its namespace, pod and container). A metric of ticketd's with one of them would
// have it overwritten, or renamed to exported_*, and rules and dashboards would group by the wrong one.
var scrapeLabels = map[string]bool{"namespace": true, "job": true, "instance": true, "pod": true, "container": true}

// TestMetricLabelsAreNotScrapeLabels: no series of ticketd's carries a label that scraping adds. Every
// metric that takes a label is made to have a series first.
func TestMetricLabelsAreNotScrapeLabels(t *testing.T) {
	s := newTestServer(t, nil)
	for range 3 {
		s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":7}`})
	}
	s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":400}`})
	s.do(t, request{method: "GET", path: "/v1/namespaces/orders", token: "wrong-token-0123456789"})
	s.metrics.ObserveLease("a", 3*time.Millisecond, nil)
	s.metrics.ObserveLease("b", time.Second, errors.New("down"))
	s.metrics.ObserveFailover("b")
	s.metrics.observeFetch(errors.New("down"))
	s.metrics.observeStall("orders")
	s.metrics.observeHedge("orders", false)
	s.metrics.observeHedge("orders", true)
	waitIdle(t, s.Server)
	s.do(t, request{method: "GET", path: "/metrics", token: adminTok}) // the headroom is read at a scrape
	families, err := s.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labelled := 0
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "ticketd_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labelled++
				if scrapeLabels[l.GetName()] {
					t.Errorf("%s has the label %q, which scraping adds: %v", f.GetName(), l.GetName(), m.GetLabel())
				}
			}
		}
	}
	if labelled == 0 {
		t.Fatal("no labelled ticketd series to check")
	}
}

// TestIdleNamespacesAreDropped: a namespace without a request for the cache's IdleAfter is dropped
// from the cache at the next look (a scrape), with its gauges; one still asked for stays, and a
// dropped one is served again from a new segment.
func TestIdleNamespacesAreDropped(t *testing.T) {
	clk := allocatortest.NewClock()
	s := newTestServer(t, func(c *Config) { c.now, c.Cache.IdleAfter = clk.Now, time.Minute })
	for _, ns := range []string{"orders", "links"} {
		if w := s.do(t, request{method: "POST", path: "/v1/namespaces/" + ns + "/blocks", token: adminTok}); w.Code != 200 {
			t.Fatalf("lease: %d %s", w.Code, w.Body.String())
		}
	}
	waitIdle(t, s.Server)
	gauges := func() string {
		return s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
	}
	if m := gauges(); !strings.Contains(m, "ticketd_cache_namespaces 2\n") {
		t.Fatalf("not two namespaces cached:\n%s", grepLines(m, "ticketd_cache_"))
	}
	clk.Advance(40 * time.Second)
	s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: adminTok})
	waitIdle(t, s.Server)
	clk.Advance(40 * time.Second) // links idle 80 s, orders 40 s
	m := gauges()
	if !strings.Contains(m, "ticketd_cache_namespaces 1\n") {
		t.Fatalf("after links was idle past IdleAfter, the cache gauges are:\n%s", grepLines(m, "ticketd_cache_"))
	}
	if !strings.Contains(m, `ticketd_ids_issued_total{ticketd_namespace="links"}`) {
		t.Fatal("the counters of a dropped namespace went with it")
	}
	if w := s.do(t, request{method: "POST", path: "/v1/namespaces/links/blocks", token: adminTok}); w.Code != 200 {
		t.Fatalf("lease after the drop: %d %s", w.Code, w.Body.String())
	}
}

// TestSeriesPerNamespace: a namespace leased from costs two series at a scrape, the IDs issued and
// the IDs left below its ceiling; the blocks by source and the segment leases are totals over the
// namespaces. A scrape of 10,000 namespaces builds every series it serves, so each one per namespace
// is 10,000 more.
func TestSeriesPerNamespace(t *testing.T) {
	const n = 40
	s := newTestServer(t, nil)
	for i := range n {
		name := fmt.Sprintf("ns%03d", i)
		if w := s.do(t, request{method: "PUT", path: "/v1/namespaces/" + name, token: adminTok, body: `{"block_size":10,"max_block_size":100000}`}); w.Code != 201 {
			t.Fatalf("create %s: %d %s", name, w.Code, w.Body.String())
		}
		for _, size := range []string{`{"size":3}`, `{"size":5000}`} { // from a segment, and leased for itself
			if w := s.do(t, request{method: "POST", path: "/v1/namespaces/" + name + "/blocks", token: adminTok, body: size}); w.Code != 200 {
				t.Fatalf("lease %s: %d %s", name, w.Code, w.Body.String())
			}
		}
	}
	waitIdle(t, s.Server)
	s.do(t, request{method: "GET", path: "/metrics", token: adminTok}) // the headroom is read at a scrape
	families, err := s.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	perNamespace := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == nsLabel && strings.HasPrefix(l.GetValue(), "ns") {
					perNamespace[f.GetName()]++
				}
			}
		}
	}
	want := map[string]int{"ticketd_ids_issued_total": n, "ticketd_namespace_ids_remaining": n}
	if !maps.Equal(perNamespace, want) {
		t.Fatalf("series by namespace of %d namespaces: %v, want %v", n, perNamespace, want)
	}
	body := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
	for _, line := range []string{fmt.Sprintf(`ticketd_blocks_issued_total{source="cache"} %d`, n), fmt.Sprintf(`ticketd_blocks_issued_total{source="backend"} %d`, n)} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("no %s in:\n%s", line, grepLines(body, "ticketd_blocks_issued_total"))
		}
	}
}

// TestIdleWindowsAreDropped: the IDs per second of a namespace's last minute (for the status page)
// are kept while it is handed IDs, and dropped once a minute passed without any; its counter stays.
func TestIdleWindowsAreDropped(t *testing.T) {
	m := NewMetrics()
	t0 := time.Unix(1_800_000_000, 0)
	m.observeIssued("busy", 5, true, t0)
	m.observeIssued("quiet", 7, true, t0)
	if got := m.recentIDs(t0); len(got) != 2 || got["quiet"][windowSeconds-1] != 7 {
		t.Fatalf("windows after the first IDs: %v", got)
	}
	for i := 1; i <= 3; i++ {
		m.observeIssued("busy", 1, true, t0.Add(time.Duration(i)*30*time.Second))
	}
	now := t0.Add(90 * time.Second)
	got := m.recentIDs(now)
	if _, ok := got["quiet"]; ok {
		t.Errorf("the window of a namespace idle for %s is kept", now.Sub(t0))
	}
	if _, ok := got["busy"]; !ok {
		t.Error("the window of a namespace handed IDs 0 s ago was dropped")
	}
	body := func() string {
		var b strings.Builder
		families, err := m.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				if f.GetName() == "ticketd_ids_issued_total" {
					fmt.Fprintf(&b, "%s %v\n", s.GetLabel()[0].GetValue(), s.GetCounter().GetValue())
				}
			}
		}
		return b.String()
	}()
	if !strings.Contains(body, "quiet 7\n") || !strings.Contains(body, "busy 8\n") {
		t.Fatalf("the counters after the drop:\n%s", body)
	}
}
