package server

import (
	"errors"
	"strings"
	"testing"
	"time"
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
