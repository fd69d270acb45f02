// Command sdkmetrics shows the SDK's hooks exported to Prometheus: a service that takes IDs from
// ticketd with the Go SDK counts its refills, stalls, hedges and discarded IDs beside its own metrics.
// It serves one ID per request on /id and its metrics on /metrics.
//
//	TICKETD_TOKEN=… go run ./examples/sdkmetrics --ticketd http://127.0.0.1:8080 --namespace orders
//
// The SDK module itself depends on no metrics library: the hooks are plain functions (client.Hooks),
// and this file is where a service ties them to the library it already uses.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ticketd/ticketd/client"
)

// sdkMetrics are the SDK's counts as Prometheus metrics. Their labels are the SDK's own (result,
// reason) and the namespace as ticketd_namespace, never a label a scrape adds.
type sdkMetrics struct {
	refills   *prometheus.CounterVec
	refillIDs prometheus.Counter
	latency   prometheus.Histogram
	stalls    prometheus.Counter
	hedges    *prometheus.CounterVec
	discarded *prometheus.CounterVec
}

// newSDKMetrics registers the metrics of one Client, of namespace ns, in reg.
func newSDKMetrics(reg prometheus.Registerer, ns string) *sdkMetrics {
	labels := prometheus.Labels{"ticketd_namespace": ns}
	m := &sdkMetrics{
		refills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ticketd_sdk_refills_total",
			Help: "Leases the SDK made, by result (ok, error).", ConstLabels: labels}, []string{"result"}),
		refillIDs: prometheus.NewCounter(prometheus.CounterOpts{Name: "ticketd_sdk_refilled_ids_total",
			Help: "IDs the SDK leased.", ConstLabels: labels}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ticketd_sdk_refill_duration_seconds",
			Help: "How long the SDK's leases took.", ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{Name: "ticketd_sdk_stalls_total",
			Help: "Calls that found the SDK's cache empty and waited for a lease.", ConstLabels: labels}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ticketd_sdk_hedges_total",
			Help: "Second leases sent for slow refills (won: false), and those whose block came first (won: true).", ConstLabels: labels}, []string{"won"}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ticketd_sdk_discarded_ids_total",
			Help: "IDs the SDK dropped unserved, by reason (expired, spare).", ConstLabels: labels}, []string{"reason"}),
	}
	reg.MustRegister(m.refills, m.refillIDs, m.latency, m.stalls, m.hedges, m.discarded)
	return m
}

// hooks ties the SDK's hooks to the metrics. Each hook only adds to a metric: quick, and it never
// calls the Client.
func (m *sdkMetrics) hooks() client.Hooks {
	return client.Hooks{
		Refill: func(ids int64, took time.Duration, err error) {
			if err != nil {
				m.refills.WithLabelValues("error").Inc()
				return
			}
			m.refills.WithLabelValues("ok").Inc()
			m.refillIDs.Add(float64(ids))
			m.latency.Observe(took.Seconds())
		},
		Stall: m.stalls.Inc,
		Hedge: func(won bool) { m.hedges.WithLabelValues(fmt.Sprint(won)).Inc() },
		Discard: func(ids int64, reason string) {
			m.discarded.WithLabelValues(reason).Add(float64(ids))
		},
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sdkmetrics:", err)
		os.Exit(1)
	}
}

func run() error {
	urls := flag.String("ticketd", "http://127.0.0.1:8080", "ticketd's `URLS`, comma-separated")
	ns := flag.String("namespace", "orders", "the `NAMESPACE` to take IDs from")
	listen := flag.String("listen", "127.0.0.1:8082", "`HOST:PORT` to serve /id and /metrics on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	metrics := newSDKMetrics(reg, *ns)
	ids, err := client.New(client.HTTP(strings.Split(*urls, ",")...), *ns,
		client.WithToken(os.Getenv("TICKETD_TOKEN")), client.WithHooks(metrics.hooks()))
	if err != nil {
		return err
	}
	defer ids.Close()

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /id", func(w http.ResponseWriter, r *http.Request) {
		id, err := ids.Next(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, id)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}
