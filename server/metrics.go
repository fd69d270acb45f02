package server

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/version"
)

// Metrics holds ticketd's Prometheus metrics in a registry of its own. It is also the allocator.Observer
// to give the backend (mysql.Config.Observer), so that lease latency is recorded per ticket server.
// Safe for concurrent use; one Metrics serves one Server.
type Metrics struct {
	reg *prometheus.Registry
	// perNamespace holds the collectors of the series of each namespace (see nsCollector and
	// remainingCollector): the handler writes those series itself (see serveMetrics).
	perNamespace *prometheus.Registry
	headroom     func() scrapeHeadroom // the IDs left below each namespace's ceiling; nil until a Server has it
	handlerOnce  sync.Once
	handler      http.Handler
	fallback     http.Handler  // for a scraper that does not take the text format
	scrapes      chan struct{} // one token per scrape served at once

	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	leaseSeconds *prometheus.HistogramVec
	failovers    *prometheus.CounterVec
	authFailures prometheus.Counter
	authRefused  prometheus.Counter
	blocks       *prometheus.CounterVec
	fetches      *prometheus.CounterVec
	// Totals over the namespaces: blocks by source, segment leases by result.
	blocksCached, blocksDirect prometheus.Counter
	fetchesOK, fetchesFailed   prometheus.Counter

	// Label lookups cost a hash and a map access; the hot path keeps the children it has seen. The
	// counts of each namespace are plain atomics, reported at a scrape by nsCollector: a namespace
	// costs a hundred bytes, not a client_golang child (with its label pairs) per series.
	mu       sync.RWMutex
	reqChild map[reqKey]prometheus.Counter
	durChild map[string]prometheus.Observer
	idsChild map[string]*nsCounters
	// recentAt is when the IDs-per-second windows were last looked through for idle ones (unix
	// seconds; see dropIdleWindows).
	recentAt atomic.Int64

	// For the status page: lease latency of the last minute per ticket server.
	now     func() time.Time
	latMu   sync.Mutex
	latency map[string]*latencyWindow
}

type reqKey struct {
	route, method string
	status        int
}

// nsCounters are one namespace's counts since the process started, and the IDs it was handed per
// second of the last minute, for the status page (see lastMinute: an idle namespace keeps its counters
// and one slot).
type nsCounters struct {
	ids, stalls, hedges, hedgesWon atomic.Int64
	recent                         lastMinute
}

// nsLabel is the label that names a namespace. Not "namespace": Prometheus's Kubernetes discovery adds
// that label to every series it scrapes, for the Kubernetes namespace (and job, instance, pod and
// container are a scrape's too); rules and dashboards would group by the wrong one.
const nsLabel = "ticketd_namespace"

// latencyBuckets are the bucket bounds, in seconds, of the latency histograms.
var latencyBuckets = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

var _ allocator.Observer = (*Metrics)(nil)

// NewMetrics returns the metrics, with Go runtime and process collectors registered.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(), perNamespace: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ticketd_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ticketd_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: latencyBuckets[:],
		}, []string{"route"}),
		leaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ticketd_lease_duration_seconds", Help: "Latency of one lease attempt on one ticket server, by result.",
			Buckets: latencyBuckets[:],
		}, []string{"server", "result"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ticketd_failovers_total", Help: "Leases that moved on from a failed ticket server to the next, by the server that failed.",
		}, []string{"from"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ticketd_auth_failures_total", Help: "Requests with a wrong or malformed token (the server log names the client addresses).",
		}),
		authRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ticketd_auth_refused_total", Help: "Requests with a token refused 429, unread, because their client address sent too many wrong ones.",
		}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ticketd_blocks_issued_total",
			Help: "Blocks handed to clients, over every namespace, by source (cache: carved from a cached segment; backend: leased for the request).",
		}, []string{"source"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ticketd_cache_fetches_total", Help: "Segment leases by the cache, over every namespace, by result.",
		}, []string{"result"}),
		reqChild: map[reqKey]prometheus.Counter{},
		durChild: map[string]prometheus.Observer{},
		idsChild: map[string]*nsCounters{},
		now:      time.Now,
		latency:  map[string]*latencyWindow{},
	}
	m.blocksCached, m.blocksDirect = m.blocks.WithLabelValues("cache"), m.blocks.WithLabelValues("backend")
	m.fetchesOK, m.fetchesFailed = m.fetches.WithLabelValues("ok"), m.fetches.WithLabelValues("error")
	m.reg.MustRegister(m.requests, m.duration, m.leaseSeconds, m.failovers, m.authFailures, m.authRefused, m.blocks, m.fetches,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	m.perNamespace.MustRegister(newNSCollector(m))
	return m
}

