package server

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	dto "github.com/prometheus/client_model/go"

	"github.com/ticketd/ticketd/allocator"
)

// scrapeFamilies scrapes h with the given Accept and Accept-Encoding and parses the answer.
func scrapeFamilies(t *testing.T, h http.Handler, accept, encoding string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != 200 {
		t.Fatalf("scrape: %d %s", w.Code, w.Body.String())
	}
	var body io.Reader = w.Body
	if w.Header().Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(w.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = gz
	}
	ct := w.Header().Get("Content-Type")
	out := map[string]*dto.MetricFamily{}
	if strings.HasPrefix(ct, "application/vnd.google.protobuf") {
		dec := expfmt.NewDecoder(body, expfmt.ResponseFormat(w.Header()))
		for {
			var f dto.MetricFamily
			if err := dec.Decode(&f); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			out[f.GetName()] = &f
		}
		return out, ct
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(body)
	if err != nil {
		t.Fatalf("the scrape (%s) does not parse: %v", ct, err)
	}
	return families, ct
}

// TestScrapeMatchesGather: a scrape in the text format, plain or gzipped, holds every family Gather
// reports, the series of each namespace (written straight from their counts) the same as gathered; a
// scraper that asks for protobuf gets protobuf, the same families.
func TestScrapeMatchesGather(t *testing.T) {
	s := newTestServer(t, nil)
	for i := range 5 {
		ns := fmt.Sprintf("ns%d", i)
		if _, err := s.fake.CreateNamespace(context.Background(), allocator.Namespace{Name: ns}); err != nil {
			t.Fatal(err)
		}
		if w := s.do(t, request{method: "POST", path: "/v1/namespaces/" + ns + "/blocks", token: adminTok, body: `{"size":3}`}); w.Code != 200 {
			t.Fatalf("lease: %d %s", w.Code, w.Body.String())
		}
	}
	s.do(t, request{method: "POST", path: "/v1/namespaces/orders/blocks", token: ordersTok, body: `{"size":7}`})
	s.metrics.observeStall("ns1")
	s.metrics.observeHedge("ns2", false)
	s.metrics.observeHedge("ns2", true)
	waitIdle(t, s.Server)
	s.do(t, request{method: "GET", path: "/metrics", token: adminTok}) // the headroom's first reading
	gathered, err := s.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	h := s.metrics.Handler()
	for _, tc := range []struct{ name, accept, encoding, contentType string }{
		{"no accept", "", "", "text/plain; version=0.0.4"},
		{"prometheus", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", "gzip", "text/plain; version=0.0.4"},
		{"protobuf", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", "", "application/vnd.google.protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ct := scrapeFamilies(t, h, tc.accept, tc.encoding)
			if !strings.HasPrefix(ct, tc.contentType) {
				t.Fatalf("content type %q, want %q", ct, tc.contentType)
			}
			perNamespace := 0
			for _, want := range gathered {
				f := got[want.GetName()]
				if f == nil {
					t.Errorf("the scrape lacks %s", want.GetName())
					continue
				}
				if !strings.HasPrefix(want.GetName(), "ticketd_") || strings.HasPrefix(want.GetName(), "ticketd_http_") {
					continue // the process's and the requests' own series change with the scrapes
				}
				if len(want.GetMetric()) > 0 && len(want.GetMetric()[0].GetLabel()) > 0 && want.GetMetric()[0].GetLabel()[0].GetName() == nsLabel {
					perNamespace++
				}
				if !proto.Equal(normalized(f), normalized(want)) {
					t.Errorf("%s scraped:\n%v\ngathered:\n%v", want.GetName(), f, want)
				}
			}
			if perNamespace != 5 { // ids issued, stalls, hedges, hedges won, IDs remaining
				t.Errorf("%d families of each namespace, want 5", perNamespace)
			}
		})
	}
}

// normalized is f without what the text format does not carry (timestamps, created times).
func normalized(f *dto.MetricFamily) *dto.MetricFamily {
	f = proto.Clone(f).(*dto.MetricFamily)
	for _, m := range f.Metric {
		m.TimestampMs = nil
		if m.Counter != nil {
			m.Counter.CreatedTimestamp = nil
		}
	}
	if f.Type != nil && f.GetType() == dto.MetricType_UNTYPED {
		f.Type = nil
	}
	return f
}

// TestScrapeAllocatesLittlePerNamespace: a scrape writes the series of each namespace with a few
// bytes allocated for each (a sort of the names), not a metric and its messages: 2 KB a namespace
// before, 20 MB at once for a scrape of 10,000.
func TestScrapeAllocatesLittlePerNamespace(t *testing.T) {
	const n = 3000
	s := newTestServer(t, nil)
	for i := range n {
		name := fmt.Sprintf("ns%05d", i)
		if _, err := s.fake.CreateNamespace(context.Background(), allocator.Namespace{Name: name}); err != nil {
			t.Fatal(err)
		}
		if w := s.do(t, request{method: "POST", path: "/v1/namespaces/" + name + "/blocks", token: adminTok, body: `{"size":3}`}); w.Code != 200 {
			t.Fatalf("lease: %d %s", w.Code, w.Body.String())
		}
	}
	waitIdle(t, s.Server)
	h := s.metrics.Handler()
	scrape := func() {
		w := &discardWriter{h: http.Header{}}
		// Not gzipped: a gzip writer comes from a pool that a collection empties, and a new one
		// allocates most of a megabyte once per scrape, whatever the namespaces.
		req := httptest.NewRequest("GET", "/metrics", nil)
		h.ServeHTTP(w, req)
		if w.code != 0 && w.code != 200 {
			t.Fatalf("scrape: %d", w.code)
		}
	}
	scrape() // the headroom's first reading: a scrape within headroomEvery of it starts none
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	scrape()
	runtime.ReadMemStats(&after)
	t.Logf("%d B/ns, %d allocs/ns", (after.TotalAlloc-before.TotalAlloc)/n, (after.Mallocs-before.Mallocs)/n)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 300 {
		t.Errorf("a scrape allocated %d bytes a namespace, want at most 300", per)
	}
}
