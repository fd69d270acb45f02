package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/inprocess"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestHooksReachPrometheus: a Client on the embedded store with the hooks wired in: its refills reach
// the registry as Stats counts them, and each hook adds to its own metric.
func TestHooksReachPrometheus(t *testing.T) {
	store := testenv.Embedded(t, allocator.Namespace{Name: "orders"})
	reg := prometheus.NewRegistry()
	m := newSDKMetrics(reg, "orders")
	c, err := client.New(inprocess.Source(store), "orders", client.WithHooks(m.hooks()), client.WithMinBlockSize(10), client.WithMaxBlockSize(10))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 25 {
		if _, err := c.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Closed, the client refills no more in the background: Stats and the registry count the same refills.
	c.Close()
	st := c.Stats()
	if got := value(t, reg, "ticketd_sdk_refills_total", "ok"); got != float64(st.Refills) || got < 3 {
		t.Fatalf("ticketd_sdk_refills_total{result=ok} %v; Stats says %d refills", got, st.Refills)
	}
	h := m.hooks()
	h.Stall()
	h.Hedge(false)
	h.Hedge(true)
	h.Discard(7, client.DiscardSpare)
	h.Refill(0, time.Millisecond, errors.New("down"))
	for _, tc := range []struct {
		name, label string
		want        float64
	}{
		{"ticketd_sdk_stalls_total", "", float64(st.Stalls) + 1},
		{"ticketd_sdk_hedges_total", "false", 1},
		{"ticketd_sdk_hedges_total", "true", 1},
		{"ticketd_sdk_discarded_ids_total", "spare", 7},
		{"ticketd_sdk_refills_total", "error", 1},
	} {
		if got := value(t, reg, tc.name, tc.label); got != tc.want {
			t.Errorf("%s{%s}: %v, want %v", tc.name, tc.label, got, tc.want)
		}
	}
	families, _ := reg.Gather()
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "ticketd_sdk_") {
			t.Errorf("metric %s", f.GetName())
		}
	}
}

// value is the counter name's value in reg, of the series whose label other than ticketd_namespace has
// the value label (any series when label is empty); -1 when there is none.
func value(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if label == "" || l.GetName() != "ticketd_namespace" && l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
