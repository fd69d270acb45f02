package server

import (
	"context"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
)

// headroomWindow is how far back the issue rate behind a namespace's forecast looks.
const headroomWindow = time.Hour

// headroomEvery is the least time between two samples of a namespace's headroom: reads closer together
// (a scrape, the status page, a GET of the namespace) share the last one.
const headroomEvery = 10 * time.Second

// warnBefore is how close a forecast exhaustion turns the status page red.
const warnBefore = 30 * 24 * time.Hour

// headroomSamples bounds the samples a namespace keeps for its forecast: past it, every other sample
// between the oldest and the newest is dropped, so the oldest still spans the window while a
// namespace's memory stays small however often it is read. A namespace with nothing issued between
// samples keeps two: a run of samples with the same IDs left keeps its first and its last.
const headroomSamples = 16

// headroom remembers, per namespace, how many IDs were left below its ceiling when this server read its
// counters in the last hour, and forecasts from them when it runs out. The counters are every
// process's, so the rate is the whole namespace's, not this replica's. A ticket server that cannot be
// read counts at the counter it was last read at (stale, and said so), so that an outage never looks
// like IDs issued; a change of the ceiling, or of the servers counted, starts a new series. Safe for
// concurrent use.
type headroom struct {
	mu     sync.Mutex
	series map[string]headroomSeries
	// serverSets holds one copy of each list of servers counted (headroomSeries.servers): every
	// namespace of a pair counts the same two.
	serverSets map[string]string

	// The last reading of every namespace's counters for the metrics, and whether one is under way
	// (see headroomOf).
	scrapeMu      sync.Mutex
	scrape        scrapeHeadroom
	scrapeAt      time.Time
	scrapeReading bool
}

// headroomSeries is one namespace's samples, taken under one ceiling over one set of servers, and the
// counter each server was last read at. It is kept for every namespace the backend lists, so it is
// small: at most headroomSamples+1 samples of 16 bytes (two while nothing is issued), and a counter
// per server.
type headroomSeries struct {
	maxID   int64
	servers string // the servers the samples count, sorted and joined (shared, see serverSets)
	samples []headroomSample
	seen    []seenCounter
}

type headroomSample struct {
	at   int64 // unix nanoseconds
	left uint64
}

// seenCounter is a ticket server's counter for a namespace as last read, and when.
type seenCounter struct {
	server     string
	next, step int64
	at         int64 // unix nanoseconds
}

// lookup returns the counter last seen on server.
func (sr *headroomSeries) lookup(server string) (seenCounter, bool) {
	for _, c := range sr.seen {
		if c.server == server {
			return c, true
		}
	}
	return seenCounter{}, false
}

// remember records the counter c read now.
func (sr *headroomSeries) remember(c seenCounter) {
	for i := range sr.seen {
		if sr.seen[i].server == c.server {
			sr.seen[i] = c
			return
		}
	}
	sr.seen = append(sr.seen, c)
}

// joined reports whether servers joined by commas are s.
func joined(servers []string, s string) bool {
	for i, name := range servers {
		if i > 0 {
			if !strings.HasPrefix(s, ",") {
				return false
			}
			s = s[1:]
		}
		if !strings.HasPrefix(s, name) {
			return false
		}
		s = s[len(name):]
	}
	return s == ""
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
	// Stale are the servers that could not be read, counted at their last counter.
	Stale []api.StaleCounter
	// Unread are the servers never read by this process, not counted at all (Left is a lower bound).
	Unread []string
}

// Soon reports whether the forecast exhaustion is within warnBefore of now (or already reached).
func (f forecast) Soon(now time.Time) bool {
	return f.Known && (f.Left == 0 || (!f.At.IsZero() && f.At.Sub(now) < warnBefore))
}

// observe records ns's headroom read at now and returns the forecast.
func (h *headroom) observe(ns allocator.Namespace, now time.Time) forecast {
	d := ns.WithDefaults()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.series == nil {
		h.series = map[string]headroomSeries{}
	}
	sr, ok := h.series[ns.Name]
	if !ok {
		sr.seen = make([]seenCounter, 0, len(ns.Servers))
	}
	f := h.forecast(&sr, ns, d, now)
	h.series[ns.Name] = sr
	return f
}

