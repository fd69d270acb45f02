package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/examples/shortener/shortener"
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
			st := rig.svc.Stats()
			note = fmt.Sprintf("shortener: %s links created, %s blocks fetched from ticketd: %.2f blocks per 1,000 links",
				count(st.Created), count(st.IDs.Refills), st.BlocksPer1000Links())
			rig.close()
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
				rig.close()
				return nil, nil, err
			}
			codes = append(codes, code)
		}
		var next atomic.Uint64
		op := func(ctx context.Context) (int64, error) {
			return 1, rig.redirect(ctx, codes[next.Add(1)%uint64(len(codes))])
		}
		return op, rig.close, nil
	}
	return []loadCase{create, redirect}
}

// shortenerRig is ticketd (in-process, on a fresh pair), an SDK client, and the shortener on a loopback
// port with its own Redis key prefix.
type shortenerRig struct {
	svc    *shortener.Service
	ids    *client.Client
	rdb    *goredis.Client
	prefix string
	base   string
	hc     *http.Client
	stop   func()
}

func newShortenerRig(ctx context.Context, env *mysqlEnv, redisAddr string) (*shortenerRig, error) {
	b, ticketdURL, stopTicketd, err := httpServer(ctx, env, true)
	if err != nil {
		return nil, err
	}
	ns, err := env.namespace(ctx, b, "links", 1000)
	if err != nil {
		stopTicketd()
		return nil, err
	}
	ids, err := client.New(client.HTTP(ticketdURL), ns)
	if err != nil {
		stopTicketd()
		return nil, err
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	rig := &shortenerRig{ids: ids, rdb: goredis.NewClient(&goredis.Options{Addr: redisAddr, PoolSize: maxInFlight}),
		prefix: fmt.Sprintf("ticketd-bench-shortener-%x:", r),
		hc:     &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight}, CheckRedirect: noRedirect}}
	rig.svc, err = shortener.New(shortener.Config{IDs: ids, Redis: rig.rdb, KeyPrefix: rig.prefix, BaseURL: "http://sho.rt",
		ScrambleKey: scrambleKey()})
	if err != nil {
		_ = ids.Close()
		stopTicketd()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = ids.Close()
		stopTicketd()
		return nil, err
	}
	hs := &http.Server{Handler: rig.svc.Handler()}
	go func() { _ = hs.Serve(ln) }()
	rig.base = "http://" + ln.Addr().String()
	rig.stop = func() {
		_ = hs.Close()
		_ = ids.Close()
		stopTicketd()
	}
	return rig, nil
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

// close stops everything and deletes the rig's keys.
func (r *shortenerRig) close() {
	r.stop()
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
}

// scrambleKey is a random scramble key for one run.
func scrambleKey() string {
	var k [16]byte
	_, _ = rand.Read(k[:])
	return fmt.Sprintf("%x", k)
}
