package server

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// headroomWindow is how far back the issue rate behind a namespace's forecast looks.
const headroomWindow = time.Hour

// headroomEvery is the least time between two samples of a namespace's headroom: reads closer together
// (a scrape, the status page, a GET of the namespace) share the last one.
const headroomEvery = 10 * time.Second

// warnBefore is how close a forecast exhaustion turns the status page red.
const warnBefore = 30 * 24 * time.Hour

// headroom remembers, per namespace, how many IDs were left below its ceiling when this server read its
// counters in the last hour, and forecasts from them when it runs out. The counters are every
// process's, so the rate is the whole namespace's, not this replica's. Safe for concurrent use.
type headroom struct {
	mu      sync.Mutex
	samples map[string][]headroomSample // oldest first
}

type headroomSample struct {
	at   time.Time
	left uint64
}

// forecast is a namespace's headroom as the API and the status page show it.
type forecast struct {
	Left  uint64
	Known bool // a counter was read: Left is meaningful
	// PerSecond is the issue rate of the last hour (or as much of it as was sampled); zero when not
	// known yet or nothing was issued.
	PerSecond float64
	// At is when Left runs out at PerSecond; zero when PerSecond is zero or the date is past 9999.
	At time.Time
	// Fraction is the part of the namespace's range (start to max_id) still left, from 0 to 1.
	Fraction float64
}

// Soon reports whether the forecast exhaustion is within warnBefore of now (or already reached).
func (f forecast) Soon(now time.Time) bool {
	return f.Known && (f.Left == 0 || (!f.At.IsZero() && f.At.Sub(now) < warnBefore))
}

// observe records ns's headroom read at now and returns the forecast.
func (h *headroom) observe(ns allocator.Namespace, now time.Time) forecast {
	left, ok := ns.IDsRemaining()
	if !ok {
		return forecast{}
	}
	d := ns.WithDefaults()
	f := forecast{Left: left, Known: true, Fraction: 1}
	if span := float64(d.MaxID) - float64(d.Start) + 1; span > 0 {
		f.Fraction = min(1, float64(left)/span)
	}
	h.mu.Lock()
	if h.samples == nil {
		h.samples = map[string][]headroomSample{}
	}
	list := h.samples[ns.Name]
	cut := 0
	for cut < len(list)-1 && now.Sub(list[cut+1].at) >= headroomWindow {
		cut++ // keep one sample at or past the window's start, so the rate spans the whole hour
	}
	list = list[cut:]
	if n := len(list); n > 0 && left > list[n-1].left {
		list = list[:0] // the ceiling was raised: the rate starts again
	}
	var oldest headroomSample
	if len(list) > 0 {
		oldest = list[0]
	}
	if n := len(list); n == 0 || now.Sub(list[n-1].at) >= headroomEvery {
		list = append(list, headroomSample{at: now, left: left})
	}
	h.samples[ns.Name] = list
	h.mu.Unlock()

	if elapsed := now.Sub(oldest.at).Seconds(); !oldest.at.IsZero() && elapsed > 0 && oldest.left > left {
		f.PerSecond = float64(oldest.left-left) / elapsed
		if end := float64(now.Unix()) + float64(left)/f.PerSecond; end < float64(maxForecast.Unix()) {
			f.At = time.Unix(int64(math.Ceil(end)), 0).UTC()
		}
	}
	return f
}

// maxForecast is the first instant RFC 3339 cannot write: the year 10000.
var maxForecast = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)

// headroomTimeout bounds the backend read of a scrape's headroom gauges.
const headroomTimeout = 5 * time.Second

// headroomOf reads every namespace's counters for the metrics: the IDs each has left below its
// ceiling. A namespace whose counters could not be read is left out; so are all when the backend does
// not answer.
func (s *Server) headroomOf() map[string]uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), headroomTimeout)
	defer cancel()
	list, err := s.backend.Namespaces(ctx)
	if err != nil {
		s.logger.Debug("could not read the namespaces' headroom for the metrics", "err", err)
		return nil
	}
	out := make(map[string]uint64, len(list))
	for _, ns := range list {
		if f := s.headroom.observe(ns, s.cfg.now()); f.Known {
			out[ns.Name] = f.Left
		}
	}
	return out
}
