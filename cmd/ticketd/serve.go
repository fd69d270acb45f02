package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/clientip"
	"github.com/ticketd/ticketd/internal/cliflag"
	"github.com/ticketd/ticketd/server"
)

func init() {
	register(commandInfo{name: "serve",
		summary: "Serve the HTTP API v1 (blocks, IDs, namespaces, /readyz, /metrics, and a status page at /) until SIGTERM or SIGINT, then finish the requests in flight and stop.",
		new:     func() command { return &serveCmd{} }})
}

type serveCmd struct {
	backendFlags
	listen                                                 string
	adminToken, tokenFile, metricsToken                    string
	tokens                                                 tokenListFlag
	noAuth, publicNoAuth, metricsPublic                    bool
	openByDefault                                          bool // no token, embedded store, loopback
	metricsListen                                          string
	trustedProxy                                           string
	trustedProxies                                         []netip.Prefix
	maxConns, maxConnsPerClient                            int
	tlsCert, tlsKey                                        string
	readHeaderTimeout, readTimeout, writeTimeout, idleTime time.Duration
	shutdownTimeout                                        time.Duration
	cache                                                  bool
	cacheTarget, cacheIdle                                 time.Duration
	cacheMin, cacheMax                                     int64
	rateLimit                                              float64
	rateBurst                                              int
	accessLog                                              bool
	logLevel                                               string
}

// tokenListFlag collects NS=TOKEN lists from repeated --token flags, --tokens and their environment
// variables. Set never fails, so that no parse error (which the flag package would print with the
// value) shows a token; auth parses them.
type tokenListFlag struct{ raw *[]string }

func (f tokenListFlag) String() string {
	if f.raw == nil || len(*f.raw) == 0 {
		return ""
	}
	return fmt.Sprintf("(%d given)", len(*f.raw)) // never the tokens themselves
}

func (f tokenListFlag) Set(s string) error {
	*f.raw = append(*f.raw, s)
	return nil
}

