package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/internal/testenv"
)

// embeddedTicketd runs `ticketd serve` on an embedded store with the admin token and namespace links,
// and returns its base URL.
func embeddedTicketd(t *testing.T) string {
	t.Helper()
	srv := testenv.StartServe(t, []string{"TICKETD_ADMIN_TOKEN=" + adminToken, "TICKETD_TOKENS=links=" + linksToken}, "--data-dir", t.TempDir())
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/namespaces/links", strings.NewReader(`{"block_size":100}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create namespace links: %d", resp.StatusCode)
	}
	return srv.URL
}

// startCommand runs the shortener command with args (after --listen 127.0.0.1:0, the token, the key
// and a key prefix of the test's own) until the test ends, and returns its base URL and its log.
func startCommand(t *testing.T, ticketd string, args ...string) (string, *testenv.Log) {
	t.Helper()
	env := map[string]string{"SHORTENER_TOKEN": linksToken, "SHORTENER_SCRAMBLE_KEY": e2eScrambleKey,
		"SHORTENER_KEY_PREFIX": testenv.RedisPrefix(t, "shortener-sec-")}
	all := append([]string{"--listen=127.0.0.1:0", "--ticketd=" + ticketd, "--redis=" + testenv.RedisAddr(t), "--base-url=http://sho.rt.test"}, args...)
	log := testenv.NewLog()
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() { done <- run(ctx, all, func(k string) string { return env[k] }, log); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	select {
	case <-log.Listening():
		return "http://" + log.Addr(), log
	case err := <-done:
		t.Fatalf("the command stopped at start: %v\n%s", err, log)
	case <-time.After(30 * time.Second):
		t.Fatalf("the command did not listen within 30s:\n%s", log)
	}
	return "", nil
}

// send makes a request from the local address from (127.0.0.x), with the headers given.
func send(t *testing.T, from, method, url, body string, h map[string]string) (*http.Response, string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func postLink(t *testing.T, from, base, auth string) (*http.Response, string) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if auth != "" {
		h["Authorization"] = auth
	}
	return send(t, from, "POST", base+"/api/links", `{"url":"https://example.com/x"}`, h)
}

func codeOf(t *testing.T, body string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, `"code":"`)
	code, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("no code in %s", body)
	}
	return code
}

// TestOpenCreationOnlyWhenSaid: on an address that is not loopback the shortener refuses to start
// without a creation token unless --open-creation says creation is open (checked before connecting:
// Redis and ticketd are down here).
func TestOpenCreationOnlyWhenSaid(t *testing.T) {
	base := []string{"--redis", "127.0.0.1:1", "--ticketd", "http://127.0.0.1:1", "--token", linksToken, "--base-url", "https://sho.rt"}
	env := func(k string) string {
		if k == "SHORTENER_SCRAMBLE_KEY" {
			return e2eScrambleKey
		}
		return ""
	}
	for _, listen := range []string{"0.0.0.0:8081", ":8081", "[::]:8081", "192.0.2.1:8081"} {
		err := run(context.Background(), append(append([]string{}, base...), "--listen", listen), env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") || !strings.Contains(err.Error(), "--open-creation") {
			t.Errorf("--listen %s without a creation token: %v", listen, err)
		}
	}
	for _, extra := range [][]string{{"--open-creation"}, {"--create-token", "c81f04a9e27b5d36f0a94e1b72c85d3e"}} {
		err := run(context.Background(), append(append([]string{}, base...), append([]string{"--listen", "0.0.0.0:0"}, extra...)...), env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "redis at 127.0.0.1:1 does not answer") {
			t.Errorf("--listen 0.0.0.0:0 %v: %v, want it to pass the checks and find Redis down", extra, err)
		}
	}
}

