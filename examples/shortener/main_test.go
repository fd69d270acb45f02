package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/ticketd/ticketd/examples/shortener/links"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// TestMain lets the end-to-end tests run `ticketd serve` as a real process, the way the shortener
// meets it in production.
func TestMain(m *testing.M) { os.Exit(testenv.RunWithTicketd(m)) }

const (
	adminToken = "e2e-admin-token-0123456789"
	linksToken = "e2e-links-token-0123456789"
	otherToken = "e2e-other-token-0123456789" // namespace other's: ticketd accepts it, not for links
	// e2eScrambleKey is the scramble key of the shortener under test.
	e2eScrambleKey = "9d41c07be25a6f83d10e4b7c92f5a3686c1e0f4a9b27d5e3c8f0a61b4d7e9c25"
)

// startTicketd migrates the harness pair's fresh databases, runs `ticketd serve` on them with an admin
// token and a token for namespace links, and creates links with blockSize. It returns the base URL and
// a function that kills the process.
func startTicketd(t *testing.T, blockSize int) (string, func()) {
	t.Helper()
	env := []string{"TICKETD_MYSQL=" + testenv.DSNList(testenv.Pair(t)),
		"TICKETD_ADMIN_TOKEN=" + adminToken, "TICKETD_TOKENS=links=" + linksToken + ",other=" + otherToken}
	testenv.RunTicketd(t, env, "migrate")
	srv := testenv.StartServe(t, env)
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/namespaces/links", strings.NewReader(fmt.Sprintf(`{"block_size":%d}`, blockSize)))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create namespace links: %d %s", resp.StatusCode, body)
	}
	return srv.URL, srv.Kill
}

