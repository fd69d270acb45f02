package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Write writes the report into dir: report.md, report.json and the charts (PNG).
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	charts, err := r.drawCharts(dir)
	if err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	r.Charts = charts
	var md strings.Builder
	r.Markdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	if err := r.JSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// JSON writes the report as indented JSON.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Markdown writes the report's tables; chart links are relative to the report's directory.
func (r *Report) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# ticketd bench report\n\n")
	p("- date: %s\n", r.Date.Format("2006-01-02 15:04 MST"))
	m := r.Machine
	p("- machine: %d cores (GOMAXPROCS %d)%s, %s, %s\n", m.Cores, m.GOMAXPROCS, orEmpty(", ", m.CPU), m.OS, m.GoVersion)
	if m.LoadAverage != "" {
		p("- load average when the run began (1, 5, 15 min): %s on %d cores\n", m.LoadAverage, m.Cores)
	}
	if m.MariaDB != "" {
		p("- MariaDB: %s\n", m.MariaDB)
	}
	if m.Redis != "" {
		p("- Redis: %s\n", m.Redis)
	}
	p("- each timed measurement: %s\n", r.Duration)
	p("- command: `%s`\n\n", r.Command)
	if r.Gen != nil {
		r.Gen.markdown(w)
	}
	if r.BTree != nil {
		r.BTree.markdown(w)
	}
	if r.Load != nil {
		r.Load.markdown(w)
	}
	for _, c := range r.Charts {
		p("![%s](%s)\n\n", strings.TrimSuffix(c, ".png"), c)
	}
}

func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func (g *GenReport) markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Making IDs (`ticketd-bench gen`)\n\n")
	p("One process, one generator per scheme shared by every goroutine. *ns/ID* is wall time per ID on one goroutine and on all cores; ")
	p("*ceiling* is the better of the two rates; *allocs* are heap allocations per ID on one goroutine; ")
	p("*out of order* is the share of consecutive IDs, in the order several goroutines received them, that sort below the one before.\n\n")
	p("| scheme | ns/ID, 1 goroutine | ns/ID, all cores | IDs/s ceiling | allocs/ID | bytes binary | bytes text | one goroutine strictly increasing | out of order across goroutines | IDs checked | duplicates |\n")
	p("|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|\n")
	for _, r := range g.Rows {
		if r.Error != "" {
			p("| %s | error: %s |||||||||\n", r.Scheme, strings.ReplaceAll(r.Error, "|", "/"))
			continue
		}
		inc := "yes"
		if !r.Increasing {
			inc = fmt.Sprintf("no (%s of %s steps)", count(r.Violations), count(r.OneChecked-1))
		}
		p("| %s | %.1f | %.1f | %s | %.2f | %d | %d | %s | %.2f%% | %s | %d |\n", r.Scheme, r.NsPerID, r.NsPerIDAllCores,
			rate(r.IDsPerSecond), r.AllocsPerID, r.BinaryBytes, r.TextBytes, inc, 100*r.OutOfOrder, count(r.Checked), r.Duplicates)
	}
	p("\n*bytes text* is the length of an ID taken after the run; decimal IDs grow with their counter (at most 19 digits for a positive int64).\n")
	p("\n### Collision odds\n\n")
	p("P(at least one collision in a year) ≈ n²/2^(b+1) per window of the time prefix, summed over the year's windows, ")
	p("for independent generators issuing at the rate this run measured for the scheme (and at 1 M IDs/s, the article's figure). ")
	p("Coordinated schemes have no random bits: zero, as long as what keeps them apart holds. ")
	p("*runs out* is what ends first in the IDs, and *lasts* how long it does from the run's date at the measured rate and at 1 M IDs/s: ")
	p("a counter (a ticket namespace of 2^63-1 IDs, or one whose max_id is that of %d-character shortener codes) is used up by issuing, ", shortCodeLength)
	p("a time field ends on its date whatever the rate.\n\n")
	p("| scheme | random bits | window | measured rate | P(collision in a year) at that rate | at 1 M IDs/s | unique as long as | runs out | lasts at that rate | at 1 M IDs/s |\n")
	p("|---|--:|---|--:|--:|--:|---|---|--:|--:|\n")
	rows := g.Odds
	if g.ShortCodes != nil {
		rows = append(rows[:len(rows):len(rows)], *g.ShortCodes)
	}
	for _, o := range rows {
		win := o.Window
		if win == "" && o.RandomBits > 0 {
			win = "none (all random)"
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", o.Scheme, o.RandomBits, win, rate(o.Rate), oneIn(o.PYear), oneIn(o.PYearReference), orDash(o.Coordination),
			orDash(o.Space), lasts(o.YearsLeft), lasts(o.YearsLeftReference))
	}
	p("\n")
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// rate writes a per-second figure compactly: 3.9 M/s, 41.2 k/s, 812/s.
func rate(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.1f M/s", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1f k/s", x/1e3)
	}
	return fmt.Sprintf("%.0f/s", x)
}

