package server

import (
	"bufio"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/common/expfmt"
)

// serveMetrics answers a scrape in the Prometheus text format: the registry's families through its
// encoder, then the series of each namespace written straight from their counts. Gathered, each of
// those would be a metric, a label pair and a protobuf message or more: about 2 KB a namespace, all of
// them alive until the scrape is written, some 20 MB at 10,000 namespaces. A scraper that asks for
// another format (protobuf) is served through Gather.
func (m *Metrics) serveMetrics(w http.ResponseWriter, r *http.Request) {
	select {
	case m.scrapes <- struct{}{}:
		defer func() { <-m.scrapes }()
	default:
		http.Error(w, "Limit of concurrent requests reached ("+strconv.Itoa(maxScrapesInFlight)+"), try again later.", http.StatusServiceUnavailable)
		return
	}
	format := expfmt.Negotiate(r.Header)
	if format.FormatType() != expfmt.TypeTextPlain {
		m.fallback.ServeHTTP(w, r)
		return
	}
	families, err := m.reg.Gather()
	if err != nil {
		http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(format))
	var out io.Writer = w
	if gzipAccepted(r.Header) {
		h.Set("Content-Encoding", "gzip")
		h.Del("Content-Length")
		gz := gzipWriters.Get().(*gzip.Writer)
		gz.Reset(w)
		defer func() {
			_ = gz.Close()
			gzipWriters.Put(gz)
		}()
		out = gz
	}
	bw := bufio.NewWriterSize(out, 32<<10)
	enc := expfmt.NewEncoder(bw, format)
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return // the scraper went away
		}
	}
	m.writeNamespaceSeries(bw)
	_ = bw.Flush()
}

var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

// gzipAccepted reports whether the request's Accept-Encoding takes gzip.
func gzipAccepted(h http.Header) bool {
	for _, part := range strings.Split(h.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); strings.TrimSpace(enc) == "gzip" {
			return true
		}
	}
	return false
}

// writeNamespaceSeries writes the series of each namespace in the text format, the families of
// nsCollector and remainingCollector as Gather would report them (sorted by namespace; a family
// without a series left out), with a buffer of a line.
func (m *Metrics) writeNamespaceSeries(w *bufio.Writer) {
	counts := m.namespaceCounts()
	var line []byte
	family := func(name, help, typ string, n int, value func(i int) (string, float64, bool)) {
		header := false
		for i := range n {
			ns, v, ok := value(i)
			if !ok {
				continue
			}
			if !header {
				header = true
				line = append(line[:0], "# HELP "...)
				line = append(line, name...)
				line = append(line, ' ')
				line = appendEscaped(line, help, false)
				line = append(line, "\n# TYPE "...)
				line = append(line, name...)
				line = append(line, ' ')
				line = append(line, typ...)
				line = append(line, '\n')
				_, _ = w.Write(line)
			}
			line = append(line[:0], name...)
			line = append(line, '{')
			line = append(line, nsLabel...)
			line = append(line, `="`...)
			line = appendEscaped(line, ns, true)
			line = append(line, `"} `...)
			line = appendValue(line, v)
			line = append(line, '\n')
			_, _ = w.Write(line)
		}
	}
	counter := func(name, help string, load func(*nsCounters) int64) {
		family(name, help, "counter", len(counts), func(i int) (string, float64, bool) {
			v := load(counts[i].n)
			return counts[i].name, float64(v), v != 0
		})
	}
	counter(idsName, idsHelp, func(n *nsCounters) int64 { return n.ids.Load() })
	counter(stallsName, stallsHelp, func(n *nsCounters) int64 { return n.stalls.Load() })
	counter(hedgesName, hedgesHelp, func(n *nsCounters) int64 { return n.hedges.Load() })
	counter(hedgesWonName, hedgesWonHelp, func(n *nsCounters) int64 { return n.hedgesWon.Load() })
	if m.headroom == nil {
		return
	}
	left := m.headroom().left
	names := make([]string, 0, len(left))
	for name := range left {
		names = append(names, name)
	}
	slices.Sort(names)
	family(remainingName, remainingHelp, "gauge", len(names), func(i int) (string, float64, bool) {
		return names[i], float64(left[names[i]]), true
	})
}

// appendEscaped appends s escaped as the text format escapes help (backslash, newline) and label
// values (a double quote too).
func appendEscaped(b []byte, s string, label bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && label:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendValue appends v as the text format's encoder writes a sample value.
func appendValue(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