// e2eClient does not follow redirects: the test looks at them.
var e2eClient = &http.Client{Timeout: 30 * time.Second,
	Transport:     &http.Transport{MaxIdleConnsPerHost: 64},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func call(method, url, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	resp, err := e2eClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// serveShortener opens the service with opts and serves it on a test server; both are closed when the
// test ends.
func serveShortener(t *testing.T, opts options) (*links.Service, *httptest.Server) {
	t.Helper()
	svc, disconnect, err := open(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(disconnect)
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return svc, srv
}

// link is what the test knows of a link it created.
type link struct {
	url, code, shortURL string
	id                  int64
}

// createLink creates a link of url; its ID is what codec decodes its code to (the API shows none).
func createLink(base, url string, codec *links.Codec) (link, error) {
	resp, body, err := call("POST", base+"/api/links", fmt.Sprintf(`{"url":%q}`, url))
	if err != nil {
		return link{}, err
	}
	var l struct {
		Code     string `json:"code"`
		ShortURL string `json:"short_url"`
		URL      string `json:"url"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &l) != nil {
		return link{}, fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, body)
	}
	id, err := codec.Decode(l.Code)
	if err != nil || l.URL != url || strings.Contains(string(body), `"id"`) {
		return link{}, fmt.Errorf("POST %s: %s (%v)", url, body, err)
	}
	return link{url: url, code: l.Code, shortURL: l.ShortURL, id: id}, nil
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the first error.
func parallel(workers, n int, fn func(i int) error) error {
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestEndToEnd: ticketd serve on the MariaDB pair, the shortener on the harness's Redis with IDs from
// that ticketd over HTTP, and 10,000 links created by 32 concurrent clients. Every code is unique and
// decodes to its link's ID, every code redirects to its URL and counts its hits, and the shortener
// leased far fewer blocks than it created links.
func TestEndToEnd(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	ticketd, killTicketd := startTicketd(t, 100)
	prefix := testenv.RedisPrefix(t, "shortener-e2e-")
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr})
	defer rdb.Close()

	// --dev for short URLs on the test server's own Host; the scramble key as in production.
	opts := options{ticketd: ticketd, token: linksToken, namespace: "links", redis: redisAddr, keyPrefix: prefix, scramble: true,
		scrambleKey: e2eScrambleKey, dev: true}
	svc, srv := serveShortener(t, opts)

	const linkCount, clients = 10_000, 32
	codec := links.NewCodec(e2eScrambleKey)
	made := make([]link, linkCount)
	err := parallel(clients, linkCount, func(i int) error {
		l, err := createLink(srv.URL, fmt.Sprintf("https://example.com/e2e/%d?q=%d", i, i*7), codec)
		made[i] = l
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	codes, ids := map[string]int{}, map[int64]int{}
	for i, l := range made {
		if j, dup := codes[l.code]; dup {
			t.Fatalf("links %d and %d share the code %s", j, i, l.code)
		}
		if j, dup := ids[l.id]; dup {
			t.Fatalf("links %d and %d share the ID %d", j, i, l.id)
		}
		codes[l.code], ids[l.id] = i, i
		if id, err := codec.Decode(l.code); err != nil || id != l.id {
			t.Fatalf("link %d: code %s decodes to %d, %v; its ID is %d", i, l.code, id, err, l.id)
		}
		if l.shortURL != srv.URL+"/"+l.code {
			t.Fatalf("link %d: short_url %s", i, l.shortURL)
		}
	}

	// Link i is visited 1 + i%2 times.
	hits := func(i int) int { return 1 + i%2 }
	err = parallel(clients, linkCount, func(i int) error {
		for range hits(i) {
			resp, body, err := call("GET", made[i].shortURL, "")
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != made[i].url {
				return fmt.Errorf("GET %s: %d Location %q %s, want 301 to %s", made[i].shortURL, resp.StatusCode, resp.Header.Get("Location"), body, made[i].url)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	totalHits := 0
	err = parallel(clients, linkCount, func(i int) error {
		resp, body, err := call("GET", srv.URL+"/api/links/"+made[i].code, "")
		if err != nil {
			return err
		}
		var got struct {
			URL  string
			Hits int
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil || strings.Contains(string(body), `"id"`) ||
			got.URL != made[i].url || got.Hits != hits(i) {
			return fmt.Errorf("GET /api/links/%s: %d %s; want url %s, %d hits and no id", made[i].code, resp.StatusCode, body, made[i].url, hits(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range linkCount {
		totalHits += hits(i)
	}

	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil || len(keys) != linkCount+1 {
		t.Fatalf("%d keys under %s (%v), want %d links and their count", len(keys), prefix, err, linkCount)
	}
	if n, err := rdb.Get(context.Background(), prefix+"links").Int(); err != nil || n != linkCount {
		t.Fatalf("the count of links is %d (%v), want %d", n, err, linkCount)
	}
	st := svc.Stats()
	t.Logf("%d links, %d redirects: %d blocks leased from ticketd (%.2f per 1,000 links; last block %d IDs), %d stalls",
		st.Created, st.Redirects, st.IDs.Refills, st.BlocksPer1000Links(), st.IDs.BlockSize, st.IDs.Stalls)
	if st.Created != linkCount || st.Redirects != int64(totalHits) || st.Failed != 0 || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Far fewer blocks than links: the namespace's block is 100 IDs, so even without the SDK's growing
	// blocks there would be at most 100; one block per link would be 10,000.
	if st.IDs.Refills < 2 || st.IDs.Refills > linkCount/50 {
		t.Fatalf("%d blocks leased for %d links; want between 2 and %d", st.IDs.Refills, linkCount, linkCount/50)
	}
	if st.IDs.RefillErrors != 0 {
		t.Errorf("%d failed refills (last: %v)", st.IDs.RefillErrors, st.IDs.LastError)
	}

	t.Run("command", func(t *testing.T) { testCommand(t, ticketd, redisAddr) })
	t.Run("token refused at start", func(t *testing.T) { testTokenRefusedAtStart(t, ticketd, redisAddr) })

	// With ticketd gone, links are still created from the IDs the client holds.
	killTicketd()
	cached := svc.Stats().IDs.Cached
	if cached < 1 {
		t.Fatalf("the client holds no IDs after the run: %+v", svc.Stats().IDs)
	}
	for i := range min(cached, 100) {
		l, err := createLink(srv.URL, fmt.Sprintf("https://example.com/after/%d", i), codec)
		if err != nil {
			t.Fatalf("link %d of the %d IDs cached, with ticketd down: %v", i, cached, err)
		}
		if _, dup := ids[l.id]; dup {
			t.Fatalf("ID %d issued twice", l.id)
		}
		ids[l.id] = linkCount + int(i)
	}
}

// TestShortCodesEndToEnd: the shortener with --code-length 4 on ticketd serve (the MariaDB pair).
// Without the admin token it refuses to start (the namespace's max_id is 2^63-1); with it, it sets
// max_id to 62^4-1. 3,000 links from 16 clients get distinct codes of at most 4 characters, each
// decoding to its ID. Then a shortener on a namespace that starts 401 IDs below 62^4-1 creates links
// until the IDs run out, none above, and then POST /api/links answers 507 codes_exhausted and
// /healthz says "exhausted".
func TestShortCodesEndToEnd(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	ticketd, _ := startTicketd(t, 100)
	prefix := testenv.RedisPrefix(t, "shortener-short-")
	opts := options{ticketd: ticketd, token: linksToken, namespace: "links", redis: redisAddr, keyPrefix: prefix, scramble: true,
		scrambleKey: e2eScrambleKey, dev: true, codeLength: 4}
	if _, _, err := open(context.Background(), opts, nil); err == nil || !strings.Contains(err.Error(), `set its max_id to 14776335`) {
		t.Fatalf("without the admin token: %v, want a refusal naming max_id 14776335", err)
	}
	opts.adminToken = adminToken
	svc, srv := serveShortener(t, opts)
	admin := func(method, path, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, ticketd+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	var ns struct {
		MaxID string `json:"max_id"`
	}
	if err := json.Unmarshal(admin("GET", "/v1/namespaces/links", ""), &ns); err != nil || ns.MaxID != "14776335" {
		t.Fatalf("the namespace's max_id is %q (%v), want 14776335", ns.MaxID, err)
	}

	codec, err := links.NewCodec(e2eScrambleKey).WithLength(4)
	if err != nil {
		t.Fatal(err)
	}
	codes, ids := map[string]bool{}, map[int64]bool{}
	check := func(l link) {
		t.Helper()
		if len(l.code) > 4 || codes[l.code] || ids[l.id] || l.id > codec.MaxID() {
			t.Fatalf("link %+v: a code over 4 characters, a code or ID seen before, or an ID above %d", l, codec.MaxID())
		}
		if id, err := codec.Decode(l.code); err != nil || id != l.id {
			t.Fatalf("code %s decodes to %d, %v; its ID is %d", l.code, id, err, l.id)
		}
		codes[l.code], ids[l.id] = true, true
	}
	const links = 3000
	made := make([]link, links)
	if err := parallel(16, links, func(i int) error {
		var err error
		made[i], err = createLink(srv.URL, fmt.Sprintf("https://example.com/short/%d", i), codec)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, l := range made {
		check(l)
	}

	// A second shortener on namespace other, created by the admin just below the ceiling (401 IDs
	// left, shared by the two ticket servers): links are created until the codes run out.
	admin("PUT", "/v1/namespaces/other", fmt.Sprintf(`{"start":"%d"}`, codec.MaxID()-400))
	opts.namespace, opts.token, opts.keyPrefix = "other", otherToken, testenv.RedisPrefix(t, "shortener-tail-")
	svc, srv = serveShortener(t, opts)
	codes, ids = map[string]bool{}, map[int64]bool{}
	var refusal []byte
	for i := 0; refusal == nil; i++ {
		if i > 1000 {
			t.Fatalf("%d links created below a ceiling 401 IDs away", i)
		}
		resp, body, err := call("POST", srv.URL+"/api/links", fmt.Sprintf(`{"url":"https://example.com/last/%d"}`, i))
		switch {
		case err != nil:
			t.Fatal(err)
		case resp.StatusCode == http.StatusCreated:
			var l struct{ Code string }
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatal(err)
			}
			id, _ := codec.Decode(l.Code)
			check(link{code: l.Code, id: id})
		default:
			refusal = body
			if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(body), `"code":"codes_exhausted"`) {
				t.Fatalf("link %d: %d %s, want 507 codes_exhausted", i, resp.StatusCode, body)
			}
		}
	}
	// Every ID below the ceiling, of both ticket servers, became a link before the refusal.
	if len(ids) != 401 || !ids[codec.MaxID()] || !ids[codec.MaxID()-1] {
		t.Errorf("%d links below the ceiling, want all 401, the last of them %d and %d", len(ids), codec.MaxID()-1, codec.MaxID())
	}
	resp, body, err := call("GET", srv.URL+"/healthz", "")
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"exhausted"`) {
		t.Fatalf("healthz: %v %s %v", resp, body, err)
	}
	if st := svc.Stats(); st.Exhausted < 1 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d links, the last refused with %s", len(ids), refusal)
}

// testCommand runs the command itself (flags, environment, connecting, graceful shutdown) against
// the same ticketd and Redis.
func testCommand(t *testing.T, ticketd, redisAddr string) {
	prefix := testenv.RedisPrefix(t, "shortener-cmd-")
	env := map[string]string{"SHORTENER_TOKEN": linksToken, "SHORTENER_KEY_PREFIX": prefix, "SHORTENER_SCRAMBLE_KEY": e2eScrambleKey}
	args := []string{"--listen=127.0.0.1:0", "--ticketd=" + ticketd, "--redis=" + redisAddr, "--base-url=http://sho.rt.test"}
	log := testenv.NewLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(k string) string { return env[k] }, log) }()
	var base string
	select {
	case <-log.Listening():
		base = "http://" + log.Addr()
	case err := <-done:
		t.Fatalf("the command stopped at start: %v\n%s", err, log)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("the command did not listen within 30s:\n%s", log)
	}
	l, err := createLink(base, "https://example.com/from-the-command", links.NewCodec(e2eScrambleKey))
	if err != nil {
		t.Fatal(err)
	}
	// The scramble key from the environment.
	if want, _ := links.NewCodec(e2eScrambleKey).Encode(l.id); l.code != want || l.shortURL != "http://sho.rt.test/"+want {
		t.Fatalf("link %+v, want code %s at http://sho.rt.test", l, want)
	}
	resp, _, err := call("GET", base+"/"+l.code, "")
	if err != nil || resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != l.url {
		t.Fatalf("redirect: %v %v", resp, err)
	}
	if resp, _, err := call("GET", base+"/healthz", ""); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after shutdown: %v\n%s", err, log)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not stop within 30s of its context ending")
	}
	if !strings.Contains(log.String(), `"msg":"stopped","links_created":1,"redirects":1`) {
		t.Errorf("no final stats line in the log:\n%s", log)
	}
}

