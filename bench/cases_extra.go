package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/server"
)

// extraLoadCases are the cases over HTTP (the ticketd service started in-process on a loopback port,
// its segment cache on and off) and on the Redis backend.
func extraLoadCases(ctx context.Context, opts Options, env *mysqlEnv, m *Machine) ([]loadCase, []string, error) {
	var cases []loadCase
	var skipped []string
	for _, cacheOn := range []bool{true, false} {
		state := "off"
		if cacheOn {
			state = "on"
		}
		for _, size := range leaseSizes {
			cases = append(cases, httpLeaseCase(fmt.Sprintf("HTTP lease n=%s, server cache %s", count(size), state), size, cacheOn, env))
		}
	}
	more, why := sdkLoadCases(env)
	cases, skipped = append(cases, more...), append(skipped, why...)
	if opts.Redis == "" {
		skipped = append(skipped, "MySQL vs Redis: no --redis address given", "the URL shortener (it keeps links in Redis): no --redis address given")
		return cases, skipped, nil
	}
	if err := loopbackOnly("Redis", opts.Redis); err != nil {
		return nil, nil, err
	}
	cases = append(cases, shortenerCases(env, opts.Redis)...)
	m.Redis = redisVersion(ctx, opts.Redis)
	cases = append(cases, leaseCase("Redis lease n=100 (one instance)", 100, env, func(ctx context.Context) (allocator.Backend, func(), error) {
		var r [3]byte
		_, _ = rand.Read(r[:])
		st, err := redis.Open(ctx, redis.Config{Addrs: []string{opts.Redis}, KeyPrefix: fmt.Sprintf("ticketd-bench-%x:", r), Logger: env.quiet, MaxConns: 128,
			Timeout: opTimeout, AttemptTimeout: opTimeout / 2})
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	}))
	return cases, skipped, nil
}

func redisVersion(ctx context.Context, addr string) string {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

// httpServer runs the ticketd HTTP service on a loopback port in this process, on a fresh pair of
// its own; stop closes both.
func httpServer(ctx context.Context, env *mysqlEnv, cacheOn bool) (allocator.Backend, string, func(), error) {
	b, closeB, err := freshPair(env, env.dsns)(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	srv, err := server.New(server.Config{Backend: b, Auth: server.Auth{Disabled: true},
		Cache: server.CacheConfig{Disabled: !cacheOn}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		closeB()
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Close()
		closeB()
		return nil, "", nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	return b, "http://" + ln.Addr().String(), func() { cancel(); <-done; _ = srv.Close(); closeB() }, nil
}

func loopbackHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: maxInFlight, MaxIdleConnsPerHost: maxInFlight, IdleConnTimeout: time.Minute}}
}

// httpLeaseCase posts one lease per request to the service.
func httpLeaseCase(name string, size int64, cacheOn bool, env *mysqlEnv) loadCase {
	return loadCase{name: name, open: func(ctx context.Context) (func(context.Context) (int64, error), func(), error) {
		b, base, stop, err := httpServer(ctx, env, cacheOn)
		if err != nil {
			return nil, nil, err
		}
		ns, err := env.namespace(ctx, b, "http", size)
		if err != nil {
			stop()
			return nil, nil, err
		}
		hc := loopbackHTTPClient()
		url := base + "/v1/namespaces/" + ns + "/blocks"
		body := []byte(fmt.Sprintf(`{"size":%d}`, size))
		return func(ctx context.Context) (int64, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return 0, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return 0, err
			}
			if resp.StatusCode != http.StatusOK {
				var e api.Error
				_ = json.Unmarshal(b, &e)
				return 0, &httpError{status: resp.StatusCode, code: e.Error.Code}
			}
			var blk api.Block
			if err := json.Unmarshal(b, &blk); err != nil {
				return 0, err
			}
			return blk.Size, nil
		}, func() { hc.CloseIdleConnections(); stop() }, nil
	}}
}

// httpError is a non-200 answer of the service.
type httpError struct {
	status int
	code   string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d %s", e.status, e.code) }

func (e *httpError) kind() string { return fmt.Sprintf("HTTP %d %s", e.status, e.code) }