// Registry is where the metrics live, but for the series of each namespace (Gather and Handler
// serve those too); register more collectors here.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Gather returns every metric family, the series of each namespace included.
func (m *Metrics) Gather() ([]*dto.MetricFamily, error) {
	return prometheus.Gatherers{m.reg, m.perNamespace}.Gather()
}

// Handler serves the metrics: in the Prometheus text format, the series of each namespace written
// straight from their counts (see serveMetrics); to a scraper that asks for another format, through
// Gather.
func (m *Metrics) Handler() http.Handler {
	m.handlerOnce.Do(func() {
		// Each scrape reads every namespace's state; a few at once are enough for any scraper, and
		// more are answered 503 at once instead of piling up.
		m.scrapes = make(chan struct{}, maxScrapesInFlight)
		m.fallback = promhttp.HandlerFor(prometheus.GathererFunc(m.Gather), promhttp.HandlerOpts{MaxRequestsInFlight: maxScrapesInFlight})
		m.handler = http.HandlerFunc(m.serveMetrics)
	})
	return m.handler
}

// countHeadroom makes the IDs left below each namespace's ceiling, as headroom reads them, a series of
// each namespace (ticketd_namespace_ids_remaining). Once per Metrics: one Metrics serves one Server.
func (m *Metrics) countHeadroom(headroom func() scrapeHeadroom) error {
	if err := m.perNamespace.Register(&remainingCollector{headroom: headroom}); err != nil {
		return err
	}
	m.headroom = headroom
	return nil
}

// maxScrapesInFlight bounds the scrapes served at once.
const maxScrapesInFlight = 4

// ObserveLease records one lease attempt on a ticket server.
func (m *Metrics) ObserveLease(server string, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.leaseSeconds.WithLabelValues(server, result).Observe(took.Seconds())
	m.latMu.Lock()
	w := m.latency[server]
	if w == nil {
		w = &latencyWindow{}
		m.latency[server] = w
	}
	m.latMu.Unlock()
	w.add(m.now(), took, err != nil)
}

// recentLatency summarizes each ticket server's lease attempts of the last minute.
func (m *Metrics) recentLatency() map[string]latencySummary {
	m.latMu.Lock()
	windows := make(map[string]*latencyWindow, len(m.latency))
	for name, w := range m.latency {
		windows[name] = w
	}
	m.latMu.Unlock()
	now := m.now()
	out := make(map[string]latencySummary, len(windows))
	for name, w := range windows {
		out[name] = w.summary(now)
	}
	return out
}

// recentIDs returns, per namespace, the IDs handed out in each second of the last minute.
func (m *Metrics) recentIDs(now time.Time) map[string][windowSeconds]int64 {
	out := map[string][windowSeconds]int64{}
	for _, name := range m.recentNames(now) {
		out[name], _ = m.recent(name, now)
	}
	return out
}

// recentNames returns the namespaces handed IDs in the last minute (and those whose window is not
// dropped yet).
func (m *Metrics) recentNames(now time.Time) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []string
	for name, n := range m.idsChild {
		if _, ok := n.recent.last(now); ok {
			out = append(out, name)
		}
	}
	return out
}

// recent returns the IDs handed out from the namespace in each second of the last minute, and false
// when it was handed none.
func (m *Metrics) recent(name string, now time.Time) ([windowSeconds]int64, bool) {
	m.mu.RLock()
	n := m.idsChild[name]
	m.mu.RUnlock()
	if n == nil {
		return [windowSeconds]int64{}, false
	}
	return n.recent.last(now)
}