// forecast records ns's headroom read at now in sr, and returns the forecast; d is ns with defaults.
func (h *headroom) forecast(sr *headroomSeries, ns, d allocator.Namespace, now time.Time) forecast {
	var f forecast
	counted := make([]string, 0, 4) // on the stack for up to four servers
	count := func(name string, c seenCounter) {
		sum, carry := bits.Add64(f.Left, allocator.Remaining(c.next, c.step, d.MaxID), 0)
		if carry != 0 {
			sum = math.MaxUint64
		}
		f.Left, f.Known = sum, true
		counted = append(counted, name)
	}
	at := now.UnixNano()
	for _, st := range ns.Servers {
		if st.Next >= 1 && st.Step >= 1 {
			c := seenCounter{server: st.Server, next: st.Next, step: st.Step, at: at}
			sr.remember(c)
			count(st.Server, c)
		} else if c, ok := sr.lookup(st.Server); ok {
			f.Stale = append(f.Stale, api.StaleCounter{Server: st.Server, SeenAt: time.Unix(0, c.at)})
			count(st.Server, c)
		} else {
			f.Unread = append(f.Unread, st.Server)
		}
	}
	for _, c := range sr.seen { // a server the backend did not list this time
		if !slices.ContainsFunc(ns.Servers, func(st allocator.ServerState) bool { return st.Server == c.server }) {
			f.Stale = append(f.Stale, api.StaleCounter{Server: c.server, SeenAt: time.Unix(0, c.at)})
			count(c.server, c)
		}
	}
	if !f.Known {
		return f
	}
	slices.Sort(counted)
	sort.Slice(f.Stale, func(i, j int) bool { return f.Stale[i].Server < f.Stale[j].Server })
	f.Fraction = 1
	if span := float64(d.MaxID) - float64(d.Start) + 1; span > 0 {
		f.Fraction = min(1, float64(f.Left)/span)
	}
	if sr.maxID != d.MaxID || !joined(counted, sr.servers) {
		// Another ceiling, or other servers counted: the IDs left before are not comparable.
		sr.maxID, sr.servers, sr.samples = d.MaxID, h.serverSet(strings.Join(counted, ",")), sr.samples[:0]
	}
	list := sr.samples
	start := at - int64(headroomWindow)
	cut := 0
	for cut < len(list)-1 && list[cut+1].at <= start {
		cut++ // keep one sample at or past the window's start, so the rate spans the whole hour
	}
	if cut > 0 {
		list = list[:copy(list, list[cut:])] // in place: the array is reused
	}
	if len(list) > 1 && list[0].at < start && list[1].left == list[0].left {
		list[0].at = start // as many were left at the window's start: the run of the first two spans it
	}
	if n := len(list); n > 0 && f.Left > list[n-1].left {
		list = list[:0] // more left than before (a start or counter never goes back): start again
	}
	var oldest headroomSample
	if len(list) > 0 {
		oldest = list[0]
	}
	switch n := len(list); {
	case n > 0 && at-list[n-1].at < int64(headroomEvery):
	case n > 1 && list[n-1].left == f.Left && list[n-2].left == f.Left:
		list[n-1].at = at // a run with as many left: its first and its last say all of it
	default:
		list = appendSample(list, headroomSample{at: at, left: f.Left})
	}
	if len(list) > headroomSamples {
		list = thin(list)
	}
	sr.samples = list

	if elapsed := float64(at-oldest.at) / 1e9; oldest.at != 0 && elapsed > 0 && oldest.left > f.Left {
		f.PerSecond = float64(oldest.left-f.Left) / elapsed
		if end := float64(now.Unix()) + float64(f.Left)/f.PerSecond; end < float64(maxForecast.Unix()) {
			f.At = time.Unix(int64(math.Ceil(end)), 0).UTC()
		}
	}
	return f
}

