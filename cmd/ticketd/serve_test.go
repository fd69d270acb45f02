package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestMain lets the end-to-end tests run `ticketd serve` as a real process. It is built without -race:
// under the race detector on both sides the 64,000-request runs take minutes, and the server's
// concurrency is race-tested in-process by the server package's own tests.
func TestMain(m *testing.M) { os.Exit(testenv.RunWithTicketd(m)) }

const (
	e2eAdmin = "e2e-admin-token-0123456789"
	e2eToken = "e2e-orders-token-0123456789"
)

// startServe starts `ticketd serve --listen 127.0.0.1:0 ARGS` with the environment additions and
// waits for its "listening" log line.
func startServe(t *testing.T, env map[string]string, args ...string) *testenv.Serve {
	t.Helper()
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	return testenv.StartServe(t, kv, args...)
}

var e2eClient = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func call(method, url, token, body string) (int, []byte, error) {
	return callCtx(context.Background(), method, url, token, body)
}

// callCtx is call with a context, for a client trace.
func callCtx(ctx context.Context, method, url, token, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e2eClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func mustCall(t *testing.T, want int, method, url, token, body string) []byte {
	t.Helper()
	code, b, err := call(method, url, token, body)
	if err != nil || code != want {
		t.Fatalf("%s %s: %d %s %v, want %d", method, url, code, b, err, want)
	}
	return b
}

// load runs clients × perClient requests of mixed kinds against the urls (client i uses url i mod n):
// blocks of 1 to 200 IDs, a few of 6,000 (above the cache: leased for the request), and some GET ids
// requests. It returns every block (an ID list as one-ID blocks of step 2) and the errors.
type loadResult struct {
	blocks []allocator.Block
	errs   []error
}

func load(urls []string, ns, token string, clients, perClient int, done *atomic.Int64) loadResult {
	var mu sync.Mutex
	var out loadResult
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 7))
			base := urls[c%len(urls)] + "/v1/namespaces/" + ns
			var blocks []allocator.Block
			var errs []error
			for i := 0; i < perClient; i++ {
				var err error
				switch k := r.IntN(100); {
				case k < 10:
					var bs []allocator.Block
					bs, err = takeIDs(base, token, 1+r.IntN(50))
					blocks = append(blocks, bs...)
				default:
					size := 1 + r.IntN(200)
					if k < 13 {
						size = 6000
					}
					var b allocator.Block
					b, err = takeBlock(base, token, size)
					if err == nil {
						blocks = append(blocks, b)
					}
				}
				if err != nil {
					errs = append(errs, err)
				}
				if done != nil {
					done.Add(1)
				}
			}
			mu.Lock()
			out.blocks = append(out.blocks, blocks...)
			out.errs = append(out.errs, errs...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func takeBlock(base, token string, size int) (allocator.Block, error) {
	code, body, err := call("POST", base+"/blocks", token, fmt.Sprintf(`{"size":%d}`, size))
	if err != nil || code != 200 {
		return allocator.Block{}, fmt.Errorf("lease of %d: %d %s %v", size, code, body, err)
	}
	var b api.Block
	if err := json.Unmarshal(body, &b); err != nil {
		return allocator.Block{}, err
	}
	blk, err := b.ToBlock()
	if err == nil && blk.Size != int64(size) {
		err = fmt.Errorf("asked %d IDs, got %v", size, blk)
	}
	return blk, err
}

func takeIDs(base, token string, n int) ([]allocator.Block, error) {
	code, body, err := call("GET", fmt.Sprintf("%s/ids?count=%d", base, n), token, "")
	if err != nil || code != 200 {
		return nil, fmt.Errorf("ids: %d %s %v", code, body, err)
	}
	var ids api.IDs
	if err := json.Unmarshal(body, &ids); err != nil {
		return nil, err
	}
	if len(ids.IDs) != n {
		return nil, fmt.Errorf("asked %d IDs, got %d", n, len(ids.IDs))
	}
	out := make([]allocator.Block, 0, n)
	for _, s := range ids.IDs {
		id, err := api.ParseID(s)
		if err != nil {
			return nil, err
		}
		out = append(out, allocator.Block{Namespace: ids.Namespace, Start: id, Step: 2, Size: 1})
	}
	return out, nil
}

// checkBlocks: no ID twice, and each server's blocks all of one parity, the two servers' different.
func checkBlocks(t *testing.T, blocks []allocator.Block, servers []string) {
	t.Helper()
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatalf("duplicate IDs: %v", err)
	}
	parity := map[string]int64{}
	for _, b := range blocks {
		if b.Server == "" {
			continue // from the IDs route, which names no server
		}
		if p, ok := parity[b.Server]; ok && p != b.Start%2 {
			t.Fatalf("%s issued IDs of both parities (%v)", b.Server, b)
		}
		parity[b.Server] = b.Start % 2
	}
	if len(servers) == 2 {
		if len(parity) != 2 || parity[servers[0]] == parity[servers[1]] {
			t.Fatalf("blocks by server parity %v, want both of %v with different parities", parity, servers)
		}
	}
}

