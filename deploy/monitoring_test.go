package deploy

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"go.yaml.in/yaml/v3"

	"github.com/ticketd/ticketd/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithTicketd(m)) }

const (
	monAdmin = "monitoring-admin-token-0123456789"
	monToken = "monitoring-orders-token-0123456789"
)

// promtool returns the path of promtool. Under CI (or the test harness) a missing promtool fails the
// test: scripts/with-servers.sh installs it (Debian's prometheus package).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool is not installed (apt-get install prometheus); scripts/with-servers.sh installs it"
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// TestAlertRulesPassPromtool: promtool accepts the rules, and their unit tests (alerts_test.yml:
// fenced, down, headroom, exhausted) pass.
func TestAlertRulesPassPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertRulesCoverTheIssue: a rule for each thing an operator must hear about.
func TestAlertRulesCoverTheIssue(t *testing.T) {
	exprs := alertExprs(t)
	for alert, metric := range map[string]string{
		"TicketServerDown":         "ticketd_ticket_server_up",
		"TicketServerFenced":       "ticketd_ticket_server_fenced",
		"NamespaceHeadroomLow":     "ticketd_namespace_ids_remaining",
		"TicketdCacheStalls":       "ticketd_cache_stalls_total",
		"TicketServerLeaseLatency": "ticketd_lease_duration_seconds_bucket",
	} {
		if !strings.Contains(exprs[alert], metric) {
			t.Errorf("alert %s: expr %q does not use %s", alert, exprs[alert], metric)
		}
	}
}

// alertExprs returns each alert's expression from prometheus/alerts.yml.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert+r.Record] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	return out
}

// dashboardExprs returns the query of every target of every panel (rows included) of the Grafana
// dashboard, by panel title.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("grafana/ticketd.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  json.RawMessage
	}
	var d struct {
		UID, Title string
		Panels     []panel
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("ticketd.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Fatal("the dashboard has no uid or title")
	}
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				out[fmt.Sprintf("%s #%d", p.Title, i)] = tg.Expr
			}
			var inner []panel
			if len(p.Panels) > 0 && json.Unmarshal(p.Panels, &inner) == nil {
				walk(inner)
			}
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// promqlNoise is what PromQL holds besides metric names: strings, label matchers, ranges and
// offsets, the label lists of by/without/on/ignoring/group_*, and numbers with units.
var promqlNoise = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)

// promqlIdent is a name in what is left; a name followed by "(" is a function.
var promqlIdent = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)

// promqlKeywords are the words of PromQL that are not metric names.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true, "e": true}

