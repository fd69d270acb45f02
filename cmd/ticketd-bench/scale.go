package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/internal/cliflag"
	"github.com/ticketd/ticketd/internal/testservers"
)

func init() {
	commands["scale"] = commandInfo{usage: "ticketd-bench scale [flags]",
		summary: "Measure how one `ticketd serve` on a MariaDB pair grows with its namespaces: for each count, a fresh database, the namespaces created and each leased from once through the segment cache, then the process's resident memory, one /metrics scrape (time and size), the leases' p99, the statements each lease cost on the servers and the statements the process sends while idle. " +
			"With --processes, also several processes leasing over the same namespaces at once: statements and fsyncs per second on each server. " +
			"Starts a throwaway pair unless --mysql is given; its flags have no environment fallback. Prints a Markdown table and a JSON summary, and with --svg draws a chart.",
		new: func() command { return &scaleCmd{} }}
}

type scaleCmd struct {
	mysql, ticketd, counts, processes, svg, dir string
	idle                                        time.Duration
	workers, loadNamespaces                     int
}

func (c *scaleCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.mysql, "mysql", "", "the pair's two `DSNs` (root, no database: each run creates its own), odd server first; empty: a throwaway pair")
	fs.StringVar(&c.ticketd, "ticketd", "", "the ticketd `binary` to measure (default: built from this module with go build)")
	fs.StringVar(&c.counts, "namespaces", "1,1000,10000", "comma-separated namespace `counts` to measure, each on a fresh database")
	fs.StringVar(&c.processes, "processes", "", "comma-separated `counts` of ticketd processes leasing over the same namespaces at once (e.g. 1,4,16); empty: none")
	fs.IntVar(&c.loadNamespaces, "load-namespaces", 1000, "active `namespaces` of the --processes runs")
	fs.StringVar(&c.svg, "svg", "", "write a chart of memory and scrape time to this `file`")
	fs.StringVar(&c.dir, "dir", "", "`directory` for the throwaway pair (default: a new temporary one)")
	fs.DurationVar(&c.idle, "idle", 10*time.Second, "how long the idle process's statements are counted")
	fs.IntVar(&c.workers, "workers", 16, "concurrent HTTP requests while creating and leasing")
}

// ScaleRow is one namespace count's measurements.
type ScaleRow struct {
	Namespaces  int     `json:"namespaces"`
	RSSMiB      float64 `json:"rss_mib"`
	FreshRSSMiB float64 `json:"fresh_rss_mib"`
	ScrapeMS    float64 `json:"scrape_ms"`
	// ScrapeAgainMS is the slower of two later scrapes: one that starts the next reading of the
	// counters in the background, and one after it.
	ScrapeAgainMS float64 `json:"scrape_again_ms"`
	ScrapeKiB     float64 `json:"scrape_kib"`
	LeaseP99MS    float64 `json:"lease_p99_ms"`
	StmtsPerLease float64 `json:"statements_per_lease"`
	// IdleStmtsPerSec is the statements per second the idle process sends to each server (the most of
	// the two), scrapes left out.
	IdleStmtsPerSec float64 `json:"idle_statements_per_second_per_server"`
}

// ProcessRow is one count of processes leasing over the same namespaces.
type ProcessRow struct {
	Processes        int     `json:"processes"`
	Namespaces       int     `json:"namespaces"`
	RequestsPerSec   float64 `json:"requests_per_second"`
	StmtsPerSecA     float64 `json:"statements_per_second_a"`
	StmtsPerSecB     float64 `json:"statements_per_second_b"`
	FsyncsPerSecA    float64 `json:"fsyncs_per_second_a"`
	FsyncsPerSecB    float64 `json:"fsyncs_per_second_b"`
	IdleStmtsPerSecA float64 `json:"idle_statements_per_second_a"`
	IdleStmtsPerSecB float64 `json:"idle_statements_per_second_b"`
}

const scaleAdmin = "scale-admin-token-0123456789"