// preparePair migrates the pair's databases and creates namespace orders through the API of a
// short-lived server with the admin token.
func preparePair(t *testing.T, dsns []string) map[string]string {
	t.Helper()
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(dsns), "TICKETD_ADMIN_TOKEN": e2eAdmin,
		"TICKETD_TOKENS": "orders=" + e2eToken}
	if _, errOut, code := run(t, env, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	return env
}

// TestServeOnThePair: `ticketd serve` on the harness's MariaDB pair, then two replicas on one pair;
// 32 concurrent HTTP clients × 2,000 requests of mixed sizes; no ID is seen twice and every block's
// parity matches the server it names.
func TestServeOnThePair(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			dsns := testenv.Pair(t)
			env := preparePair(t, dsns)
			servers := []string{mysql.ServerName(dsns[0]), mysql.ServerName(dsns[1])}
			var urls []string
			var procs []*testenv.Serve
			for i := 0; i < replicas; i++ {
				p := startServe(t, env)
				procs = append(procs, p)
				urls = append(urls, p.URL)
			}
			mustCall(t, 201, "PUT", urls[0]+"/v1/namespaces/orders", e2eAdmin, `{"block_size":100,"max_block_size":24000}`)
			if replicas == 1 {
				refusedRequestsMoveNoCounter(t, urls[0])
			}
			res := load(urls, "orders", e2eToken, 32, 2000, nil)
			if len(res.errs) > 0 {
				t.Fatalf("%d requests failed; first: %v", len(res.errs), res.errs[0])
			}
			checkBlocks(t, res.blocks, servers)
			metrics := string(mustCall(t, 200, "GET", urls[0]+"/metrics", e2eAdmin, ""))
			for _, s := range servers {
				if want := fmt.Sprintf(`ticketd_lease_duration_seconds_count{result="ok",server="%s"}`, s); !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			for _, p := range procs {
				if err := p.Stop(t); err != nil {
					t.Fatalf("exit after SIGTERM: %v", err)
				}
			}
		})
	}
}

// refusedRequestsMoveNoCounter sends a burst of bad requests to a server whose cache is cold and
// checks that the counters on both ticket servers did not move.
func refusedRequestsMoveNoCounter(t *testing.T, url string) {
	t.Helper()
	counters := func() string {
		var ns api.Namespace
		if err := json.Unmarshal(mustCall(t, 200, "GET", url+"/v1/namespaces/orders", e2eAdmin, ""), &ns); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ns.Servers)
	}
	before := counters()
	bad := []struct{ method, path, token, body string }{
		{"POST", "/v1/namespaces/orders/blocks", e2eToken, `{"size":24001}`},
		{"POST", "/v1/namespaces/orders/blocks", e2eToken, `{"size":0}`},
		{"POST", "/v1/namespaces/orders/blocks", e2eToken, `{"size":"1"}`},
		{"POST", "/v1/namespaces/orders/blocks", e2eToken, `{"size":1,"extra":1}`},
		{"POST", "/v1/namespaces/orders/blocks", "", `{"size":1}`},
		{"POST", "/v1/namespaces/orders/blocks", "not-the-token-0123456789", `{"size":1}`},
		{"GET", "/v1/namespaces/orders/ids?count=0", e2eToken, ""},
		{"GET", "/v1/namespaces/orders/ids?count=24001", e2eToken, ""},
		{"PUT", "/v1/namespaces/orders", e2eToken, `{"start":"999999999"}`},
		{"PUT", "/v1/namespaces/orders", e2eAdmin, `{"lease_ttl":"forever","start":"999999999"}`},
		{"POST", "/v1/namespaces/orders'%20OR%20'1'='1/blocks", e2eAdmin, `{"size":1}`},
	}
	for i := 0; i < 5; i++ {
		for _, r := range bad {
			if code, body, err := call(r.method, url+r.path, r.token, r.body); err != nil || code < 400 {
				t.Fatalf("%+v: %d %s %v", r, code, body, err)
			}
		}
	}
	if after := counters(); after != before {
		t.Fatalf("refused requests moved counters:\n%s\n%s", before, after)
	}
}

