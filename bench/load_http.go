package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/server"
)

// httpLeaseCases post leases to the ticketd service over HTTP, its segment cache on and then off, at
// each of leaseSizes.
func httpLeaseCases(env *mysqlEnv) []loadCase {
	var cases []loadCase
	for _, cacheOn := range []bool{true, false} {
		state := "off"
		if cacheOn {
			state = "on"
		}
		for _, size := range leaseSizes {
			cases = append(cases, httpLeaseCase(fmt.Sprintf("HTTP lease n=%s, server cache %s", count(size), state), size, cacheOn, env))
		}
	}
	return cases
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