func (c *scaleCmd) run(ctx context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("scale takes no arguments")
	}
	counts, err := positiveList(c.counts, "--namespaces")
	if err != nil {
		return err
	}
	procs, err := positiveList(c.processes, "--processes")
	if err != nil {
		return err
	}
	if c.workers < 1 || c.workers > 256 {
		return usagef("--workers %d must be between 1 and 256", c.workers)
	}
	servers := cliflag.SplitList(c.mysql)
	if len(servers) == 0 {
		dir := c.dir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "tkscale"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		pair, err := testservers.StartPair(ctx, dir)
		if err != nil {
			return err
		}
		defer func() {
			for _, s := range pair {
				_ = s.Stop()
			}
		}()
		servers = []string{pair[0].DSN(""), pair[1].DSN("")}
	}
	if len(servers) != 2 {
		return usagef("--mysql takes the pair's two DSNs")
	}
	bin := c.ticketd
	if bin == "" {
		dir, err := os.MkdirTemp("", "tkscale-bin")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "ticketd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/ticketd/ticketd/cmd/ticketd").CombinedOutput(); err != nil {
			return fmt.Errorf("go build cmd/ticketd: %v\n%s", err, out)
		}
	}
	s := &scaleRun{bin: bin, servers: servers, workers: c.workers, idle: c.idle, log: m.Stderr}
	var rows []ScaleRow
	for _, n := range counts {
		row, err := s.measure(ctx, n)
		if err != nil {
			return fmt.Errorf("%d namespaces: %w", n, err)
		}
		fmt.Fprintf(m.Stderr, "scale: %+v\n", row)
		rows = append(rows, row)
	}
	var prows []ProcessRow
	for _, p := range procs {
		row, err := s.processes(ctx, p, c.loadNamespaces)
		if err != nil {
			return fmt.Errorf("%d processes: %w", p, err)
		}
		fmt.Fprintf(m.Stderr, "scale: %+v\n", row)
		prows = append(prows, row)
	}
	writeScaleTable(m.Stdout, rows, prows)
	if c.svg != "" && len(rows) > 0 {
		if err := os.WriteFile(c.svg, []byte(scaleChart(rows)), 0o644); err != nil {
			return err
		}
	}
	line, err := json.Marshal(struct {
		Namespaces []ScaleRow   `json:"namespaces"`
		Processes  []ProcessRow `json:"processes,omitempty"`
	}{rows, prows})
	if err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, string(line))
	return nil
}

func positiveList(s, flagName string) ([]int, error) {
	var out []int
	for _, f := range cliflag.SplitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, usagef("%s: %q is not a count between 1 and 1000000", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// scaleRun is what every measurement shares: the ticketd binary and the pair.
type scaleRun struct {
	bin     string
	servers []string // root DSNs, no database
	workers int
	idle    time.Duration
	log     io.Writer
	dbSeq   atomic.Int64
}

// freshDatabases creates a new database on each server, with ticketd's schema, and returns their DSNs
// and the root pools.
func (s *scaleRun) freshDatabases(ctx context.Context) ([]string, []*sql.DB, error) {
	name := fmt.Sprintf("tkscale_%d_%d", os.Getpid(), s.dbSeq.Add(1))
	var dsns []string
	var dbs []*sql.DB
	for _, root := range s.servers {
		cfg, err := mysql.ParseDSN(root)
		if err != nil {
			return nil, nil, err
		}
		cfg.DBName = ""
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(2)
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, nil, err
		}
		dbs = append(dbs, db)
		cfg.DBName = name
		dsns = append(dsns, cfg.FormatDSN())
	}
	if out, err := exec.CommandContext(ctx, s.bin, "migrate", "--mysql", strings.Join(dsns, ",")).CombinedOutput(); err != nil {
		s.dropDatabases(dsns, dbs)
		return nil, nil, fmt.Errorf("migrate: %v %s", err, out)
	}
	return dsns, dbs, nil
}

func (s *scaleRun) dropDatabases(dsns []string, dbs []*sql.DB) {
	for i, db := range dbs {
		if cfg, err := mysql.ParseDSN(dsns[i]); err == nil {
			_, _ = db.Exec("DROP DATABASE IF EXISTS " + cfg.DBName)
		}
		_ = db.Close()
	}
}

// serveProc is one `ticketd serve`.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
}

func (s *scaleRun) serve(ctx context.Context, dsns []string) (*serveProc, error) {
	// Every request comes from this one address: no per-client bound of its own.
	cmd := exec.CommandContext(ctx, s.bin, "serve", "--listen", "127.0.0.1:0", "--max-connections-per-client", "0")
	cmd.Env = append(os.Environ(), "TICKETD_MYSQL="+strings.Join(dsns, ","), "TICKETD_ADMIN_TOKEN="+scaleAdmin)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serveProc{cmd: cmd, done: make(chan struct{})}
	urlCh := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var line struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				urlCh <- line.URL
			} else if !strings.Contains(sc.Text(), `"level":"INFO"`) {
				fmt.Fprintf(s.log, "ticketd: %s\n", sc.Text())
			}
		}
	}()
	select {
	case p.url = <-urlCh:
		return p, nil
	case <-time.After(30 * time.Second):
	case <-p.done:
	}
	p.stop()
	return nil, errors.New("ticketd serve did not start listening")
}

func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = p.cmd.Wait()
}

// rssMiB is the process's resident set, from /proc.
func (p *serveProc) rssMiB() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

var scaleHTTP = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// call sends one request and returns the body; a status other than want is an error.
func call(ctx context.Context, method, url, body string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+scaleAdmin)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := scaleHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != want {
		err = fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return b, err
}