// dropIdleWindows drops, at most once a minute, the windows of the namespaces handed no ID in the
// last minute: they hold nothing the status page shows. An ID counted into a window at the moment
// it is dropped is missing from the page's last minute; the counters keep it.
func (m *Metrics) dropIdleWindows(now time.Time) {
	sec := now.Unix()
	if at := m.recentAt.Load(); sec-at < windowSeconds || !m.recentAt.CompareAndSwap(at, sec) {
		return
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, n := range m.idsChild {
		n.recent.dropIdle(now)
	}
}

// ObserveFailover records a lease moving on from a failed server.
func (m *Metrics) ObserveFailover(from string) { m.failovers.WithLabelValues(from).Inc() }

func (m *Metrics) observeRequest(route, method string, status int, took time.Duration) {
	k := reqKey{route, method, status}
	m.mu.RLock()
	c, okc := m.reqChild[k]
	d, okd := m.durChild[route]
	m.mu.RUnlock()
	if !okc || !okd {
		m.mu.Lock()
		if c, okc = m.reqChild[k]; !okc {
			c = m.requests.WithLabelValues(route, method, strconv.Itoa(status))
			m.reqChild[k] = c
		}
		if d, okd = m.durChild[route]; !okd {
			d = m.duration.WithLabelValues(route)
			m.durChild[route] = d
		}
		m.mu.Unlock()
	}
	c.Inc()
	d.Observe(took.Seconds())
}

// namespace returns the counts of the namespace, made at its first use.
func (m *Metrics) namespace(name string) *nsCounters {
	m.mu.RLock()
	n, ok := m.idsChild[name]
	m.mu.RUnlock()
	if !ok {
		m.mu.Lock()
		if n, ok = m.idsChild[name]; !ok {
			n = &nsCounters{}
			m.idsChild[strings.Clone(name)] = n // the name alone, not the request path it may be part of
		}
		m.mu.Unlock()
	}
	return n
}

// observeIssued counts a block handed to a client at now.
func (m *Metrics) observeIssued(namespace string, size int64, cached bool, now time.Time) {
	n := m.namespace(namespace)
	n.ids.Add(size)
	n.recent.add(now, size)
	if cached {
		m.blocksCached.Inc()
	} else {
		m.blocksDirect.Inc()
	}
	m.dropIdleWindows(now)
}

// observeFetch counts a segment lease of the cache (the namespace's failures are on the status page).
func (m *Metrics) observeFetch(err error) {
	if err != nil {
		m.fetchesFailed.Inc()
	} else {
		m.fetchesOK.Inc()
	}
}

func (m *Metrics) observeStall(namespace string) { m.namespace(namespace).stalls.Add(1) }

// observeHedge counts a hedge sent, or one that won.
func (m *Metrics) observeHedge(namespace string, won bool) {
	if won {
		m.namespace(namespace).hedgesWon.Add(1)
	} else {
		m.namespace(namespace).hedges.Add(1)
	}
}

// nsCollector reports each namespace's counts (see nsCounters): the IDs issued from the namespace's
// first block on, and the stalls and hedges once their count is not zero. The blocks issued and the
// segment leases are totals over the namespaces (Metrics.blocks, Metrics.fetches): per namespace they
// were four more series each, at every scrape, for what the status page shows.
type nsCollector struct {
	m                              *Metrics
	ids, stalls, hedges, hedgesWon *prometheus.Desc
}

// The series of each namespace: their names and help.
const (
	idsName, idsHelp             = "ticketd_ids_issued_total", "IDs handed to clients, by namespace."
	stallsName, stallsHelp       = "ticketd_cache_stalls_total", "Requests that found the namespace's cache empty and waited for a backend call (the prefetch came too late)."
	hedgesName, hedgesHelp       = "ticketd_cache_hedges_total", "Segment leases not answered within the hedge delay that sent a second lease to another ticket server, by namespace."
	hedgesWonName, hedgesWonHelp = "ticketd_cache_hedges_won_total", "Hedged segment leases whose second lease brought a segment first, by namespace."
	remainingName                = "ticketd_namespace_ids_remaining"
	remainingHelp                = "IDs the namespace's ticket servers may still issue at or below its max_id, summed over the servers; a server that cannot be read counts at the counter it was last read at (see ticketd_headroom_stale)."
)

func newNSCollector(m *Metrics) *nsCollector {
	return &nsCollector{m: m,
		ids:       prometheus.NewDesc(idsName, idsHelp, []string{nsLabel}, nil),
		stalls:    prometheus.NewDesc(stallsName, stallsHelp, []string{nsLabel}, nil),
		hedges:    prometheus.NewDesc(hedgesName, hedgesHelp, []string{nsLabel}, nil),
		hedgesWon: prometheus.NewDesc(hedgesWonName, hedgesWonHelp, []string{nsLabel}, nil),
	}
}

// nsCount is a namespace's counts, as a scrape reads them.
type nsCount struct {
	name string
	n    *nsCounters
}

// namespaceCounts returns every namespace's counts, sorted by name.
func (m *Metrics) namespaceCounts() []nsCount {
	m.mu.RLock()
	out := make([]nsCount, 0, len(m.idsChild))
	for name, n := range m.idsChild {
		out = append(out, nsCount{name, n})
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b nsCount) int { return strings.Compare(a.name, b.name) })
	return out
}

func (c *nsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ids, c.stalls, c.hedges, c.hedgesWon} {
		ch <- d
	}
}

func (c *nsCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		if v != 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
	}
	for _, c2 := range c.m.namespaceCounts() {
		counter(c.ids, c2.n.ids.Load(), c2.name)
		counter(c.stalls, c2.n.stalls.Load(), c2.name)
		counter(c.hedges, c2.n.hedges.Load(), c2.name)
		counter(c.hedgesWon, c2.n.hedgesWon.Load(), c2.name)
	}
}

// remainingCollector reports each namespace's headroom (ticketd_namespace_ids_remaining).
type remainingCollector struct {
	headroom func() scrapeHeadroom
}

var remainingDesc = prometheus.NewDesc(remainingName, remainingHelp, []string{nsLabel}, nil)