// testTokenRefusedAtStart: a token ticketd does not accept, or accepts for another namespace, stops the
// command at start with ticketd's reason; it never listens.
func testTokenRefusedAtStart(t *testing.T, ticketd, redisAddr string) {
	for token, want := range map[string]string{
		"not-a-ticketd-token-0123456789": "401 invalid_token: the token is not one this server accepts",
		otherToken:                       "403 forbidden",
	} {
		log := testenv.NewLog()
		err := run(context.Background(), []string{"--listen=127.0.0.1:0", "--ticketd=" + ticketd, "--redis=" + redisAddr, "--token=" + token, "--dev"},
			func(string) string { return "" }, log)
		if err == nil || !strings.Contains(err.Error(), "refuses the token for namespace links: "+want) {
			t.Errorf("token %s: %v, want a refusal saying %q", token[:8], err, want)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("the error shows the token: %v", err)
		}
		if strings.Contains(log.String(), `"msg":"listening"`) {
			t.Errorf("token %s: the command listened:\n%s", token[:8], log)
		}
	}
}

// TestTokenCheckedBeforeConnecting: no token, or one shorter than ticketd accepts, is refused before
// Redis or ticketd is asked anything (both are down here).
func TestTokenCheckedBeforeConnecting(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"none":           {nil, nil, "no ticketd token: give --token or $SHORTENER_TOKEN"},
		"short":          {[]string{"--token", "short-token"}, nil, "is 11 characters; ticketd accepts none shorter than 16"},
		"short from env": {nil, map[string]string{"SHORTENER_TOKEN": "tok"}, "is 3 characters"},
	} {
		args := append([]string{"--redis", "127.0.0.1:1", "--ticketd", "http://127.0.0.1:1"}, tc.args...)
		err := run(context.Background(), args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "redis") {
			t.Errorf("%s: %v, want %q before connecting", name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "short-token") || strings.Contains(err.Error(), `"tok"`)) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}