// count writes an integer with thousands separators.
func count[T int | int64](n T) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// mib writes a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (b *BTreeReport) markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## What each key does to a B-tree (`ticketd-bench btree`)\n\n")
	p("%s rows per table on %s, INSERTs of %s rows on one connection, the same for every table. ", count(b.RowsPerTable), b.Server, count(b.Batch))
	p("Each table: the key, `created_at BIGINT` (indexed, in insertion order) and `amount INT`. ")
	p("*rows/s* counts time inside INSERT statements only; *fill* is the clustered index's size after `ALTER TABLE … FORCE` over its size as inserted ")
	p("(a rebuild fills pages to 15/16, so about 1.0 means the inserts filled pages in order; random inserts leave them about 69%% full); ")
	p("*page splits* is the change of `index_page_splits` in `information_schema.innodb_metrics` (server-wide) over the inserts. ")
	p("*agrees* is computed from this row's numbers: fill ≥ %.2f for a right-most claim, below it for a random one, and for keys wider than BIGINT a secondary index at least %.1f× the BIGINT tables' mean; ", rightMostFill, widerIndex)
	p("a row whose indexes are under %d MiB gets no verdict (–).\n\n", minVerdictBytes>>20)
	if b.Note != "" {
		p("Note: %s\n\n", b.Note)
	}
	if b.NoVerdict != "" {
		p("**No verdict:** %s\n\n", b.NoVerdict)
	}
	p("| key | rows/s | rows/s, last 10%% | data MiB | secondary index MiB | fill | page splits | splits per 1,000 rows | the article says | agrees | measured |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|---|---|---|\n")
	for _, r := range b.Rows {
		if r.Error != "" {
			p("| %s | error: %s ||||||||||\n", r.Key, strings.ReplaceAll(r.Error, "|", "/"))
			continue
		}
		splits, per := "n/a", "n/a"
		if r.PageSplits >= 0 {
			splits = count(r.PageSplits)
			per = fmt.Sprintf("%.1f", 1000*float64(r.PageSplits)/float64(b.RowsPerTable))
		}
		agrees := "no"
		switch {
		case !r.Judged:
			agrees = "–"
		case r.Agrees:
			agrees = "yes"
		}
		p("| %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s |\n", r.Key, count(int64(r.RowsPerSecond)), count(int64(r.RowsPerSecondLastTenth)),
			mib(r.DataBytes), mib(r.IndexBytes), r.Fill, splits, per, r.Claim, agrees, r.Why)
	}
	p("\n")
}

func (l *LoadReport) markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("## Load on the ticket servers (`ticketd-bench load`)\n\n")
	p("Loopback only. *closed*: N clients, each sending its next request when the last one returns. ")
	p("*open*: requests sent at a fixed rate (half the case's best closed-loop rate, at most %s/s), latency counted from when each should have been sent. ", count(int64(maxOpenRate)))
	p("*ops/s* are successful requests (leases, or tickets for Flickr's REPLACE INTO), *IDs/s* the IDs they carried. ")
	p("Latency from HdrHistogram, in milliseconds; *sender lag* is how late the load generator itself sent (open loop), a part of the latency that is not the server's. A deadlock is an error.\n\n")
	p("| case | mode | clients / rate | ops/s | IDs/s | p50 | p90 | p99 | p99.9 | max | sender lag p99 | errors |\n")
	p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range l.Rows {
		if r.Error != "" {
			p("| %s | %s | | error: %s |||||||||\n", r.Case, r.Mode, strings.ReplaceAll(r.Error, "|", "/"))
			continue
		}
		who, lag := fmt.Sprint(r.Clients), "–"
		if r.Mode == "open" {
			who, lag = rate(r.TargetRate), millis(r.SendLagP99ms)
		}
		errs := "0"
		if r.Errors > 0 {
			var parts []string
			for _, k := range sortedKeys(r.ErrorKinds) {
				parts = append(parts, fmt.Sprintf("%s %s", count(r.ErrorKinds[k]), k))
			}
			errs = strings.Join(parts, ", ")
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Case, r.Mode, who,
			count(int64(r.OpsPerSecond)), count(int64(r.IDsPerSecond)), millis(r.P50ms), millis(r.P90ms), millis(r.P99ms), millis(r.P999ms), millis(r.MaxMs), lag, errs)
	}
	if len(l.Notes) > 0 {
		p("\n")
		for _, n := range l.Notes {
			p("- %s\n", n)
		}
	}
	if len(l.Skipped) > 0 {
		p("\nNot measured in this run:\n\n")
		for _, s := range l.Skipped {
			p("- %s\n", s)
		}
	}
	p("\n")
}

// millis writes a latency in milliseconds with three significant digits below 10ms.
func millis(ms float64) string {
	if ms < 10 {
		return fmt.Sprintf("%.3g", ms)
	}
	return fmt.Sprintf("%.1f", ms)
}