// TestCreationQuotaAndExpiry: one client address gets --create-quota links per window, then 429 with
// Retry-After while another address is served; with --link-ttl, links expire and free the cap.
func TestCreationQuotaAndExpiry(t *testing.T) {
	ticketd := embeddedTicketd(t)
	base, _ := startCommand(t, ticketd, "--create-rate=0", "--create-quota=3")
	for i := range 3 {
		if resp, body := postLink(t, "127.0.0.1", base, ""); resp.StatusCode != http.StatusCreated {
			t.Fatalf("link %d within the quota: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := postLink(t, "127.0.0.1", base, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "quota") {
		t.Fatalf("a link past the quota: %d %s (Retry-After %q)", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if resp, body := postLink(t, "127.0.0.2", base, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("another address: %d %s", resp.StatusCode, body)
	}

	base, _ = startCommand(t, ticketd, "--create-rate=0", "--max-links=2", "--link-ttl=1s", "--miss-rate=0")
	var codes []string
	for range 2 {
		resp, body := postLink(t, "127.0.0.1", base, "")
		if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `"expires_at"`) {
			t.Fatalf("a link that expires: %d %s", resp.StatusCode, body)
		}
		codes = append(codes, codeOf(t, body))
	}
	if resp, body := postLink(t, "127.0.0.1", base, ""); resp.StatusCode != http.StatusInsufficientStorage {
		t.Fatalf("past the cap of 2: %d %s", resp.StatusCode, body)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, _ := send(t, "127.0.0.1", "GET", base+"/"+codes[0], "", nil); resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a link of --link-ttl 1s still redirects after 20s")
		}
	}
	if resp, body := postLink(t, "127.0.0.1", base, ""); resp.StatusCode != http.StatusCreated {
		t.Fatalf("once the links expired, the cap of 2 still refuses: %d %s", resp.StatusCode, body)
	}
}

// TestCreationTokenGuessesAreLimited: wrong creation tokens from one address are 401, then 429, and
// logged without the token; the right token is served all along, its scheme in any case.
func TestCreationTokenGuessesAreLimited(t *testing.T) {
	const createTok = "c81f04a9e27b5d36f0a94e1b72c85d3e"
	ticketd := embeddedTicketd(t)
	base, log := startCommand(t, ticketd, "--create-rate=0", "--create-token="+createTok)
	limited := false
	for i := range 20 {
		resp, _ := postLink(t, "127.0.0.1", base, "Bearer guess-0123456789-abcdef")
		switch resp.StatusCode {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			limited = true
		default:
			t.Fatalf("wrong token %d: %d", i+1, resp.StatusCode)
		}
	}
	if !limited {
		t.Fatal("20 wrong creation tokens from one address were never answered 429")
	}
	for _, auth := range []string{"Bearer " + createTok, "bearer " + createTok, "BEARER " + createTok} {
		if resp, body := postLink(t, "127.0.0.1", base, auth); resp.StatusCode != http.StatusCreated {
			t.Fatalf("%q from the guesser's address: %d %s", auth[:7], resp.StatusCode, body)
		}
	}
	if !strings.Contains(log.String(), `"msg":"wrong creation token"`) || strings.Contains(log.String(), "guess-0123456789") {
		t.Fatalf("wrong tokens are not logged, or the log shows one:\n%s", log)
	}
}

// TestShortenerShowsNoInternals: the API shows no sequential ID; answers are nosniff and no-store;
// a 503 and /healthz name no host or resolver of ticketd.
func TestShortenerShowsNoInternals(t *testing.T) {
	ticketd := embeddedTicketd(t)
	base, _ := startCommand(t, ticketd, "--create-rate=0")
	resp, body := postLink(t, "127.0.0.1", base, "")
	if resp.StatusCode != http.StatusCreated || strings.Contains(body, `"id"`) {
		t.Fatalf("POST /api/links: %d %s, want 201 without an id", resp.StatusCode, body)
	}
	code := codeOf(t, body)
	for _, path := range []string{"/api/links/" + code, "/healthz", "/api/links/zzzzzzzzzzz", "/api"} {
		resp, body := send(t, "127.0.0.1", "GET", base+path, "", nil)
		if strings.Contains(body, `"id"`) || resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET %s: %d %s, headers %v", path, resp.StatusCode, body, resp.Header)
		}
	}

	const hidden = "ticketd-internal.invalid"
	base, log := startCommand(t, "http://"+hidden+":8080", "--create-rate=0")
	resp, body = postLink(t, "127.0.0.1", base, "")
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(body, hidden) || strings.Contains(body, "lookup") || strings.Contains(body, ":53") {
		t.Fatalf("POST /api/links with ticketd unreachable: %d %s, want 503 naming no host", resp.StatusCode, body)
	}
	if _, body := send(t, "127.0.0.1", "GET", base+"/healthz", "", nil); strings.Contains(body, hidden) || strings.Contains(body, "lookup") || !strings.Contains(body, "degraded") {
		t.Fatalf("/healthz with ticketd unreachable: %s", body)
	}
	if !strings.Contains(log.String(), hidden) {
		t.Fatalf("the log does not say which ticketd failed:\n%s", log)
	}
}

// TestMissesAreLimited: past --miss-burst lookups of unknown codes, every lookup from that address is
// 429, a code that exists included; another address is served.
func TestMissesAreLimited(t *testing.T) {
	ticketd := embeddedTicketd(t)
	base, log := startCommand(t, ticketd, "--create-rate=0", "--miss-rate=0.001", "--miss-burst=5")
	_, body := postLink(t, "127.0.0.2", base, "")
	code := codeOf(t, body)
	for i := range 5 {
		if resp, _ := send(t, "127.0.0.1", "GET", base+"/zzzz"+strings.Repeat("a", i), "", nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("miss %d within the burst: %d", i+1, resp.StatusCode)
		}
	}
	for _, path := range []string{"/zzzzzzz", "/" + code, "/api/links/" + code} {
		if resp, _ := send(t, "127.0.0.1", "GET", base+path, "", nil); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("GET %s past the misses: %d, want 429 with Retry-After", path, resp.StatusCode)
		}
	}
	if resp, _ := send(t, "127.0.0.2", "GET", base+"/"+code, "", nil); resp.StatusCode != http.StatusMovedPermanently {
		t.Fatalf("another address: %d", resp.StatusCode)
	}
	if !strings.Contains(log.String(), "lookups of unknown codes") {
		t.Fatalf("misses are not logged:\n%s", log)
	}
}