func TestFlags(t *testing.T) {
	env := map[string]string{"SHORTENER_TOKEN": "tok", "SHORTENER_LISTEN": "0.0.0.0:9999", "SHORTENER_BASE_URL": "https://env.example",
		"SHORTENER_SCRAMBLE": "false", "SHORTENER_NAMESPACE": "short"}
	o, err := parseFlags([]string{"--listen", "127.0.0.1:1234", "--redis", "r:6379"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{listen: "127.0.0.1:1234", ticketd: "http://127.0.0.1:8080", token: "tok", namespace: "short", redis: "r:6379",
		keyPrefix: links.DefaultKeyPrefix, baseURL: "https://env.example", scramble: false, shutdownTimeout: 10 * time.Second, logLevel: "info",
		createRate: 1, createBurst: 20, codeLength: links.MaxCodeLen, createQuota: 100, createQuotaWindow: 24 * time.Hour,
		missRate: 1, missBurst: 30}
	if o != want {
		t.Fatalf("got  %+v\nwant %+v", o, want)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
	}{
		"bad bool in env":   {nil, map[string]string{"SHORTENER_SCRAMBLE": "maybe"}},
		"bad duration":      {[]string{"--shutdown-timeout", "soon"}, nil},
		"unknown flag":      {[]string{"--redis-addr", "x"}, nil},
		"stray argument":    {[]string{"serve"}, nil},
		"bad duration, env": {nil, map[string]string{"SHORTENER_SHUTDOWN_TIMEOUT": "soon"}},
		"code length, env":  {nil, map[string]string{"SHORTENER_CODE_LENGTH": "short"}},
	} {
		if _, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"--help"}, func(string) string { return "" }, &help); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(help.String(), "$SHORTENER_BASE_URL") {
		t.Errorf("--help: %v\n%s", err, help.String())
	}
	for _, bad := range []string{"no-port", "redis://user:secret@[::1", "http://x:6379", ":secret@127.0.0.1:6379", "user:secret@redis:6379", "secret@redis"} {
		if _, err := redisOptions(bad); err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("redisOptions(%q): %v", bad, err)
		}
	}
}

