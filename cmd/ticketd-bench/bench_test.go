package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/bench"
	"github.com/ticketd/ticketd/internal/testenv"
)

// benchRun runs `ticketd-bench` with tiny sizes and returns the report it wrote.
func benchRun(t *testing.T, args ...string) (*bench.Report, string) {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"--quick", "--json", "--out", dir, "--duration", "50ms"}, args...)
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Off a terminal, a progress line a step: the stage, the step and the time left.
	for _, part := range []string{"gen", "btree", "load"} {
		line := regexp.MustCompile(`(?m)^bench: ` + part + ` 1/\d+, .+ \(stage \d of \d; (about \d\S*|under a second) left\)$`)
		if slices.Contains(args, part) && !line.MatchString(errOut) {
			t.Errorf("no progress line for %s:\n%s", part, errOut)
		}
	}
	if !regexp.MustCompile(`(?m)^bench: done in \d`).MatchString(errOut) {
		t.Errorf("no closing progress line:\n%s", errOut)
	}
	var stdout bench.Report
	if err := json.Unmarshal([]byte(out), &stdout); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Command != stdout.Command || !strings.HasPrefix(rep.Command, "ticketd-bench ") {
		t.Fatalf("command %q (stdout says %q)", rep.Command, stdout.Command)
	}
	if rep.Machine.Cores < 1 || rep.Machine.GoVersion == "" || rep.Date.IsZero() {
		t.Fatalf("machine %+v, date %v", rep.Machine, rep.Date)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Charts) == 0 {
		t.Fatal("no charts")
	}
	for _, c := range rep.Charts {
		png, err := os.ReadFile(filepath.Join(dir, c))
		if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Fatalf("chart %s: %d bytes, %v", c, len(png), err)
		}
		if !bytes.Contains(md, []byte("]("+c+")")) {
			t.Fatalf("report.md does not show %s", c)
		}
	}
	return &rep, string(md)
}

func TestBenchGen(t *testing.T) {
	rep, md := benchRun(t, "gen")
	if rep.Gen == nil || len(rep.Gen.Rows) < 11 || rep.BTree != nil || rep.Load != nil {
		t.Fatalf("report parts: %+v", rep)
	}
	for _, r := range rep.Gen.Rows {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Scheme, r.Error)
			continue
		}
		if r.NsPerID <= 0 || r.NsPerIDAllCores <= 0 || r.IDsPerSecond <= 0 || r.AllocsPerID < 0 ||
			r.BinaryBytes <= 0 || r.TextBytes <= 0 || r.Checked <= 0 || r.OneChecked <= 0 || r.Goroutines < 4 {
			t.Errorf("%s: a figure is not positive: %+v", r.Scheme, r)
		}
		if r.Duplicates != 0 {
			t.Errorf("%s: %d duplicates among %d IDs", r.Scheme, r.Duplicates, r.Checked)
		}
		if !strings.Contains(md, "| "+r.Scheme+" |") {
			t.Errorf("report.md has no row for %s", r.Scheme)
		}
	}
	byName := map[string]bench.GenRow{}
	for _, r := range rep.Gen.Rows {
		byName[r.Scheme] = r
	}
	if sdk, ok := byName["ticketd SDK, cached block, embedded store"]; !ok || sdk.Checked == 0 {
		t.Errorf("no SDK row: %v", byName)
	}
	// What each scheme is, as measured: a random UUID is not ordered, a Snowflake is.
	if byName["google/uuid v4"].Increasing || !byName["snowflake 41/10/12 (Twitter)"].Increasing {
		t.Errorf("order: v4 %+v, snowflake %+v", byName["google/uuid v4"], byName["snowflake 41/10/12 (Twitter)"])
	}
	if len(rep.Gen.Odds) != len(rep.Gen.Rows) {
		t.Fatalf("%d odds rows for %d schemes", len(rep.Gen.Odds), len(rep.Gen.Rows))
	}
	for _, o := range rep.Gen.Odds {
		random := o.RandomBits > 0
		if o.Rate <= 0 || (random && (o.PYear <= 0 || o.PYearReference <= 0)) || (!random && (o.PYear != 0 || o.Coordination == "")) {
			t.Errorf("odds %+v", o)
		}
	}
}