// metricNames returns the metric names a PromQL expression reads.
func metricNames(expr string) []string {
	var out []string
	rest := promqlNoise.ReplaceAllString(expr, " ")
	for _, m := range promqlIdent.FindAllStringSubmatchIndex(rest, -1) {
		name := rest[m[0]:m[1]]
		if m[2] >= 0 || promqlKeywords[name] {
			continue // a function, or a keyword
		}
		if m[0] > 0 && (rest[m[0]-1] >= '0' && rest[m[0]-1] <= '9' || rest[m[0]-1] == '.') {
			continue // the exponent or unit of a number: 1e3, 5m
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tt := range []struct{ expr, want string }{
		{`up{job="ticketd"} == 0`, "up"},
		{`max by (server) (ticketd_ticket_server_up) == 0`, "ticketd_ticket_server_up"},
		{`histogram_quantile(0.99, sum by (server, le) (rate(ticketd_lease_duration_seconds_bucket{result="ok"}[5m]))) > 0.1`, "ticketd_lease_duration_seconds_bucket"},
		{"min by (namespace) (a_b)\n / sum by (namespace) (rate(c_total[1h])) < 30 * 86400", "a_b c_total"},
		{`sum(rate(x[$__rate_interval])) / 1e3 unless on (instance) y{a="b"} offset 5m`, "x y"},
		{`label_replace(z, "dst", "$1", "src", "(.*)")`, "z"},
	} {
		if got := strings.Join(metricNames(tt.expr), " "); got != tt.want {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

// prometheusOwn are series that Prometheus itself makes for each scrape, not /metrics.
var prometheusOwn = map[string]bool{"up": true}

// TestMonitoringNamesServedMetrics: every metric that the alert rules and the dashboard read is one
// that a real `ticketd serve` serves on /metrics once it has leased IDs: the embedded store, and the
// MariaDB pair with one server's row locked, so that leases there time out and fail over (the lease
// latency and failover series exist only on a networked backend).
func TestMonitoringNamesServedMetrics(t *testing.T) {
	used := map[string][]string{} // metric → where
	for name, expr := range alertExprs(t) {
		for _, m := range metricNames(expr) {
			used[m] = append(used[m], "alert "+name)
		}
	}
	for name, expr := range dashboardExprs(t) {
		for _, m := range metricNames(expr) {
			used[m] = append(used[m], "panel "+name)
		}
	}
	served := map[string]bool{}
	for m := range embeddedMetrics(t) {
		served[m] = true
	}
	for m := range pairMetrics(t) {
		served[m] = true
	}
	var missing []string
	for m, where := range used {
		if !served[m] && !prometheusOwn[m] {
			sort.Strings(where)
			missing = append(missing, fmt.Sprintf("%s (%s)", m, strings.Join(where, ", ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("not served on /metrics: %s", m)
	}
	for _, m := range []string{"ticketd_ids_issued_total", "ticketd_failovers_total", "ticketd_lease_duration_seconds_bucket", "ticketd_cache_stalls_total"} {
		if len(used[m]) == 0 {
			t.Errorf("neither the rules nor the dashboard read %s", m)
		}
	}
}

// embeddedMetrics starts `ticketd serve` on an embedded store, leases IDs of a namespace and returns
// the names of the series on /metrics.
func embeddedMetrics(t *testing.T) map[string]bool {
	url := testenv.StartServe(t, []string{"TICKETD_ADMIN_TOKEN=" + monAdmin, "TICKETD_TOKENS=orders=" + monToken},
		"--data-dir", t.TempDir()).URL
	monCall(t, "PUT", url+"/v1/namespaces/orders", monAdmin, `{"block_size":100}`, 201)
	for range 20 {
		monCall(t, "POST", url+"/v1/namespaces/orders/blocks", monToken, `{"size":50}`, 200)
	}
	// A stall: a namespace whose cached segment stops serving at half its lease TTL, before any
	// prefetch (a namespace's first segment is none).
	monCall(t, "PUT", url+"/v1/namespaces/expiring", monAdmin, `{"block_size":10,"lease_ttl":"1s"}`, 201)
	monCall(t, "POST", url+"/v1/namespaces/expiring/blocks", monAdmin, `{"size":1}`, 200)
	time.Sleep(600 * time.Millisecond)
	monCall(t, "POST", url+"/v1/namespaces/expiring/blocks", monAdmin, `{"size":1}`, 200)
	return seriesNames(t, url)
}

// pairMetrics starts `ticketd serve` on fresh databases of the harness's MariaDB pair, locks the
// namespace's row on the second server (leases there time out and fail over to the first), leases IDs,
// and returns the names of the series on /metrics.
func pairMetrics(t *testing.T) map[string]bool {
	dsns := testenv.Pair(t)
	env := []string{"TICKETD_MYSQL=" + testenv.DSNList(dsns), "TICKETD_ADMIN_TOKEN=" + monAdmin, "TICKETD_TOKENS=orders=" + monToken}
	testenv.RunTicketd(t, env, "migrate")
	url := testenv.StartServe(t, env, "--cache=false", "--attempt-timeout", "300ms").URL
	monCall(t, "PUT", url+"/v1/namespaces/orders", monAdmin, `{"block_size":100}`, 201)
	monCall(t, "POST", url+"/v1/namespaces/orders/blocks", monToken, `{"size":10}`, 200)

	db, err := sql.Open("mysql", dsns[1])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var name string
	if err := tx.QueryRowContext(ctx, "SELECT name FROM ticketd_namespaces WHERE name = 'orders' FOR UPDATE").Scan(&name); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		monCall(t, "POST", url+"/v1/namespaces/orders/blocks", monToken, `{"size":10}`, 200)
	}
	return seriesNames(t, url)
}

func monCall(t *testing.T, method, url, token, body string, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	return b
}

// seriesNames returns the name of every sample line on /metrics (histograms as their _bucket, _sum
// and _count series).
func seriesNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range strings.Split(string(monCall(t, "GET", url+"/metrics", monAdmin, "", 200)), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	return out
}

// namespaceLabel finds the label "namespace" where PromQL, a rule test or a template names a label:
// in a by/without list, a matcher or a series, a rule test's labels, {{namespace}} and $labels.namespace.
var namespaceLabel = regexp.MustCompile(`\$labels\.namespace\b|\{\{\s*namespace\s*\}\}|\b(?:by|without)\s*\([^)]*\bnamespace\b[^)]*\)|[{,]\s*namespace\s*(?:=|!=|=~|!~)|(?m)^\s*namespace:`)

// TestMonitoringUsesTicketdNamespace: the rules, their tests and the dashboard name a namespace by
// ticketd_namespace, never by "namespace", which Prometheus's Kubernetes discovery adds to every series
// for the Kubernetes namespace: grouped by it, every alert and panel would be about the wrong one.
func TestMonitoringUsesTicketdNamespace(t *testing.T) {
	for _, path := range []string{"prometheus/alerts.yml", "prometheus/alerts_test.yml", "grafana/ticketd.json"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range namespaceLabel.FindAllString(string(b), -1) {
			t.Errorf("%s names the label \"namespace\" in %q; ticketd's label is ticketd_namespace", path, m)
		}
		if !strings.Contains(string(b), "ticketd_namespace") {
			t.Errorf("%s does not name ticketd_namespace", path)
		}
	}
}