func (c *serveCmd) flags(fs *flag.FlagSet) {
	c.register(fs, useStore|useCreate)
	c.tokens.raw = new([]string)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "`ADDRESS` to listen on")
	fs.StringVar(&c.adminToken, "admin-token", "", "admin bearer `TOKEN`: every route (prefer the environment variable to the command line)")
	fs.Var(c.tokens, "token", "namespace bearer token as `NS=TOKEN`: that namespace's lease and read routes; repeatable")
	fs.Var(c.tokens, "tokens", "namespace tokens as `NS=TOKEN,NS2=TOKEN2`; combined with --token and --token-file")
	fs.StringVar(&c.tokenFile, "token-file", "", "`FILE` of namespace tokens, one NS=TOKEN a line (# starts a comment)")
	fs.BoolVar(&c.noAuth, "no-auth", false, "turn authentication off: anyone who reaches the address is admin (local development only; loopback addresses only)")
	fs.BoolVar(&c.publicNoAuth, "insecure-public-no-auth", false, "with --no-auth, serve on an address that is not loopback, open to every host that reaches it: anyone may lease IDs and move counters")
	fs.StringVar(&c.metricsToken, "metrics-token", "", "bearer `TOKEN` good for /metrics alone, for a Prometheus scraper (the admin token works too)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "also serve /metrics without a token on this loopback `ADDRESS` of its own, with the API's timeouts and connection limits; empty: none")
	fs.BoolVar(&c.metricsPublic, "metrics-listen-public", false, "let --metrics-listen be an address that is not loopback: everyone who reaches it reads every namespace's metrics without a token (keep it on a network only the scraper reaches)")
	fs.StringVar(&c.trustedProxy, "trusted-proxy", "", "`CIDRS` of the proxies in front of ticketd (comma-separated, like 10.0.0.0/8,fd00::/8): X-Forwarded-For is believed from them alone, for rate limits, failed logins and logs; empty: never")
	fs.IntVar(&c.maxConns, "max-connections", 4096, "connections open at once; past it new ones wait to be accepted, and near it the connection idle the longest is closed for each new one")
	fs.IntVar(&c.maxConnsPerClient, "max-connections-per-client", 256, "connections one client address (an IPv6 /64) may hold at once; past it its oldest idle one is closed for a new one, or the new one is refused; 0 means only --max-connections bounds them (behind a proxy, every client has its address)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "`FILE` of the TLS certificate (PEM); with --tls-key, serve HTTPS")
	fs.StringVar(&c.tlsKey, "tls-key", "", "`FILE` of the TLS private key (PEM)")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", 5*time.Second, "how long a client may take to send the request headers")
	fs.DurationVar(&c.readTimeout, "read-timeout", 10*time.Second, "how long a client may take to send a whole request")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 15*time.Second, "how long a request may take from its headers to the end of the answer; more than --lease-timeout")
	fs.DurationVar(&c.idleTime, "idle-timeout", 120*time.Second, "how long a kept-alive connection may sit idle")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long a graceful shutdown waits for requests in flight")
	fs.BoolVar(&c.cache, "cache", true, "serve blocks from segments leased ahead (set --cache=false to lease every block from the ticket servers)")
	fs.DurationVar(&c.cacheTarget, "cache-target", 10*time.Second, "how long a cached segment should last; its size adapts to the rate")
	fs.DurationVar(&c.cacheIdle, "cache-idle", 10*time.Minute, "how long a namespace's cache is kept after its last request; then its segments are dropped (a gap) and its memory freed")
	fs.Var(cliflag.Int64(&c.cacheMin, 1, allocator.MaxBlockSizeLimit), "cache-min", "smallest cached segment, in `IDS` (default 10000)")
	fs.Var(cliflag.Int64(&c.cacheMax, 1, allocator.MaxBlockSizeLimit), "cache-max", "largest cached segment, in `IDS`, also bounded by the namespace's max_block_size (default 16777216)")
	fs.Float64Var(&c.rateLimit, "rate-limit", 0, "requests per second per token (per client address with --no-auth) on the routes that take a token, /v1 and the status page /; 0 means no limit")
	fs.IntVar(&c.rateBurst, "rate-burst", 0, "requests a token may send at once above --rate-limit (0: the rate, at least 1)")
	fs.BoolVar(&c.accessLog, "access-log", false, "log every request (otherwise only failed ones)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
}

func (c *serveCmd) auth() (server.Auth, error) {
	a := server.Auth{Admin: strings.TrimSpace(c.adminToken), Metrics: strings.TrimSpace(c.metricsToken), Disabled: c.noAuth}
	for i, list := range *c.tokens.raw {
		ts, err := server.ParseTokens(list)
		if err != nil {
			return a, usagef("namespace tokens (--token, --tokens, $TICKETD_TOKEN or $TICKETD_TOKENS), value %d: %v", i+1, err)
		}
		a.Tokens = append(a.Tokens, ts...)
	}
	if c.tokenFile != "" {
		f, err := os.Open(c.tokenFile)
		if err != nil {
			return a, usagef("--token-file: %v", err)
		}
		defer f.Close()
		if err := privateFile(f); err != nil {
			return a, usagef("--token-file %s: %v", c.tokenFile, err)
		}
		ts, err := server.ParseTokenFile(f)
		if err != nil {
			return a, usagef("--token-file %s: %v", c.tokenFile, err)
		}
		a.Tokens = append(a.Tokens, ts...)
	}
	if c.noAuth && !clientip.LoopbackListen(c.listen) && !c.publicNoAuth {
		return a, usagef("--no-auth on %s, which is not a loopback address: anyone who reaches it could lease IDs and move counters; configure a token, listen on 127.0.0.1, or, knowingly, add --insecure-public-no-auth", c.listen)
	}
	if c.publicNoAuth && !c.noAuth {
		return a, usagef("--insecure-public-no-auth goes with --no-auth only")
	}
	a.AnyHost = c.publicNoAuth
	if !c.noAuth && a.Admin == "" && len(a.Tokens) == 0 && c.kind() == "embedded" && clientip.LoopbackListen(c.listen) {
		// Local development out of the box: `ticketd serve` with no database and no token answers on
		// loopback only, and says so in its log. With a ticket server, or on any other address, a token
		// (or an explicit --no-auth) is required.
		c.noAuth, c.openByDefault = true, true
		a.Disabled = true
	}
	if err := a.Validate(); err != nil {
		if !c.noAuth && a.Admin == "" && len(a.Tokens) == 0 {
			return a, usagef("no token configured: give --admin-token (or $TICKETD_ADMIN_TOKEN), --token NS=TOKEN or --token-file; or --no-auth to run open on loopback for local development")
		}
		return a, usageError{err.Error()}
	}
	return a, nil
}

func (c *serveCmd) validate() error {
	if err := checkListen(c.listen); err != nil {
		return err
	}
	if err := c.backendFlags.validate(); err != nil {
		return err
	}
	if c.writeTimeout <= c.timeout {
		return usagef("--write-timeout %s must be longer than --lease-timeout %s, or slow leases would be cut off", c.writeTimeout, c.timeout)
	}
	for name, d := range map[string]time.Duration{"read-header-timeout": c.readHeaderTimeout, "read-timeout": c.readTimeout,
		"idle-timeout": c.idleTime, "shutdown-timeout": c.shutdownTimeout, "cache-target": c.cacheTarget, "cache-idle": c.cacheIdle} {
		if d <= 0 {
			return usagef("--%s %s must be positive", name, d)
		}
	}
	if c.cacheMin > 0 && c.cacheMax > 0 && c.cacheMin > c.cacheMax {
		return usagef("--cache-min %d is above --cache-max %d", c.cacheMin, c.cacheMax)
	}
	if c.rateLimit < 0 || c.rateBurst < 0 {
		return usagef("--rate-limit and --rate-burst must not be negative")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return usagef("give both --tls-cert and --tls-key, or neither")
	}
	if c.maxConns < 1 {
		return usagef("--max-connections %d must be at least 1", c.maxConns)
	}
	if c.maxConnsPerClient < 0 {
		return usagef("--max-connections-per-client %d must not be negative (0: no bound of its own)", c.maxConnsPerClient)
	}
	ps, err := clientip.ParsePrefixes(c.trustedProxy)
	if err != nil {
		return usagef("--trusted-proxy: %v; give the proxies' addresses or networks, comma-separated", err)
	}
	c.trustedProxies = ps
	if c.metricsListen != "" {
		if _, _, err := net.SplitHostPort(c.metricsListen); err != nil {
			return usagef("--metrics-listen %q is not an address to listen on: want HOST:PORT, like 127.0.0.1:9090", c.metricsListen)
		}
		if !clientip.LoopbackListen(c.metricsListen) && !c.metricsPublic {
			return usagef("--metrics-listen %s is not a loopback address: anyone who reaches it would read every namespace's metrics without a token; "+
				"listen on 127.0.0.1, let Prometheus send --metrics-token to the API address, or, for a network only the scraper reaches, add --metrics-listen-public", c.metricsListen)
		}
	} else if c.metricsPublic {
		return usagef("--metrics-listen-public goes with --metrics-listen only")
	}
	return nil
}

// privateFile refuses a file of secrets that another user of the machine may read or change: one
// whose mode gives the group or others any permission, or whose owner is neither the user ticketd runs
// as nor root (its owner could change it).
func privateFile(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("its mode %04o lets other users of this machine read or change it; make it private: chmod 600 %s", perm, f.Name())
	}
	if owner, ok := fileOwner(st); ok {
		if uid := os.Geteuid(); owner != uid && owner != 0 {
			return fmt.Errorf("it belongs to user %d, who could change it, not to the user ticketd runs as (%d): chown %d %s", owner, uid, uid, f.Name())
		}
	}
	return nil
}