func TestBenchBTreeAndLoad(t *testing.T) {
	pair := testenv.Pair(t)
	rep, md := benchRun(t, "--mysql", testenv.DSNList(pair), "--redis", testenv.RedisAddr(t), "btree", "load", "--rows", "3000", "--batch", "500", "--clients", "1,2")
	if rep.Machine.MariaDB == "" || rep.Machine.Redis == "" || rep.Gen != nil {
		t.Fatalf("report: %+v", rep)
	}
	if rep.BTree == nil || len(rep.BTree.Rows) != 7 || rep.BTree.RowsPerTable != 3000 {
		t.Fatalf("btree: %+v", rep.BTree)
	}
	for _, r := range rep.BTree.Rows {
		// A duplicate key would have failed the INSERT: no error means every ID was unique.
		if r.Error != "" {
			t.Errorf("%s: %s", r.Key, r.Error)
			continue
		}
		if r.RowsPerSecond <= 0 || r.RowsPerSecondLastTenth <= 0 || r.DataBytes <= 0 || r.IndexBytes <= 0 ||
			r.RebuiltDataBytes <= 0 || r.Fill <= 0 || r.PageSplits <= 0 || r.Claim == "" || r.Why == "" {
			t.Errorf("%s: a figure is not positive: %+v", r.Key, r)
		}
		// 3,000 rows make tables of a few pages: their sizes are InnoDB's allocation, not a finding.
		if r.Judged || r.Agrees || !strings.Contains(r.Why, "too small for a verdict") {
			t.Errorf("%s: a verdict from 3,000 rows: %+v", r.Key, r)
		}
	}
	if !strings.Contains(rep.BTree.NoVerdict, "too small for a verdict on 7 of 7 tables") || !strings.Contains(md, "**No verdict:** ") {
		t.Errorf("the report does not say the run is too small for a verdict: %q", rep.BTree.NoVerdict)
	}
	if rep.Load == nil {
		t.Fatal("no load report")
	}
	seen := map[string]bool{}
	for _, r := range rep.Load.Rows {
		seen[r.Case] = true
		if r.Error != "" {
			t.Errorf("%s: %s", r.Case, r.Error)
			continue
		}
		if r.Ops <= 0 || r.OpsPerSecond <= 0 || r.IDsPerSecond < r.OpsPerSecond || r.P50ms <= 0 || r.P99ms < r.P50ms || r.MaxMs < r.P99ms {
			t.Errorf("%s %s %d: %+v", r.Case, r.Mode, r.Clients, r)
		}
		// A lease never fails (the backends wait as long as a request may take); Flickr's REPLACE INTO may
		// deadlock, which the report counts, but it must mostly succeed.
		if strings.Contains(r.Case, "lease") && r.Errors != 0 {
			t.Errorf("%s %s %d: %d errors %v", r.Case, r.Mode, r.Clients, r.Errors, r.ErrorKinds)
		}
		if r.Errors >= r.Ops {
			t.Errorf("%s %s %d: %d errors for %d successes %v", r.Case, r.Mode, r.Clients, r.Errors, r.Ops, r.ErrorKinds)
		}
	}
	for _, want := range []string{"Flickr REPLACE INTO", "lease n=1 ", "lease n=100 ", "lease n=10,000", "one server", "SDK over HTTP",
		"HTTP lease n=1, server cache on", "HTTP lease n=10,000, server cache off", "Redis lease",
		"shortener: create link", "shortener: redirect"} {
		found := false
		for c := range seen {
			found = found || strings.Contains(c, want)
		}
		if !found {
			t.Errorf("no load case %q among %v", want, seen)
		}
	}
	// The shortener's note: far fewer blocks fetched from ticketd than links created.
	var note string
	for _, n := range rep.Load.Notes {
		if strings.HasPrefix(n, "shortener:") {
			note = n
		}
	}
	var links, blocks int64
	var per float64
	if _, err := fmt.Sscanf(strings.ReplaceAll(note, ",", ""), "shortener: %d links created %d blocks fetched from ticketd: %f blocks per 1000 links", &links, &blocks, &per); err != nil {
		t.Fatalf("note %q: %v", note, err)
	}
	if links < 10 || blocks < 1 || blocks*10 > links || per <= 0 {
		t.Fatalf("the shortener created %d links from %d blocks (%.2f per 1,000): want far fewer blocks than links", links, blocks, per)
	}
}

func TestBenchBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"btree"}, "needs the ticket server pair"},
		{[]string{"speed"}, `unknown part "speed"`},
		{[]string{"--clients", "1,x", "gen"}, "--clients"},
		{[]string{"--mysql", "root@tcp(192.168.7.7:3306)/", "load"}, "not a loopback address"},
		{[]string{"--rows", "5", "gen"}, "rows 5"},
	}
	for _, tt := range tests {
		_, errOut, code := run(t, tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
}

// TestBenchRefusesALiveTicketDatabase: a --mysql that names a database holding ticketd's tables (or
// any table the bench did not make) is refused before anything is written there; --force-database
// allows it; an empty database becomes the bench's own and may be used again.
func TestBenchRefusesALiveTicketDatabase(t *testing.T) {
	ctx := context.Background()
	live := testenv.Pair(t)
	p, err := mysql.Open(ctx, mysql.Config{DSNs: live, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "orders", Start: 7}); err != nil {
		t.Fatal(err)
	}
	before, err := p.Namespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	on := func(dsns []string, more ...string) []string {
		return append([]string{"--quick", "--json", "--out", t.TempDir(), "--rows", "2000", "--mysql", testenv.DSNList(dsns), "btree"}, more...)
	}
	_, errOut, code := run(t, on(live)...)
	if code != 2 || !strings.Contains(errOut, "ticketd's own tables") || !strings.Contains(errOut, "--force-database") {
		t.Fatalf("on a live ticket database: exit %d, %q; want 2, naming ticketd's tables and --force-database", code, errOut)
	}
	p, err = mysql.Open(ctx, mysql.Config{DSNs: live, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	after, err := p.Namespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the refused run changed the namespaces: %v → %v", before, after)
	}

	foreign := testenv.Pair(t)
	testenv.Exec(t, foreign[0], "CREATE TABLE invoices (id BIGINT PRIMARY KEY)")
	_, errOut, code = run(t, on(foreign)...)
	if code != 2 || !strings.Contains(errOut, "tables ticketd-bench did not create (invoices)") {
		t.Fatalf("on a database with a table of its own: exit %d, %q", code, errOut)
	}
	if _, errOut, code = run(t, on(foreign, "--force-database")...); code != 0 {
		t.Fatalf("with --force-database: exit %d, %s", code, errOut)
	}

	empty := testenv.Pair(t)
	for range 2 { // the second run finds the first one's tables, and the mark
		if _, errOut, code = run(t, on(empty)...); code != 0 {
			t.Fatalf("on an empty database: exit %d, %s", code, errOut)
		}
	}
}
