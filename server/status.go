package server

import (
	"bytes"
	"context"
	_ "embed" // the status page's template
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
)

// statusTimeout bounds the backend calls of one status page.
const statusTimeout = 5 * time.Second

// maxStatusNamespaces bounds the namespaces one page shows.
const maxStatusNamespaces = 500

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"num":      formatCount,
	"ms":       formatMillis,
	"rate":     func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"stamp":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"duration": func(d time.Duration) string { return d.Round(time.Second).String() },
	"bar":      func(f float64) int { return int(math.Round(200 * max(0, min(1, f)))) },
	"percent":  func(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" },
}).Parse(statusHTML))

// statusPage is what the status page shows.
type statusPage struct {
	Now        time.Time
	Ready      bool
	Draining   bool
	Cache      bool
	Health     bool // the backend reports ticket server health
	Servers    []serverRow
	Namespaces []namespaceRow
	Hidden     int      // namespaces left out past maxStatusNamespaces
	Problems   []string // what could not be read
}

type serverRow struct {
	allocator.ServerHealth
	Latency latencySummary
}

type namespaceRow struct {
	Name        string
	Known       bool // the backend listed it (its settings and counters are shown)
	Settings    allocator.Namespace
	Counters    []counterRow
	Cache       *spaceView // nil: nothing cached
	Rate        rateSummary
	CacheFailed bool
	Headroom    forecast // the IDs left below max_id, and when they run out
}

type counterRow struct {
	allocator.ServerState
	Fenced bool
}

// rateSummary is a namespace's IDs of the last minute, with a bar per second for the chart.
type rateSummary struct {
	Total, Peak int64
	PerSecond   float64
	Bars        []rateBar
}

type rateBar struct {
	X, Y, H int
	Count   int64
}

// chartHeight is the height of the per-second chart, in pixels.
const chartHeight = 40

func summarizeRate(counts [windowSeconds]int64) rateSummary {
	var r rateSummary
	for _, n := range counts {
		r.Total += n
		r.Peak = max(r.Peak, n)
	}
	r.PerSecond = float64(r.Total) / windowSeconds
	for i, n := range counts {
		h := 0
		if r.Peak > 0 && n > 0 {
			h = max(1, int(n*chartHeight/r.Peak))
		}
		r.Bars = append(r.Bars, rateBar{X: i * 5, Y: chartHeight - h, H: h, Count: n})
	}
	return r
}

// statusRoute serves the status page (GET /): the ticket servers, each namespace's counters and cached
// segments, IDs per second of the last minute, and lease latency. It shows counters and names, so it
// needs the admin token (or authentication off); no token ever travels in its URL.
func (s *Server) statusRoute(c echo.Context, caller identity) error {
	if err := requireAdmin(caller); err != nil {
		return err
	}
	if c.Request().URL.RawQuery != "" {
		return errorf(http.StatusBadRequest, api.CodeUnknownParameter, "the status page takes no query parameters")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), statusTimeout)
	defer cancel()
	var buf bytes.Buffer
	if err := statusTemplate.Execute(&buf, s.status(ctx)); err != nil {
		return fmt.Errorf("status page: %w", err)
	}
	h := c.Response().Header()
	// No script, no outside resource, no framing: the page is plain HTML with inline CSS and SVG.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	return c.HTMLBlob(http.StatusOK, buf.Bytes())
}

// status gathers the page's data. A backend that cannot answer is reported on the page, which is most
// useful exactly then.
func (s *Server) status(ctx context.Context) statusPage {
	now := s.cfg.now()
	p := statusPage{Now: now, Draining: s.draining.Load(), Cache: s.cache != nil, Health: s.health != nil}
	fenced := map[string]bool{}
	if s.health != nil {
		latency := s.metrics.recentLatency()
		for _, h := range s.health.Health() {
			p.Servers = append(p.Servers, serverRow{ServerHealth: h, Latency: latency[h.Name]})
			p.Ready = p.Ready || h.Healthy
			fenced[h.Name] = h.Fenced
		}
	} else {
		p.Ready = true
	}
	p.Ready = p.Ready && !p.Draining

	// Every namespace listed, cached or handed IDs of late has a row; the page shows the first
	// maxStatusNamespaces by name, and only those are filled in: with tens of thousands of namespaces,
	// a row each for the others would cost the page megabytes.
	list, err := s.backend.Namespaces(ctx)
	if err != nil {
		p.Problems = append(p.Problems, "could not list the namespaces: "+err.Error())
	}
	var views []spaceView
	if s.cache != nil {
		views = s.cache.views()
	}
	rates := s.metrics.recentNames(now)
	names := make([]string, 0, len(list)+len(views)+len(rates))
	for _, ns := range list {
		names = append(names, ns.Name)
	}
	for _, v := range views {
		names = append(names, v.Namespace)
	}
	names = append(names, rates...)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > maxStatusNamespaces {
		p.Hidden = len(names) - maxStatusNamespaces
		names = names[:maxStatusNamespaces]
	}
	rows := make(map[string]*namespaceRow, len(names))
	for _, name := range names {
		rows[name] = &namespaceRow{Name: name}
	}
	for _, ns := range list {
		if r := rows[ns.Name]; r != nil {
			r.Known, r.Settings = true, ns
			r.Headroom = s.headroom.observe(ns, now)
			for _, st := range ns.Servers {
				r.Counters = append(r.Counters, counterRow{ServerState: st, Fenced: fenced[st.Server]})
			}
		} else {
			s.headroom.observe(ns, now) // a sample for the forecast all the same
		}
	}
	for _, v := range views {
		if r := rows[v.Namespace]; r != nil {
			r.Cache, r.CacheFailed = &v, v.LastError != ""
		}
	}
	for _, name := range names {
		r := rows[name]
		counts, _ := s.metrics.recent(name, now) // zero counts when it was handed none of late
		r.Rate = summarizeRate(counts)
		p.Namespaces = append(p.Namespaces, *r)
	}
	return p
}

// formatCount writes n with thousands separators.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// formatMillis writes a latency in milliseconds, to about three significant digits.
func formatMillis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	prec := 0
	switch {
	case ms < 10:
		prec = 2
	case ms < 100:
		prec = 1
	}
	return strconv.FormatFloat(ms, 'f', prec, 64) + " ms"
}