// TestComposeCommand: the shortener service of docker-compose.yml passes the command's flags, with the
// token and the scramble key from the environment as Compose gives them, and passes the checks of a
// production start (a scramble key, a base URL, no --dev).
func TestComposeCommand(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	s, ok := c.Services["shortener"]
	if !ok {
		t.Fatal("docker-compose.yml has no shortener service")
	}
	for _, k := range []string{"SHORTENER_TOKEN", "SHORTENER_SCRAMBLE_KEY", "SHORTENER_CREATE_TOKEN"} {
		if _, ok := s.Environment[k]; !ok {
			t.Errorf("the shortener service does not get %s", k)
		}
	}
	o, err := parseFlags(s.Command, func(k string) string {
		switch k {
		case "SHORTENER_TOKEN":
			return "from-compose"
		case "SHORTENER_SCRAMBLE_KEY":
			return e2eScrambleKey
		case "SHORTENER_CREATE_TOKEN":
			return "c81f04a9e27b5d36f0a94e1b72c85d3e"
		case "SHORTENER_REDIS":
			return s.Environment["SHORTENER_REDIS"]
		}
		return ""
	}, io.Discard)
	if err != nil {
		t.Fatalf("compose command %v: %v", s.Command, err)
	}
	if o.listen != "0.0.0.0:8081" || o.ticketd != "http://ticketd:8080" || !strings.HasPrefix(o.redis, "redis://:${REDIS_PASSWORD") || !strings.HasSuffix(o.redis, "@redis:6379/0") || o.token != "from-compose" ||
		o.namespace != "links" || o.baseURL == "" || o.scrambleKey != e2eScrambleKey || o.maxLinks <= 0 || o.createToken == "" {
		t.Fatalf("compose command %v gives %+v", s.Command, o)
	}
	if err := checkSecrets(o); err != nil {
		t.Fatalf("compose's shortener would not start: %v", err)
	}
}

