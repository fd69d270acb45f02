package server

import (
	"errors"
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
	s.metrics.observeFetch("orders", errors.New("down"))
	s.metrics.observeStall("orders")
	s.metrics.observeHedge("orders", false)
	s.metrics.observeHedge("orders", true)
	waitIdle(t, s.Server)
	s.do(t, request{method: "GET", path: "/metrics", token: adminTok}) // the headroom is read at a scrape
	families, err := s.metrics.Registry().Gather()
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