// TestServeWhileAMariaDBStops stops one MariaDB of a private pair in the middle of a run: every
// request still succeeds, /readyz stays 200, and the metrics show the server down.
func TestServeWhileAMariaDBStops(t *testing.T) {
	pair := testenv.PrivatePair(t)
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
	}
	dsns := []string{pair[0].DSN("ticketd"), pair[1].DSN("ticketd")}
	env := preparePair(t, dsns)
	// Small segments, so that the cache goes to the pair often during the run.
	p := startServe(t, env, "--cache-min", "500", "--cache-max", "4000", "--lease-timeout", "5s")
	mustCall(t, 201, "PUT", p.URL+"/v1/namespaces/orders", e2eAdmin, `{"block_size":50,"max_block_size":24000}`)
	const clients, each = 16, 1000
	var done atomic.Int64
	results := make(chan loadResult, 1)
	go func() { results <- load([]string{p.URL}, "orders", e2eToken, clients, each, &done) }()
	for done.Load() < clients*each/3 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := pair[0].Stop(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := done.Load()
	res := <-results
	if len(res.errs) > 0 {
		t.Fatalf("%d of %d requests failed after a MariaDB stopped; first: %v", len(res.errs), clients*each, res.errs[0])
	}
	if stoppedAt >= clients*each*9/10 {
		t.Fatalf("the server stopped after %d of %d requests: too late to show anything", stoppedAt, clients*each)
	}
	checkBlocks(t, res.blocks, nil)
	mustCall(t, 200, "GET", p.URL+"/readyz", "", "")
	metrics := string(mustCall(t, 200, "GET", p.URL+"/metrics", e2eAdmin, ""))
	down := fmt.Sprintf(`ticketd_ticket_server_up{server="127.0.0.1:%d"} 0`, pair[0].Port)
	if !strings.Contains(metrics, down) {
		t.Errorf("metrics lack %s", down)
	}
	if err := p.Stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// TestServeSIGTERMFinishesRequestsInFlight holds eight leases in flight (the namespace's row is locked
// on both servers), sends SIGTERM, and checks that the server stops accepting connections but answers
// all eight once the lock is released, then exits 0.
func TestServeSIGTERMFinishesRequestsInFlight(t *testing.T) {
	dsns := testenv.Pair(t)
	env := preparePair(t, dsns)
	p := startServe(t, env, "--cache=false", "--attempt-timeout", "20s", "--lease-timeout", "30s", "--write-timeout", "45s")
	mustCall(t, 201, "PUT", p.URL+"/v1/namespaces/orders", e2eAdmin, `{}`)
	ctx := context.Background()
	var lockers []*sql.Tx
	var dbs []*sql.DB
	for _, dsn := range dsns {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		dbs = append(dbs, db)
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("SELECT next_id FROM ticketd_namespaces WHERE name = 'orders' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, tx)
	}
	release := func() {
		for _, tx := range lockers {
			_ = tx.Rollback()
		}
	}
	defer release()
	const inFlight = 8
	type answer struct {
		code int
		body []byte
		err  error
	}
	answers := make(chan answer, inFlight)
	var written atomic.Int64 // requests the server has been sent in full
	trace := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				written.Add(1)
			}
		},
	})
	for i := 0; i < inFlight; i++ {
		go func() {
			code, body, err := callCtx(trace, "POST", p.URL+"/v1/namespaces/orders/blocks", e2eToken, `{"size":10}`)
			answers <- answer{code, body, err}
		}()
	}
	// Wait until all eight requests are sent and the leases wait on the row locks: one UPDATE per server
	// (concurrent leases of a namespace share the next UPDATE, so the others wait inside ticketd).
	waiting := func() int {
		n := 0
		for _, db := range dbs {
			var c int
			_ = db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE 'UPDATE ticketd_namespaces%'").Scan(&c)
			n += c
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for written.Load() < inFlight || waiting() < len(dbs) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests sent, %d leases waiting on the servers", written.Load(), inFlight, waiting())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the server read the last request it was sent
	_ = p.Signal(syscall.SIGTERM)
	addr := strings.TrimPrefix(p.URL, "http://")
	deadline = time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break // no longer accepting
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections 10s after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-p.Exited():
		t.Fatalf("exited with %d requests in flight: %v", inFlight, p.Err())
	case <-time.After(300 * time.Millisecond):
	}
	release()
	var blocks []allocator.Block
	for i := 0; i < inFlight; i++ {
		a := <-answers
		if a.err != nil || a.code != 200 {
			t.Fatalf("request in flight at SIGTERM: %d %s %v", a.code, a.body, a.err)
		}
		var b api.Block
		if err := json.Unmarshal(a.body, &b); err != nil {
			t.Fatal(err)
		}
		blk, err := b.ToBlock()
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, blk)
	}
	checkBlocks(t, blocks, nil)
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("did not exit after answering")
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	if !strings.Contains(p.Log(), "every request in flight was answered") {
		t.Fatalf("no shutdown line in the log:\n%s", p.Log())
	}
}