// serverSet returns the shared copy of a list of servers counted.
func (h *headroom) serverSet(s string) string {
	if shared, ok := h.serverSets[s]; ok {
		return shared
	}
	if h.serverSets == nil || len(h.serverSets) >= 64 { // a bound: lists change rarely
		h.serverSets = map[string]string{}
	}
	h.serverSets[s] = s
	return s
}

// appendSample appends x to list, growing its array by doubling up to headroomSamples+1, the most it
// holds: a namespace with few samples keeps a small one.
func appendSample(list []headroomSample, x headroomSample) []headroomSample {
	if len(list) == cap(list) {
		grown := make([]headroomSample, len(list), min(max(2*cap(list), 2), headroomSamples+1))
		copy(grown, list)
		list = grown
	}
	return append(list, x)
}

// thin drops every other sample between the oldest and the newest, in place.
func thin(list []headroomSample) []headroomSample {
	out := list[:1]
	for i := 1; i < len(list)-1; i += 2 {
		out = append(out, list[i])
	}
	return append(out, list[len(list)-1])
}

// forget drops what is remembered of the namespaces not in keep.
func (h *headroom) forget(keep map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name := range h.series {
		if !keep[name] {
			delete(h.series, name)
		}
	}
}

// maxForecast is the first instant RFC 3339 cannot write: the year 10000.
var maxForecast = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)

// headroomTimeout bounds the backend read of a scrape's headroom gauges.
const headroomTimeout = 5 * time.Second

// scrapeHeadroom is what a scrape reports of the namespaces' headroom: the IDs each has left below
// its ceiling, and the servers counted at an earlier read because they could not be read now.
type scrapeHeadroom struct {
	left  map[string]uint64
	stale map[string]bool
}

// headroomOf is what a scrape reports of every namespace's headroom: the last reading, taken again in
// the background once it is headroomEvery old, so that a scrape never waits for the ticket servers
// (but the first) and the servers see one read of every namespace's counters (a statement or two per
// server) per headroomEvery, however many scrapes. A namespace whose counters were never read is left
// out; so are all when the backend does not answer.
func (s *Server) headroomOf() scrapeHeadroom {
	h := &s.headroom
	h.scrapeMu.Lock()
	defer h.scrapeMu.Unlock()
	now := s.cfg.now()
	if h.scrapeAt.IsZero() {
		h.scrape, h.scrapeAt = s.readHeadroom(), now // the first scrape waits for a reading
		return h.scrape
	}
	if age := now.Sub(h.scrapeAt); (age >= headroomEvery || age < 0) && !h.scrapeReading && !s.closing() {
		h.scrapeReading = true
		s.background.Add(1)
		go func() {
			defer s.background.Done()
			got := s.readHeadroom()
			h.scrapeMu.Lock()
			h.scrape, h.scrapeAt, h.scrapeReading = got, s.cfg.now(), false
			h.scrapeMu.Unlock()
		}()
	}
	return h.scrape
}

// readHeadroom reads every namespace's counters for the metrics (see headroomOf).
func (s *Server) readHeadroom() scrapeHeadroom {
	ctx, cancel := context.WithTimeout(context.Background(), headroomTimeout)
	defer cancel()
	list, err := s.backend.Namespaces(ctx)
	if err != nil {
		s.logger.Debug("could not read the namespaces' headroom for the metrics", "err", err)
		return scrapeHeadroom{}
	}
	out := scrapeHeadroom{left: make(map[string]uint64, len(list)), stale: map[string]bool{}}
	keep := make(map[string]bool, len(list))
	for _, ns := range list {
		keep[ns.Name] = true
		f := s.headroom.observe(ns, s.cfg.now())
		if f.Known {
			out.left[ns.Name] = f.Left
		}
		for _, st := range ns.Servers {
			if _, ok := out.stale[st.Server]; !ok {
				out.stale[st.Server] = false
			}
		}
		for _, st := range f.Stale {
			out.stale[st.Server] = true
		}
	}
	s.headroom.forget(keep)
	return out
}
