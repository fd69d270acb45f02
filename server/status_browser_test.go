package server

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/internal/testenv"
)

// chromiumPath finds a Chromium: $TICKETD_CHROMIUM, else chromium or chromium-browser on the PATH.
// Without one the test fails where the suite must be complete (CI), and is skipped elsewhere.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TICKETD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on the PATH; scripts/test.sh installs it (apt-get install chromium), or set TICKETD_CHROMIUM"
	if testenv.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// headless runs Chromium once, headless, in a fresh profile, with nothing that reaches past loopback.
func headless(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-default-apps", "--disable-extensions", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, tail(stderr.String(), 2000))
	}
	return stdout.Bytes()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// artifactDir is where a test leaves files for people to look at: $TICKETD_ARTIFACTS (scripts/test.sh
// sets ./test-artifacts), else the test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TICKETD_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStatusPageInChromium serves the status page on a real listener (authentication off, as for local
// development), creates namespaces and leases over HTTP, fences a server, and loads the page in a
// headless Chromium: the DOM it built must show the namespaces, servers and counters, and its screenshot
// is kept as an artifact.
func TestStatusPageInChromium(t *testing.T) {
	bin := chromiumPath(t)
	// A clock that stands still, so that a slow machine cannot push the leases out of the last minute.
	clk := allocatortest.NewClockAt(time.Now())
	f := allocatortest.NewFake(allocatortest.Config{Now: clk.Now}) // without the namespaces of newTestServer: the page shows those this test makes
	m := NewMetrics()
	m.now = clk.Now
	s := newTestServer(t, func(c *Config) { c.Auth, c.Backend, c.Metrics, c.now = Auth{Disabled: true}, f, m, clk.Now })
	s.fake = f
	f.SetObserver(m)
	base := "http://" + listen(t, s.Server)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections) // before the server shuts down: cleanups run last first
	call := func(method, path, body string, want int) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d", method, path, resp.StatusCode, want)
		}
	}
	call("PUT", "/v1/namespaces/shop.orders", `{"block_size":100,"lease_ttl":"10m"}`, 201)
	call("PUT", "/v1/namespaces/shop.invoices", `{"start":"1000000"}`, 201)
	for i := 0; i < 40; i++ {
		call("POST", "/v1/namespaces/shop.orders/blocks", `{"size":250}`, 200)
		if i%4 == 0 {
			call("GET", "/v1/namespaces/shop.invoices/ids?count=7", "", 200)
		}
	}
	waitIdle(t, s.Server)
	s.fake.Fence("b", "counter of shop.orders below the water mark server a recorded; check, then run ticketd repair shop.orders --server b")
	counters := s.fake.Counters()

	dom := string(headless(t, bin, "--dump-dom", base+"/"))
	for _, want := range []string{
		"<title>ticketd status</title>",
		`data-namespace="shop.orders"`, `data-namespace="shop.invoices"`,
		`data-server="a" data-healthy="true" data-fenced="false"`,
		`data-server="b" data-healthy="false" data-fenced="true"`,
		`data-ids-last-minute="10000"`, // 40 blocks of 250 in shop.orders
		`data-ids-last-minute="70"`,    // 10 lists of 7 in shop.invoices
		`data-role="current"`,
		"run ticketd repair shop.orders --server b",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page Chromium loaded lacks %s", want)
		}
	}
	for _, key := range []string{"shop.orders@a", "shop.orders@b", "shop.invoices@a", "shop.invoices@b"} {
		if want := fmt.Sprintf(`data-next="%d"`, counters[key]); !strings.Contains(dom, want) {
			t.Errorf("the page lacks %s's counter: %s", key, want)
		}
	}
	if t.Failed() {
		t.Fatalf("DOM:\n%s", tail(dom, 6000))
	}

	shot := filepath.Join(artifactDir(t), "status-page.png")
	headless(t, bin, "--screenshot="+shot, "--window-size=1280,900", base+"/")
	file, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	img, err := png.Decode(file)
	if err != nil {
		t.Fatal(err)
	}
	checkScreenshot(t, img)
	t.Logf("screenshot: %s", shot)
}

// checkScreenshot checks that the page was rendered with its style: the size asked for, the dark header
// band at the top, and the light page below it.
func checkScreenshot(t *testing.T, img image.Image) {
	t.Helper()
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Fatalf("screenshot %v, want 1280x900", b)
	}
	luma := func(x, y int) uint32 {
		r, g, b, _ := img.At(x, y).RGBA()
		return (299*r + 587*g + 114*b) / 1000 >> 8
	}
	if l := luma(1270, 5); l > 60 {
		t.Errorf("the header band is not dark (luma %d): the style did not apply", l)
	}
	if l := luma(1270, 890); l < 200 {
		t.Errorf("the page below the header is not light (luma %d)", l)
	}
	colours := map[uint32]bool{}
	for y := 0; y < 900; y += 7 {
		for x := 0; x < 1280; x += 7 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[r>>12<<8|g>>12<<4|b>>12] = true
		}
	}
	if len(colours) < 8 {
		t.Errorf("only %d colours in the screenshot: the page looks empty", len(colours))
	}
}