// rawRedisLog prints go-redis's log lines as its default logger does.
type rawRedisLog struct{ w io.Writer }

func (l rawRedisLog) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(l.w, "redis: "+format+"\n", v...)
}

// TestRedisDownIsOneClearError: with Redis down at start the command fails with its own error, and
// go-redis's raw dial failures do not come before it.
func TestRedisDownIsOneClearError(t *testing.T) {
	port, err := testservers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("127.0.0.1:%d", port) // nothing listens there
	var log bytes.Buffer
	goredis.SetLogger(rawRedisLog{&log}) // what a process starts with
	err = run(context.Background(), []string{"--redis", down, "--token", linksToken, "--dev"}, func(string) string { return "" }, &log)
	if err == nil || !strings.Contains(err.Error(), "redis at "+down+" does not answer") {
		t.Fatalf("run: %v", err)
	}
	if strings.Contains(log.String(), "redis: ") || strings.Contains(log.String(), "pool.go") {
		t.Fatalf("go-redis's own lines were printed:\n%s", log.String())
	}
}

// TestSecretsCheckedBeforeConnecting: without a scramble key of real strength and a base URL the
// command does not start (the compose file of old started with the public key, so anyone could list the
// links); --dev lets it, and logs so. Both checks come before Redis or ticketd is asked (both are down).
func TestSecretsCheckedBeforeConnecting(t *testing.T) {
	base := []string{"--redis", "127.0.0.1:1", "--ticketd", "http://127.0.0.1:1", "--token", linksToken}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no key":          {[]string{"--base-url", "https://sho.rt"}, nil, "no scramble key"},
		"a short key":     {[]string{"--base-url", "https://sho.rt"}, map[string]string{"SHORTENER_SCRAMBLE_KEY": "short-secret-key"}, "at least 32"},
		"a repeated key":  {[]string{"--base-url", "https://sho.rt"}, map[string]string{"SHORTENER_SCRAMBLE_KEY": strings.Repeat("5ecre70a", 8)}, "repeated"},
		"a passphrase":    {[]string{"--base-url", "https://sho.rt"}, map[string]string{"SHORTENER_SCRAMBLE_KEY": "correct horse battery staple, twice over"}, "not a passphrase"},
		"16 bytes":        {[]string{"--base-url", "https://sho.rt"}, map[string]string{"SHORTENER_SCRAMBLE_KEY": "9d41c07be25a6f83d10e4b7c92f5a368"}, "holds 16 bytes"},
		"no scramble":     {[]string{"--base-url", "https://sho.rt", "--scramble=false"}, nil, "for --dev only"},
		"no base URL":     {nil, map[string]string{"SHORTENER_SCRAMBLE_KEY": e2eScrambleKey}, "no base URL"},
		"weak create tok": {[]string{"--base-url", "https://sho.rt", "--create-token", "aaaaaaaaaaaaaaaaaaaa"}, map[string]string{"SHORTENER_SCRAMBLE_KEY": e2eScrambleKey}, "creation token"},
	} {
		var log bytes.Buffer
		err := run(context.Background(), append(append([]string{}, base...), tc.args...), func(k string) string { return tc.env[k] }, &log)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "redis") {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		for _, secret := range []string{"short-secret-key", "5ecre70a5ecre70a", "aaaaaaaaaaaa", "horse battery", "9d41c07be25a"} {
			if err != nil && strings.Contains(err.Error()+log.String(), secret) {
				t.Errorf("%s: a secret is in the error or the log: %v", name, err)
			}
		}
	}
	var log bytes.Buffer
	err := run(context.Background(), append(base, "--dev", "--scramble=false"), func(string) string { return "" }, &log)
	if err == nil || !strings.Contains(err.Error(), "redis at 127.0.0.1:1") || !strings.Contains(log.String(), `"level":"WARN","msg":"development mode (--dev)`) {
		t.Fatalf("--dev: %v\n%s", err, log.String())
	}
}