// checkSecretFile opens the secret file of a flag and refuses it unless it is private (privateFile).
func checkSecretFile(flagName, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return usagef("%s: %v", flagName, err)
	}
	defer f.Close()
	if err := privateFile(f); err != nil {
		return usagef("%s %s: %v", flagName, path, err)
	}
	return nil
}

// checkListen refuses a --listen that is not HOST:PORT, before anything else is checked: a mistyped
// address would otherwise be reported as whatever check came first.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return usagef("--listen %q is not an address to listen on: want HOST:PORT, like 127.0.0.1:8080 (this machine only) or 0.0.0.0:8080 (every interface)", addr)
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, usagef("--log-level %q must be debug, info, warn or error", s)
	}
	return l, nil
}

func (c *serveCmd) run(ctx context.Context, m *Main, args []string) error {
	c.writes = true
	if len(args) != 0 {
		return usagef("serve takes no arguments, only flags")
	}
	if err := c.validate(); err != nil {
		return err
	}
	level, err := parseLevel(c.logLevel)
	if err != nil {
		return err
	}
	auth, err := c.auth()
	if err != nil {
		return err
	}
	if c.tlsKey != "" {
		if err := checkSecretFile("--tls-key", c.tlsKey); err != nil {
			return err
		}
	}
	logger := slog.New(slog.NewJSONHandler(m.Stderr, &slog.HandlerOptions{Level: level}))
	metrics := server.NewMetrics()
	backend, err := c.open(ctx, m, logger, metrics)
	if err != nil {
		return err
	}
	if err := registerPools(metrics.Registry(), backend); err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		Backend: backend, Auth: auth, CreateOnLease: c.createOnLease(), Logger: logger, Metrics: metrics,
		AccessLog: c.accessLog, RateLimit: c.rateLimit, RateBurst: c.rateBurst, MaxConns: c.maxConns,
		TrustedProxies:    c.trustedProxies,
		Cache:             server.CacheConfig{Disabled: !c.cache, Target: c.cacheTarget, MinSegment: c.cacheMin, MaxSegment: c.cacheMax, IdleAfter: c.cacheIdle},
		ReadHeaderTimeout: c.readHeaderTimeout, ReadTimeout: c.readTimeout, WriteTimeout: c.writeTimeout,
		IdleTimeout: c.idleTime, ShutdownTimeout: c.shutdownTimeout, TLSCertFile: c.tlsCert, TLSKeyFile: c.tlsKey,
	})
	if err != nil {
		return err
	}
	m.onClose(srv.Close) // before the backend closes: closers run last first
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	addr := ln.Addr().String()
	if c.noAuth {
		msg := "authentication is off (--no-auth): anyone who can reach this address may lease IDs and change namespaces; for local development only"
		if c.openByDefault {
			msg = "authentication is off: no token is configured, and with the embedded store on a loopback address ticketd serves open for local development; give --admin-token or --token NS=TOKEN to require tokens"
		}
		if c.publicNoAuth {
			msg = "authentication is off on an address that is NOT loopback (--no-auth --insecure-public-no-auth): anyone who can reach it may lease IDs and move counters"
		}
		logger.Warn(msg, "addr", addr)
	}
	if c.metricsListen != "" {
		mln, err := net.Listen("tcp", c.metricsListen)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("listen on %s (--metrics-listen): %w", c.metricsListen, err)
		}
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := srv.ServeMetrics(mctx, mln); err != nil && mctx.Err() == nil {
				logger.Error("the metrics listener stopped", "addr", mln.Addr().String(), "err", err)
			}
		}()
		m.onClose(func() error { stop(); <-done; return nil })
		logger.Info("serving /metrics without a token", "addr", mln.Addr().String(), "public", c.metricsPublic)
	}
	var servers []string
	if h, ok := backend.(allocator.HealthReporter); ok {
		for _, sh := range h.Health() {
			servers = append(servers, sh.Name)
		}
	}
	scheme := "http"
	if c.tlsCert != "" {
		scheme = "https"
	}
	logger.Info("listening", "addr", addr, "url", scheme+"://"+addr, "ticket_servers", servers, "cache", c.cache,
		"auth", !c.noAuth, "namespace_tokens", len(auth.Tokens), "admin_token", auth.Admin != "",
		"create_namespaces_on_lease", c.createOnLease(), "rate_limit", c.rateLimit)
	return srv.Serve(ctx, ln)
}