// TestServeInProcessOnTheEmbeddedStore drives Main the way main does, as the HTTP API page runs it: no
// database, on loopback, the page's curl with its JSON content type — with --no-auth, and with no
// auth flag at all (the embedded store on loopback serves open, and says so). curl's default form type,
// which a web page can send too, is refused and leases nothing.
func TestServeInProcessOnTheEmbeddedStore(t *testing.T) {
	for name, c := range map[string]struct {
		flags   []string
		warning string
	}{
		"no-auth":  {[]string{"--no-auth"}, "authentication is off (--no-auth)"},
		"no token": {nil, "authentication is off: no token is configured"},
	} {
		t.Run(name, func(t *testing.T) { serveEmbeddedOpen(t, c.flags, c.warning) })
	}
}

func serveEmbeddedOpen(t *testing.T, flags []string, warning string) {
	stderr := testenv.NewLog()
	m := &Main{Stdout: io.Discard, Stderr: stderr, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.ParseFlags(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, flags...)); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	select {
	case <-stderr.Listening():
	case <-time.After(10 * time.Second):
		t.Fatalf("not listening after 10s:\n%s", stderr.String())
	}
	url := stderr.URL()
	if !strings.Contains(stderr.String(), warning) {
		t.Fatalf("no warning that authentication is off:\n%s", stderr.String())
	}
	resp, err := http.Post(url+"/v1/namespaces/demo/blocks", "application/x-www-form-urlencoded", strings.NewReader(`{"size":10}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("a form-encoded POST to the open server: %d, want 415", resp.StatusCode)
	}
	curl := regexp.MustCompile(`(?m)^curl -X POST -H '(Content-Type: [^']+)' localhost:8080(\S+) -d '([^']*)'`).FindStringSubmatch(docSection(t, "docs/http-api.md", "# HTTP API"))
	if curl == nil {
		t.Fatal("docs/http-api.md has no open curl POST with a Content-Type")
	}
	ctype, _ := strings.CutPrefix(curl[1], "Content-Type: ")
	if resp, err = http.Post(url+curl[2], ctype, strings.NewReader(curl[3])); err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The block the HTTP API page shows for this request on a fresh data dir.
	shown := codeBlocks(docSection(t, "docs/http-api.md", "# HTTP API"), "json")
	if len(shown) == 0 {
		t.Fatal("docs/http-api.md shows no answer")
	}
	if want := shown[0]; resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("%d %s, docs/http-api.md shows %s", resp.StatusCode, body, want)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestServeFlagMistakes(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokenFile, []byte("orders=short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"listen address before the token", nil, []string{"serve", "--data-dir", dir, "--listen", "nonsense"}, `--listen "nonsense" is not an address to listen on: want HOST:PORT`},
		{"listen port", nil, []string{"serve", "--no-auth", "--data-dir", dir, "--listen", "127.0.0.1:99999"}, "--listen"},
		{"no token on a public address", nil, []string{"serve", "--data-dir", dir, "--listen", "0.0.0.0:0"}, "no token configured"},
		{"no token with the pair", nil, []string{"serve", "--mysql", "root@tcp(127.0.0.1:1)/x"}, "no token configured"},
		{"no-auth with a token", map[string]string{"TICKETD_ADMIN_TOKEN": e2eAdmin}, []string{"serve", "--no-auth", "--data-dir", dir}, "disabled but tokens"},
		{"short token", nil, []string{"serve", "--data-dir", dir, "--token", "orders=short"}, "at least 16"},
		{"bad token list in the environment", map[string]string{"TICKETD_TOKENS": "orders"}, []string{"serve", "--data-dir", dir}, "want NAMESPACE=TOKEN"},
		{"bad token file", nil, []string{"serve", "--data-dir", dir, "--token-file", tokenFile}, "line 1"},
		{"missing token file", nil, []string{"serve", "--data-dir", dir, "--token-file", filepath.Join(dir, "nope")}, "--token-file"},
		{"write timeout too short", nil, []string{"serve", "--no-auth", "--data-dir", dir, "--write-timeout", "1s"}, "--write-timeout"},
		{"half TLS", nil, []string{"serve", "--no-auth", "--data-dir", dir, "--tls-cert", "x.pem"}, "--tls-key"},
		{"bad log level", nil, []string{"serve", "--no-auth", "--data-dir", dir, "--log-level", "loud"}, "--log-level"},
		{"arguments", nil, []string{"serve", "--no-auth", "--data-dir", dir, "extra"}, "takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, tt.env, tt.args...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d %q, want 2 saying %q", code, errOut, tt.want)
			}
			for _, tok := range []string{e2eAdmin, "orders=short"} {
				if strings.Contains(errOut, tok) {
					t.Fatalf("the error shows a token: %s", errOut)
				}
			}
		})
	}
}