// each runs f(i) for i in [0, n) on s.workers goroutines and returns the first error.
func (s *scaleRun) each(ctx context.Context, n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range min(s.workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// status reads counters of SHOW GLOBAL STATUS on each server.
func status(ctx context.Context, dbs []*sql.DB, names ...string) ([]map[string]float64, error) {
	var out []map[string]float64
	for _, db := range dbs {
		m := map[string]float64{}
		for _, name := range names {
			var k string
			var v float64
			if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&k, &v); err != nil {
				return nil, err
			}
			m[name] = v
		}
		out = append(out, m)
	}
	return out, nil
}

// statusNames are the counters read: statements (Questions counts each statement a client sent,
// these reads included: statusReads of them per read) and fsyncs.
var statusNames = []string{"Questions", "Innodb_data_fsyncs"}

const statusReads = 2

func (s *scaleRun) measure(ctx context.Context, n int) (ScaleRow, error) {
	row := ScaleRow{Namespaces: n}
	dsns, dbs, err := s.freshDatabases(ctx)
	if err != nil {
		return row, err
	}
	defer s.dropDatabases(dsns, dbs)
	p, err := s.serve(ctx, dsns)
	if err != nil {
		return row, err
	}
	defer p.stop()
	if row.FreshRSSMiB, err = p.rssMiB(); err != nil {
		return row, err
	}
	name := func(i int) string { return fmt.Sprintf("ns%06d", i) }
	if err := s.each(ctx, n, func(i int) error {
		_, err := call(ctx, "PUT", p.url+"/v1/namespaces/"+name(i), `{"block_size":1000}`, http.StatusCreated)
		return err
	}); err != nil {
		return row, err
	}
	before, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	lat := make([]time.Duration, n)
	if err := s.each(ctx, n, func(i int) error {
		start := time.Now()
		_, err := call(ctx, "POST", p.url+"/v1/namespaces/"+name(i)+"/blocks", `{"size":10}`, http.StatusOK)
		lat[i] = time.Since(start)
		return err
	}); err != nil {
		return row, err
	}
	after, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	var stmts float64
	for i := range dbs {
		stmts += after[i]["Questions"] - before[i]["Questions"] - statusReads*float64(len(statusNames))
	}
	row.StmtsPerLease = stmts / float64(n)
	slices.Sort(lat)
	row.LeaseP99MS = float64(lat[min(n-1, n*99/100)].Microseconds()) / 1000

	scrape := func() (time.Duration, int, error) {
		start := time.Now()
		body, err := call(ctx, "GET", p.url+"/metrics", "", http.StatusOK)
		return time.Since(start), len(body), err
	}
	// The first scrape reads every namespace's counters from the servers; later ones serve the last
	// reading (the next is taken in the background every 10 s).
	took, size, err := scrape()
	if err != nil {
		return row, err
	}
	row.ScrapeMS, row.ScrapeKiB = float64(took.Microseconds())/1000, float64(size)/1024

	// Idle: what the process sends on its own (water marks, checks, settings), no request, no scrape.
	idle0, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	time.Sleep(s.idle)
	idle1, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	for i := range dbs {
		d := idle1[i]["Questions"] - idle0[i]["Questions"] - statusReads*float64(len(statusNames))
		row.IdleStmtsPerSec = max(row.IdleStmtsPerSec, d/s.idle.Seconds())
	}
	for range 2 { // the first starts a new reading, the second comes after it
		if took, _, err = scrape(); err != nil {
			return row, err
		}
		row.ScrapeAgainMS = max(row.ScrapeAgainMS, float64(took.Microseconds())/1000)
		time.Sleep(3 * time.Second)
	}
	if row.RSSMiB, err = p.rssMiB(); err != nil {
		return row, err
	}
	return row, nil
}

// processes starts k processes on one fresh database with ns namespaces, has each lease over all of
// them for a while, and counts statements and fsyncs per second on each server: under the load, then
// with the processes idle.
func (s *scaleRun) processes(ctx context.Context, k, ns int) (ProcessRow, error) {
	row := ProcessRow{Processes: k, Namespaces: ns}
	dsns, dbs, err := s.freshDatabases(ctx)
	if err != nil {
		return row, err
	}
	defer s.dropDatabases(dsns, dbs)
	var procs []*serveProc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for range k {
		p, err := s.serve(ctx, dsns)
		if err != nil {
			return row, err
		}
		procs = append(procs, p)
	}
	name := func(i int) string { return fmt.Sprintf("ns%06d", i) }
	if err := s.each(ctx, ns, func(i int) error {
		_, err := call(ctx, "PUT", procs[0].url+"/v1/namespaces/"+name(i), `{"block_size":1000}`, http.StatusCreated)
		return err
	}); err != nil {
		return row, err
	}
	// Every process leases from every namespace once (a cold cache each), then the window is measured
	// under an even load: each process, every namespace, round robin.
	if err := s.each(ctx, k*ns, func(i int) error {
		_, err := call(ctx, "POST", procs[i%k].url+"/v1/namespaces/"+name(i/k)+"/blocks", `{"size":1}`, http.StatusOK)
		return err
	}); err != nil {
		return row, err
	}
	window := s.idle
	before, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	var requests atomic.Int64
	lctx, cancel := context.WithTimeout(ctx, window)
	_ = s.each(lctx, math.MaxInt32, func(i int) error {
		_, err := call(lctx, "POST", procs[i%k].url+"/v1/namespaces/"+name((i/k)%ns)+"/blocks", `{"size":1}`, http.StatusOK)
		if err == nil {
			requests.Add(1)
		}
		return nil
	})
	cancel()
	after, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	time.Sleep(s.idle) // idle
	idle, err := status(ctx, dbs, statusNames...)
	if err != nil {
		return row, err
	}
	per := func(a, b map[string]float64, key string, reads bool) float64 {
		d := b[key] - a[key]
		if reads {
			d -= statusReads * float64(len(statusNames))
		}
		return d / window.Seconds()
	}
	row.RequestsPerSec = float64(requests.Load()) / window.Seconds()
	row.StmtsPerSecA, row.StmtsPerSecB = per(before[0], after[0], "Questions", true), per(before[1], after[1], "Questions", true)
	row.FsyncsPerSecA, row.FsyncsPerSecB = per(before[0], after[0], "Innodb_data_fsyncs", false), per(before[1], after[1], "Innodb_data_fsyncs", false)
	row.IdleStmtsPerSecA, row.IdleStmtsPerSecB = per(after[0], idle[0], "Questions", true), per(after[1], idle[1], "Questions", true)
	return row, nil
}

func writeScaleTable(w io.Writer, rows []ScaleRow, prows []ProcessRow) {
	fmt.Fprintln(w, "| namespaces | RSS, fresh | RSS | first /metrics scrape | its size | later scrapes | lease p99 | statements per lease | idle statements/s per server |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.0f MiB | %.0f MiB | %.0f ms | %.0f KiB | %.1f ms | %.1f ms | %.2f | %.1f |\n",
			thousands(r.Namespaces), r.FreshRSSMiB, r.RSSMiB, r.ScrapeMS, r.ScrapeKiB, r.ScrapeAgainMS, r.LeaseP99MS, r.StmtsPerLease, r.IdleStmtsPerSec)
	}
	if len(prows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| processes | namespaces | requests/s | statements/s a | b | fsyncs/s a | b | idle statements/s a | b |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range prows {
		fmt.Fprintf(w, "| %d | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.1f |\n", r.Processes, thousands(r.Namespaces), r.RequestsPerSec,
			r.StmtsPerSecA, r.StmtsPerSecB, r.FsyncsPerSecA, r.FsyncsPerSecB, r.IdleStmtsPerSecA, r.IdleStmtsPerSecB)
	}
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// scaleChart draws resident memory and scrape time against the namespace count (log scale) as an SVG:
// two panels side by side.
func scaleChart(rows []ScaleRow) string {
	const w, h, pad = 360, 240, 48
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w, h)
	panel := func(x0 int, title, unit string, value func(ScaleRow) float64) {
		top := 0.0
		for _, r := range rows {
			top = max(top, value(r))
		}
		top = niceCeil(top)
		lo, hi := 0.0, math.Log10(float64(max(rows[len(rows)-1].Namespaces, 10)))
		px := func(n int) float64 {
			return float64(x0+pad) + (math.Log10(float64(max(n, 1)))-lo)/(hi-lo)*float64(w-2*pad)
		}
		py := func(v float64) float64 { return float64(h-pad) - v/top*float64(h-2*pad) }
		fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">%s</text>`+"\n", x0+pad, title)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`+"\n",
			x0+pad, h-pad, x0+w-pad, h-pad, x0+pad, pad, x0+pad, h-pad)
		for i := 0; i <= 4; i++ {
			v := top * float64(i) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end">%g %s</text>`+"\n", x0+pad-4, py(v)+4, v, unit)
		}
		for _, r := range rows {
			fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%s</text>`+"\n", px(r.Namespaces), h-pad+16, thousands(r.Namespaces))
		}
		var pts []string
		for _, r := range rows {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(r.Namespaces), py(value(r))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>`+"\n", strings.Join(pts, " "))
		for _, r := range rows {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="#1f77b4"/>`+"\n", px(r.Namespaces), py(value(r)))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">namespaces (log scale)</text>`+"\n", x0+w/2, h-8)
	}
	panel(0, "resident memory of one ticketd serve", "MiB", func(r ScaleRow) float64 { return r.RSSMiB })
	panel(w, "one /metrics scrape", "ms", func(r ScaleRow) float64 { return r.ScrapeMS })
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
