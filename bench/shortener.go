package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// shortenerCases measure the URL shortener the way its users meet it: links created (each takes an
// ID from the SDK, which leases blocks from ticketd over HTTP) and redirects served, with Redis behind.
// After the create case, a note says how many blocks the shortener fetched per 1,000 links.
func shortenerCases(env *mysqlEnv, redisAddr string) []loadCase {
	open := func(ctx context.Context) (*shortenerRig, error) { return newShortenerRig(ctx, env, redisAddr) }
	var note string
	create := loadCase{name: "shortener: create link (SDK over HTTP, Redis)", note: func() string { return note }}
	create.open = func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
		rig, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		op := func(ctx context.Context) (int64, error) {
			_, err := rig.create(ctx)
			return 1, err
		}
		return op, func() {
			st, err := rig.close()
			if err != nil {
				note = "shortener: " + err.Error()
				return
			}
			note = fmt.Sprintf("shortener: %s links created, %s blocks fetched from ticketd: %.2f blocks per 1,000 links",
				count(st.Created), count(st.Refills), st.BlocksPer1000Links)
		}, nil
	}
	redirect := loadCase{name: "shortener: redirect (Redis)"}
	redirect.open = func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
		rig, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		// Links of its own, so that the case stands alone.
		var codes []string
		for range 1000 {
			code, err := rig.create(ctx)
			if err != nil {
				_, _ = rig.close()
				return nil, nil, err
			}
			codes = append(codes, code)
		}
		var next atomic.Uint64
		op := func(ctx context.Context) (int64, error) {
			return 1, rig.redirect(ctx, codes[next.Add(1)%uint64(len(codes))])
		}
		return op, func() { _, _ = rig.close() }, nil
	}
	return []loadCase{create, redirect}
}

// shortenerPackage is the example service the shortener cases run, built as its users build it.
const shortenerPackage = "github.com/ticketd/ticketd/examples/shortener"

// shortenerRig is ticketd (in-process, on a fresh pair) and the shortener as a process of its own, as
// it is deployed: built from examples/shortener, its secrets in its environment, on a loopback port
// with its own Redis key prefix. Nothing of the example is linked into the bench.
type shortenerRig struct {
	cmd         *exec.Cmd
	log         *shortenerLog
	dir         string // holds the built binary
	rdb         *goredis.Client
	prefix      string
	base        string
	hc          *http.Client
	stopTicketd func()
}

// shortenerStats are the counters the shortener logs when it stops.
type shortenerStats struct {
	Created            int64   `json:"links_created"`
	Refills            int64   `json:"blocks_leased"`
	BlocksPer1000Links float64 `json:"blocks_per_1000_links"`
}

func newShortenerRig(ctx context.Context, env *mysqlEnv, redisAddr string) (rig *shortenerRig, err error) {
	b, ticketdURL, stopTicketd, err := httpServer(ctx, env, true)
	if err != nil {
		return nil, err
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	rig = &shortenerRig{stopTicketd: stopTicketd, prefix: fmt.Sprintf("ticketd-bench-shortener-%x:", r),
		rdb: goredis.NewClient(&goredis.Options{Addr: redisAddr}),
		hc:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight}, CheckRedirect: noRedirect}}
	defer func() {
		if err != nil {
			_, _ = rig.close()
		}
	}()
	ns, err := env.namespace(ctx, b, "links", 1000)
	if err != nil {
		return nil, err
	}
	if rig.dir, err = os.MkdirTemp("", "ticketd-bench-shortener-"); err != nil {
		return nil, err
	}
	bin := filepath.Join(rig.dir, "shortener")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, shortenerPackage).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s (ticketd-bench runs in a clone of ticketd, with go on the PATH): %v: %s",
			shortenerPackage, err, bytes.TrimSpace(out))
	}
	rig.cmd = exec.Command(bin, "--listen", "127.0.0.1:0", "--ticketd", ticketdURL, "--namespace", ns, "--redis", redisAddr,
		"--key-prefix", rig.prefix, "--base-url", "http://sho.rt", "--create-rate", "0", "--create-quota", "0", "--miss-rate", "0",
		"--log-level", "info")
	// ticketd runs without authentication here, but the shortener refuses to start without a token.
	rig.cmd.Env = append(environWithout("SHORTENER_"), "SHORTENER_TOKEN="+scrambleKey(), "SHORTENER_SCRAMBLE_KEY="+scrambleKey())
	stderr, err := rig.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := rig.cmd.Start(); err != nil {
		return nil, err
	}
	rig.log = readShortenerLog(stderr)
	select {
	case addr := <-rig.log.listening:
		rig.base = "http://" + addr
		return rig, nil
	case <-rig.log.done:
		return nil, fmt.Errorf("the shortener stopped before it listened: %s", rig.log.last())
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("the shortener did not listen within 30s: %s", rig.log.last())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// environWithout is this process's environment less the variables that start with prefix.
func environWithout(prefix string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// shortenerLog reads the shortener's JSON log: the address it listens on, and its counters when it
// stops. It reads to the end, so that the shortener never waits on a full pipe.
type shortenerLog struct {
	listening chan string
	done      chan struct{} // closed at the end of the log
	mu        sync.Mutex
	stopped   *shortenerStats
	tail      string // the last line, for an error
}

func readShortenerLog(r io.Reader) *shortenerLog {
	l := &shortenerLog{listening: make(chan string, 1), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			_ = json.Unmarshal(sc.Bytes(), &line)
			l.mu.Lock()
			l.tail = sc.Text()
			switch line.Msg {
			case "listening":
				select {
				case l.listening <- line.Addr:
				default:
				}
			case "stopped":
				var st shortenerStats
				if json.Unmarshal(sc.Bytes(), &st) == nil {
					l.stopped = &st
				}
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *shortenerLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (r *shortenerRig) create(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/api/links", bytes.NewReader([]byte(`{"url":"https://example.com/some/page"}`)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", &httpError{status: resp.StatusCode}
	}
	var link struct{ Code string }
	if err := json.Unmarshal(body, &link); err != nil || link.Code == "" {
		return "", fmt.Errorf("shortener answered %q", body)
	}
	return link.Code, nil
}

func (r *shortenerRig) redirect(ctx context.Context, code string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/"+code, nil)
	if err != nil {
		return err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently {
		return &httpError{status: resp.StatusCode}
	}
	return nil
}

// close stops the shortener (SIGINT, as an operator would) and ticketd, deletes the rig's keys, and
// returns the counters the shortener logged as it stopped.
func (r *shortenerRig) close() (shortenerStats, error) {
	var st shortenerStats
	err := fmt.Errorf("the shortener did not start")
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(os.Interrupt)
		<-r.log.done
		werr := r.cmd.Wait()
		r.log.mu.Lock()
		switch {
		case r.log.stopped != nil:
			st, err = *r.log.stopped, nil
		default:
			err = fmt.Errorf("the shortener logged no counters as it stopped (%v): %s", werr, r.log.tail)
		}
		r.log.mu.Unlock()
	}
	r.stopTicketd()
	ctx := context.Background()
	iter := r.rdb.Scan(ctx, 0, r.prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			r.rdb.Del(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		r.rdb.Del(ctx, keys...)
	}
	_ = r.rdb.Close()
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
	return st, err
}

// scrambleKey is a random scramble key for one run.
func scrambleKey() string {
	var k [32]byte
	_, _ = rand.Read(k[:])
	return fmt.Sprintf("%x", k)
}