func (rc *remainingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- remainingDesc }

func (rc *remainingCollector) Collect(ch chan<- prometheus.Metric) {
	for name, left := range rc.headroom().left {
		ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, float64(left), name)
	}
}

// observeAuthFailure counts a wrong token, or (refused) a request turned away for too many of them.
func (m *Metrics) observeAuthFailure(refused bool) {
	if refused {
		m.authRefused.Inc()
	} else {
		m.authFailures.Inc()
	}
}

// stateCollector reports, at each scrape, ticket server health, the cache's segments and whether the
// headroom's reading of each server's counters is stale (see remainingCollector for the headroom).
type stateCollector struct {
	health   allocator.HealthReporter // may be nil
	cache    *segmentCache            // may be nil
	up       *prometheus.Desc
	fenced   *prometheus.Desc
	marks    *prometheus.Desc
	segments *prometheus.Desc
	left     *prometheus.Desc
	size     *prometheus.Desc
	headroom func() scrapeHeadroom // which servers' counters could be read (ticketd_headroom_stale)
	stale    *prometheus.Desc
}

func newStateCollector(h allocator.HealthReporter, c *segmentCache, headroom func() scrapeHeadroom) *stateCollector {
	return &stateCollector{health: h, cache: c, headroom: headroom,
		stale: prometheus.NewDesc("ticketd_headroom_stale",
			"1 when the ticket server's counters could not be read at this scrape, 0 when they were: ticketd_namespace_ids_remaining counts it at the counters it was last read at.", []string{"server"}, nil),
		up: prometheus.NewDesc("ticketd_ticket_server_up", "1 when the ticket server is usable, 0 when it is not.", []string{"server"}, nil),
		fenced: prometheus.NewDesc("ticketd_ticket_server_fenced",
			"1 when the ticket server is fenced: its counter is below a peer's water mark (restored from an old backup?); see /readyz, the status page or ticketd doctor.", []string{"server"}, nil),
		marks: prometheus.NewDesc("ticketd_watermarks_failing",
			"1 while this process's water marks cannot be written into the ticket server (a missing grant, a full disk): it serves, but the restored-state guard forgets what this process saw when it stops; /readyz and ticketd doctor say why.", []string{"server"}, nil),
		// The cache's gauges are totals: per namespace they would be three series each, at every scrape,
		// for what the status page shows.
		segments: prometheus.NewDesc("ticketd_cache_segments", "Segments cached (current and prefetched), over every namespace.", nil, nil),
		left:     prometheus.NewDesc("ticketd_cache_remaining_ids", "IDs left in the cached segments, over every namespace.", nil, nil),
		size:     prometheus.NewDesc("ticketd_cache_namespaces", "Namespaces with a cache (see --cache-idle).", nil, nil),
	}
}

func (sc *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sc.up
	ch <- sc.fenced
	ch <- sc.marks
	ch <- sc.segments
	ch <- sc.left
	ch <- sc.size
	ch <- sc.stale
}

func (sc *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if sc.health != nil {
		for _, h := range sc.health.Health() {
			v := 0.0
			if h.Healthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(sc.up, prometheus.GaugeValue, v, h.Name)
			f := 0.0
			if h.Fenced {
				f = 1
			}
			ch <- prometheus.MustNewConstMetric(sc.fenced, prometheus.GaugeValue, f, h.Name)
			m := 0.0
			if h.Marks != "" {
				m = 1
			}
			ch <- prometheus.MustNewConstMetric(sc.marks, prometheus.GaugeValue, m, h.Name)
		}
	}
	if sc.cache != nil {
		var segments, left float64
		stats := sc.cache.stats()
		for _, st := range stats {
			segments += float64(st.Segments)
			left += float64(st.Remaining)
		}
		ch <- prometheus.MustNewConstMetric(sc.segments, prometheus.GaugeValue, segments)
		ch <- prometheus.MustNewConstMetric(sc.left, prometheus.GaugeValue, left)
		ch <- prometheus.MustNewConstMetric(sc.size, prometheus.GaugeValue, float64(len(stats)))
	}
	if sc.headroom != nil {
		h := sc.headroom()
		for name, stale := range h.stale {
			v := 0.0
			if stale {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(sc.stale, prometheus.GaugeValue, v, name)
		}
	}
}

// buildInfo is ticketd_build_info: 1, labelled with the running build, so that a dashboard can tell
// which version each replica runs.
func buildInfo() prometheus.Collector {
	in := version.Get()
	dirty := "false"
	if in.Dirty {
		dirty = "true"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ticketd_build_info",
		Help:        "The running build of ticketd: its version, the commit it was built from, whether the tree had uncommitted changes, the Go release. Always 1.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": in.Commit, "dirty": dirty, "goversion": in.Go}})
	g.Set(1)
	return g
}
