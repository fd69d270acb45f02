// Package server is ticketd's HTTP API v1 on echo: the routes, bearer-token auth, the one table that
// maps allocator errors to HTTP statuses, Prometheus metrics, a status page, and a server-side segment
// cache that serves blocks from memory. It depends on the allocator's types only, never on a particular backend.
package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	_ "embed" // the OpenAPI document
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/clientip"
	"github.com/ticketd/ticketd/internal/connlimit"
	"github.com/ticketd/ticketd/internal/ratelimit"
	"github.com/ticketd/ticketd/internal/version"
)

// Config configures a Server. The zero value of each field means its default; a negative
// number is refused with allocator.ErrInvalidConfig naming the field.
type Config struct {
	// Backend leases the blocks. Required. The server does not close it.
	Backend allocator.Backend
	// Auth says who may call; with neither tokens nor Auth.Disabled, New fails.
	Auth Auth
	// CreateOnLease lets a lease by the admin (or by anyone with Auth.Disabled) create a missing
	// namespace with default settings. For the embedded store and local development.
	CreateOnLease bool
	// Cache tunes the segment cache, on by default.
	Cache CacheConfig
	// RateLimit is the requests per second allowed to each token (each client address without auth)
	// on the routes that take a token, /v1 and the status page; past it the answer is 429 with
	// Retry-After. /healthz, /readyz, /metrics and /openapi.json are never limited. Zero means no limit.
	RateLimit float64
	// RateBurst is how many requests a token may send at once. Default max(1, RateLimit).
	RateBurst int
	// AuthFailureBurst is how many requests with a wrong or malformed token one client address (an
	// IPv6 /64) may send before its wrong tokens are answered 429; AuthFailureRate is how many a second
	// it may send after that. A valid token is never refused for them: the address may be a proxy or a
	// NAT shared with the real client. Defaults 30 and 0.1 (six a minute).
	AuthFailureBurst int
	AuthFailureRate  float64
	// MaxConns bounds the connections open at once; past it, new ones wait to be accepted. Near it
	// (within an eighth), the connection idle the longest is closed for each new one, so that idle
	// keep-alive connections cannot hold every slot. Default 4096.
	MaxConns int
	// MaxConnsPerClient bounds the connections one client address (an IPv6 /64; the peer, not what a
	// proxy says) holds at once: past it, that address's oldest idle connection is closed for a new
	// one, or the new one is closed when none is idle. Default (and at most) MaxConns.
	MaxConnsPerClient int
	// TrustedProxies are the proxies (CIDRs) whose X-Forwarded-For is believed: a request from one of
	// them counts against the client it names for rate limits, failed logins and logs. Empty: the
	// peer's address is the client, whatever the header says.
	TrustedProxies []netip.Prefix
	// Logger receives JSON-friendly structured logs; request lines carry "request_id". Default
	// slog.Default().
	Logger *slog.Logger
	// AccessLog logs every request at Info; otherwise only failed ones (5xx at Error, others at Debug).
	AccessLog bool
	// Metrics receives the server's metrics; pass the one given to the backend as its Observer.
	// Default NewMetrics().
	Metrics *Metrics

	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout configure the http.Server.
	// Defaults 5s, 10s, 15s and 120s.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds request headers. Default 16 KiB.
	MaxHeaderBytes int
	// ShutdownTimeout bounds a graceful shutdown. Default 30s.
	ShutdownTimeout time.Duration
	// TLSCertFile and TLSKeyFile, when both set, make Serve speak HTTPS: TLS 1.3, or TLS 1.2 with
	// forward-secret AEAD cipher suites only.
	TLSCertFile, TLSKeyFile string

	now      func() time.Time
	rateKeys int // keys each limiter tracks; default ratelimit.DefaultKeys
}

func (c Config) withDefaults() Config {
	allocator.Default(&c.Logger, slog.Default())
	allocator.Default(&c.RateBurst, max(1, int(c.RateLimit)))
	allocator.Default(&c.ReadHeaderTimeout, 5*time.Second)
	allocator.Default(&c.ReadTimeout, 10*time.Second)
	allocator.Default(&c.WriteTimeout, 15*time.Second)
	allocator.Default(&c.IdleTimeout, 120*time.Second)
	allocator.Default(&c.MaxHeaderBytes, 16<<10)
	allocator.Default(&c.ShutdownTimeout, 30*time.Second)
	allocator.Default(&c.AuthFailureBurst, 30)
	allocator.Default(&c.AuthFailureRate, 0.1)
	allocator.Default(&c.MaxConns, 4096)
	allocator.Default(&c.MaxConnsPerClient, c.MaxConns)
	c.MaxConnsPerClient = min(c.MaxConnsPerClient, c.MaxConns)
	if c.now == nil {
		c.now = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
		c.Metrics.now = c.now
	}
	return c
}

// validate applies the rule of every configuration (zero means the default, a negative value is an
// error) to the server's fields and its cache's.
func (c Config) validate() error {
	if err := allocator.CheckConfig("server.Config",
		allocator.Setting("RateLimit", c.RateLimit), allocator.Setting("RateBurst", c.RateBurst),
		allocator.Setting("AuthFailureBurst", c.AuthFailureBurst), allocator.Setting("AuthFailureRate", c.AuthFailureRate),
		allocator.Setting("MaxConns", c.MaxConns), allocator.Setting("MaxConnsPerClient", c.MaxConnsPerClient),
		allocator.Setting("ReadHeaderTimeout", c.ReadHeaderTimeout),
		allocator.Setting("ReadTimeout", c.ReadTimeout), allocator.Setting("WriteTimeout", c.WriteTimeout),
		allocator.Setting("IdleTimeout", c.IdleTimeout), allocator.Setting("MaxHeaderBytes", c.MaxHeaderBytes),
		allocator.Setting("ShutdownTimeout", c.ShutdownTimeout)); err != nil {
		return err
	}
	return c.Cache.validate()
}

// Server is the HTTP API. Safe for concurrent use; Close it after Serve returns.
type Server struct {
	cfg      Config
	backend  allocator.Backend
	health   allocator.HealthReporter // nil when the backend does not report health
	recovery *recovery                // wakes held leases; nil when the backend does not report health
	stopped  chan struct{}            // closed by Close
	e        *echo.Echo
	cache    *segmentCache // nil when disabled
	auth     *authenticator
	limiter  *ratelimit.Limiter // per caller; nil without a rate limit
	failures *ratelimit.Limiter // failed logins per client address
	metrics  *Metrics
	headroom headroom // the IDs each namespace had left, for its forecast
	logger   *slog.Logger

	idPrefix     string
	idSeq        atomic.Uint64
	connsRefused atomic.Uint64
	draining     atomic.Bool

	closeOnce  sync.Once
	stopOnce   sync.Once
	closed     atomic.Bool
	background sync.WaitGroup // the metrics' reads of the headroom (see headroomOf)
}

// New checks the configuration and builds the server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Backend == nil {
		return nil, fmt.Errorf("%w: server: no backend", allocator.ErrInvalidConfig)
	}
	if err := cfg.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("%w: server: %w", allocator.ErrInvalidConfig, err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, fmt.Errorf("%w: server: TLS needs both a certificate and a key file", allocator.ErrInvalidConfig)
	}
	var prefix [4]byte
	_, _ = rand.Read(prefix[:])
	s := &Server{cfg: cfg, backend: cfg.Backend, auth: newAuthenticator(cfg.Auth), metrics: cfg.Metrics,
		logger: cfg.Logger, idPrefix: hex.EncodeToString(prefix[:]) + "-"}
	s.health, _ = cfg.Backend.(allocator.HealthReporter)
	if !cfg.Cache.Disabled {
		s.cache = newSegmentCache(cfg.Cache, cfg.Backend, cfg.Metrics, cfg.Logger, cfg.now)
	}
	s.stopped = make(chan struct{})
	if s.health != nil {
		s.recovery = &recovery{health: s.health, stop: s.stopped, forget: func() {}}
		if s.cache != nil {
			s.recovery.forget = s.cache.forgetFailures
		}
	}
	if cfg.RateLimit > 0 {
		s.limiter = ratelimit.New(cfg.RateLimit, cfg.RateBurst, cfg.rateKeys, cfg.now)
	}
	s.failures = ratelimit.New(cfg.AuthFailureRate, cfg.AuthFailureBurst, cfg.rateKeys, cfg.now)
	if err := cfg.Metrics.reg.Register(newStateCollector(s.health, s.cache, s.headroomOf)); err != nil {
		s.closeCache()
		return nil, fmt.Errorf("server: metrics: %w (give each Server its own Metrics)", err)
	}
	if err := cfg.Metrics.countHeadroom(s.headroomOf); err != nil {
		s.closeCache()
		return nil, fmt.Errorf("server: metrics: %w (give each Server its own Metrics)", err)
	}
	s.e = s.routes()
	return s, nil
}

// routes builds the echo instance. Each route is also in openapi.json; a test keeps them in sync.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	// The peer's address, or what a trusted proxy says: a client must not pick the rate-limit bucket
	// it uses.
	e.IPExtractor = clientip.Extractor(s.cfg.TrustedProxies)
	e.Use(s.observe)
	if s.auth.disabled && !s.cfg.Auth.AnyHost {
		e.Use(s.guardOpen)
	}
	e.Use(s.guardCrossSite)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", s.authenticated(s.metricsRoute))
	e.GET("/openapi.json", s.openapi)
	e.GET("/", s.v1(s.statusRoute))
	e.POST("/v1/namespaces/:ns/blocks", s.v1(s.postBlock))
	e.GET("/v1/namespaces/:ns/ids", s.v1(s.getIDs))
	e.GET("/v1/namespaces/:ns", s.v1(s.getNamespace))
	e.PUT("/v1/namespaces/:ns", s.v1(s.putNamespace))
	e.GET("/v1/namespaces", s.v1(s.listNamespaces))
	return e
}

// v1 wraps a handler that needs a token (the /v1 routes and the status page): it authenticates the
// caller and applies the rate limit first. (Not echo
// middleware: a group's middleware makes echo answer 404 for unknown methods, where 405 is right, and
// handing the identity over in echo's context store costs a map per request.)
func (s *Server) v1(h func(echo.Context, identity) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.identify(c)
		if err != nil {
			return err
		}
		if s.limiter != nil {
			if err := s.checkRate(id); err != nil {
				return err
			}
		}
		return h(c, id)
	}
}

// authenticated wraps a handler that needs a token but no rate limit (/metrics: a scraper's pace is
// its operator's).
func (s *Server) authenticated(h func(echo.Context, identity) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.identify(c)
		if err != nil {
			return err
		}
		return h(c, id)
	}
}

// Handler is the HTTP handler of every route.
func (s *Server) Handler() http.Handler { return s.e }

// Close stops the cache's background calls and waits for a read of the metrics' headroom under way. It
// does not close the backend. Safe to call twice.
func (s *Server) Close() error {
	s.closeCache()
	s.stopOnce.Do(func() { close(s.stopped) })
	s.headroom.scrapeMu.Lock()
	s.closed.Store(true) // under the lock: no read starts after the wait begins
	s.headroom.scrapeMu.Unlock()
	s.background.Wait()
	return nil
}

// closing reports whether Close has been called.
func (s *Server) closing() bool { return s.closed.Load() }

func (s *Server) closeCache() {
	s.closeOnce.Do(func() {
		if s.cache != nil {
			s.cache.close()
		}
	})
}

// Serve answers on ln until ctx is done, then shuts down gracefully: it stops accepting connections,
// lets requests in flight finish (up to ShutdownTimeout), and returns. /readyz answers 503 meanwhile.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs, ln := s.httpServer(s.e, ln)
	tlsOn := s.cfg.TLSCertFile != ""
	if tlsOn {
		hs.TLSConfig = tlsConfig()
	}
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- hs.ServeTLS(ln, s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.logger.Info("shutting down: refusing new connections, finishing requests in flight", "timeout", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc
	if err != nil {
		_ = hs.Close()
		return fmt.Errorf("server: graceful shutdown: %w", err)
	}
	s.logger.Info("stopped; every request in flight was answered")
	return nil
}

// refusedConn logs a connection closed for --max-connections-per-client at the 1st, 2nd, 4th, …
// refusal: enough to see a client that holds too many, never a line per connection.
func (s *Server) refusedConn(client string) {
	if n := s.connsRefused.Add(1); n&(n-1) == 0 {
		s.logger.Warn("connection closed: the client address holds its limit of busy connections", "remote", client,
			"limit", s.cfg.MaxConnsPerClient, "refused", n)
	}
}

// httpServer is an http.Server for h with the configured timeouts, and ln wrapped in the configured
// connection bounds.
func (s *Server) httpServer(h http.Handler, ln net.Listener) (*http.Server, net.Listener) {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	cl := connlimit.New(ln, connlimit.Config{Max: s.cfg.MaxConns, PerClient: s.cfg.MaxConnsPerClient, OnRefused: s.refusedConn})
	hs.ConnState = cl.ConnState
	return hs, cl
}

// ServeMetrics answers GET /metrics without a token on ln (404 on any other path), with the API's
// timeouts and connection bounds, until ctx is done; then it closes ln and its connections. For a
// listener that only the scraper reaches (ticketd serve --metrics-listen).
func (s *Server) ServeMetrics(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	hs, ln := s.httpServer(mux, ln)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("server: metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc
	return err
}

// requestID returns the request's ID (set by observe).
func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

// validRequestID accepts a caller's X-Request-Id only if it is short and plain, so that it cannot
// forge log lines.
func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		ch := id[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.') {
			return false
		}
	}
	return true
}

// methodLabel keeps the metrics' method label to the methods HTTP defines, so that made-up methods
// cannot create series without bound.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead,
		http.MethodPatch, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

func routeOf(c echo.Context) string {
	if p := c.Path(); p != "" {
		return p
	}
	return "unmatched"
}

// observe is the outermost middleware: request ID, panic recovery, the error answer, metrics and the
// access log.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := s.cfg.now()
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !validRequestID(id) {
			id = s.idPrefix + strconv.FormatUint(s.idSeq.Add(1), 36)
		}
		h := c.Response().Header()
		h[echo.HeaderXRequestID] = []string{id} // the keys are canonical already
		// No answer is to be cached (GET /ids hands out new IDs each time) or read as anything but its
		// own type.
		h["Cache-Control"] = noStore
		h["X-Content-Type-Options"] = noSniff
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return next(c)
		}()
		if err != nil {
			c.Error(err)
		}
		took := s.cfg.now().Sub(start)
		status := c.Response().Status
		route := routeOf(c)
		s.metrics.observeRequest(route, methodLabel(c.Request().Method), status, took)
		if s.cfg.AccessLog || (err != nil && status < 500) {
			level := slog.LevelInfo
			if !s.cfg.AccessLog {
				level = slog.LevelDebug
			}
			attrs := []any{"request_id", id, "method", c.Request().Method, "route", route, "status", status,
				"duration_ms", float64(took.Microseconds()) / 1000, "remote", c.RealIP()}
			if err != nil {
				attrs = append(attrs, "err", err.Error())
			}
			s.logger.Log(c.Request().Context(), level, "request", attrs...)
		}
		return nil
	}
}

// lease takes a block for a request: from the cache, or the backend when the cache is off. A missing
// namespace is created first when the server allows it and the caller is the admin.
func (s *Server) lease(c echo.Context, caller identity, ns string, size int64) (allocator.Block, bool, error) {
	ctx := c.Request().Context()
	id := requestID(c)
	wait, err := s.preferredWait(c.Request())
	if err != nil {
		return allocator.Block{}, false, err
	}
	blk, cached, err := s.holdLease(ctx, wait, func() (allocator.Block, bool, error) { return s.leaseOnce(ctx, ns, size, id) })
	if s.cfg.CreateOnLease && caller.admin && errors.Is(err, allocator.ErrNotFound) && !errors.Is(err, allocator.ErrUnavailable) {
		if _, cerr := s.backend.CreateNamespace(ctx, allocator.Namespace{Name: ns}); cerr != nil && !errors.Is(cerr, allocator.ErrExists) {
			return allocator.Block{}, false, cerr
		}
		s.logger.Info("namespace created at its first lease, with default settings", "namespace", ns, "request_id", id)
		blk, cached, err = s.leaseOnce(ctx, ns, size, id)
	}
	return blk, cached, err
}

func (s *Server) leaseOnce(ctx context.Context, ns string, size int64, reqID string) (allocator.Block, bool, error) {
	if s.cache != nil {
		return s.cache.lease(ctx, ns, size, reqID)
	}
	blk, err := s.backend.Lease(ctx, ns, size)
	return blk, false, err
}

// namespaceParam authorizes the caller for the path's namespace, then checks its name.
func namespaceParam(c echo.Context, caller identity) (string, error) {
	ns := c.Param("ns")
	if err := authorize(caller, ns); err != nil {
		return "", err
	}
	return ns, allocator.ValidateName(ns)
}

func (s *Server) postBlock(c echo.Context, caller identity) error {
	ns, err := namespaceParam(c, caller)
	if err != nil {
		return err
	}
	size, err := readBlockRequest(c.Request())
	if err != nil {
		return err
	}
	blk, cached, err := s.lease(c, caller, ns, size)
	if err != nil {
		return err
	}
	s.metrics.observeIssued(ns, blk.Size, cached, s.cfg.now())
	return writeJSON(c, func(buf []byte) []byte { return appendBlock(buf, blk) })
}

func (s *Server) getIDs(c echo.Context, caller identity) error {
	ns, err := namespaceParam(c, caller)
	if err != nil {
		return err
	}
	count, err := readCount(c.Request().URL.Query())
	if err != nil {
		return err
	}
	blk, cached, err := s.lease(c, caller, ns, count)
	if err != nil {
		return err
	}
	s.metrics.observeIssued(ns, blk.Size, cached, s.cfg.now())
	return writeJSON(c, func(buf []byte) []byte { return appendIDs(buf, blk) })
}

func (s *Server) getNamespace(c echo.Context, caller identity) error {
	ns, err := namespaceParam(c, caller)
	if err != nil {
		return err
	}
	got, err := s.backend.Namespace(c.Request().Context(), ns)
	if err != nil {
		return err
	}
	out := s.wireNamespace(got)
	if !caller.admin {
		out = withoutServerNames(out)
	}
	return c.JSON(http.StatusOK, out)
}

// withoutServerNames is a namespace as a namespace token sees it: each ticket server's counter, step,
// offset and health, under its place in the list ("server 1", …), without its address, its raw error
// or its replication, which are the admin's to see (as on /readyz).
func withoutServerNames(ns api.Namespace) api.Namespace {
	label := map[string]string{}
	servers := make([]allocator.ServerState, len(ns.Servers))
	for i, st := range ns.Servers {
		label[st.Server] = fmt.Sprintf("server %d", i+1)
		servers[i] = allocator.ServerState{Server: label[st.Server], Next: st.Next, Step: st.Step, Offset: st.Offset, Healthy: st.Healthy}
		if !st.Healthy {
			servers[i].Error = "not usable; the admin sees why"
		}
	}
	ns.Servers = servers
	if len(ns.StaleCounters) > 0 {
		stale := make([]api.StaleCounter, len(ns.StaleCounters))
		for i, sc := range ns.StaleCounters {
			stale[i] = api.StaleCounter{Server: label[sc.Server], SeenAt: sc.SeenAt}
			if stale[i].Server == "" {
				stale[i].Server = "a server"
			}
		}
		ns.StaleCounters = stale
	}
	return ns
}

// wireNamespace is a namespace's wire form with its forecast exhaustion.
func (s *Server) wireNamespace(ns allocator.Namespace) api.Namespace {
	out := api.FromNamespace(ns)
	f := s.headroom.observe(ns, s.cfg.now())
	if f.Known {
		left := strconv.FormatUint(f.Left, 10)
		out.IDsRemaining, out.StaleCounters = &left, f.Stale
	}
	if !f.At.IsZero() {
		out.ExhaustsAt = &f.At
	}
	return out
}

func (s *Server) listNamespaces(c echo.Context, caller identity) error {
	if err := requireAdmin(caller); err != nil {
		return err
	}
	list, err := s.backend.Namespaces(c.Request().Context())
	if err != nil {
		return err
	}
	out := api.Namespaces{Namespaces: make([]api.Namespace, 0, len(list))}
	for _, ns := range list {
		out.Namespaces = append(out.Namespaces, s.wireNamespace(ns))
	}
	return c.JSON(http.StatusOK, out)
}

// putNamespace creates a namespace (201) or updates its settings (200); fields left out keep their
// value on update and take their default on create.
func (s *Server) putNamespace(c echo.Context, caller identity) error {
	if err := requireAdmin(caller); err != nil {
		return err
	}
	name := c.Param("ns")
	if err := allocator.ValidateName(name); err != nil {
		return err
	}
	var body api.NamespaceSettings
	if err := readJSON(c.Request(), &body); err != nil {
		return err
	}
	set, err := parseSettings(body)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	status := http.StatusOK
	cur, err := s.backend.Namespace(ctx, name)
	var out allocator.Namespace
	switch {
	case errors.Is(err, allocator.ErrNotFound) && !errors.Is(err, allocator.ErrUnavailable):
		want := set.apply(allocator.Namespace{Name: name})
		if err := want.WithDefaults().Validate(); err != nil {
			return err
		}
		out, err = s.backend.CreateNamespace(ctx, want)
		if errors.Is(err, allocator.ErrExists) { // created meanwhile by another caller: update it
			if cur, err = s.backend.Namespace(ctx, name); err == nil {
				out, err = s.update(ctx, cur, set)
			}
			break
		}
		status = http.StatusCreated
	case err != nil:
		return err
	default:
		out, err = s.update(ctx, cur, set)
	}
	if err != nil {
		return err
	}
	if s.cache != nil {
		s.cache.forget(name) // cached segments were cut under the old settings
	}
	if full, err := s.backend.Namespace(ctx, name); err == nil {
		out = full
	}
	s.logger.Info("namespace settings written", "namespace", name, "created", status == http.StatusCreated, "request_id", requestID(c))
	return c.JSON(status, s.wireNamespace(out))
}

func (s *Server) update(ctx context.Context, cur allocator.Namespace, set settings) (allocator.Namespace, error) {
	want := set.apply(allocator.Namespace{Name: cur.Name, BlockSize: cur.BlockSize, MaxBlockSize: cur.MaxBlockSize, LeaseTTL: cur.LeaseTTL, MaxID: cur.MaxID})
	if err := want.WithDefaults().Validate(); err != nil {
		return allocator.Namespace{}, err
	}
	return s.backend.UpdateNamespace(ctx, want)
}

// healthz is 200 while the process serves HTTP. The admin (a caller with the admin token, or anyone
// without authentication) is also told the running build; any other caller gets the bare status, a
// wrong token included (counted as a failed login like anywhere else): a health check never fails on
// a token.
func (s *Server) healthz(c echo.Context) error {
	out := api.Health{Status: "ok"}
	if s.auth.disabled || c.Request().Header.Get(echo.HeaderAuthorization) != "" {
		if id, err := s.identify(c); err == nil && id.admin {
			in := version.Get()
			out.Version, out.Commit, out.Dirty, out.Go = in.Version, in.Commit, &in.Dirty, in.Go
		}
	}
	return c.JSON(http.StatusOK, out)
}

var (
	noStore = []string{"no-store"}
	noSniff = []string{"nosniff"}
)

// clipReason bounds a server's error for /readyz.
func clipReason(s string) string {
	const max = 500
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…"
}

// readyz is 200 while at least one ticket server is usable and the server is not shutting down. Anyone
// may ask, so only the admin (a caller with the admin token, or anyone without authentication) is told
// each ticket server's name, health and reason; others get the bare status. A token that is not one
// this server accepts is refused like on any other route.
func (s *Server) readyz(c echo.Context) error {
	var caller identity
	if s.auth.disabled || c.Request().Header.Get(echo.HeaderAuthorization) != "" {
		id, err := s.identify(c)
		if err != nil {
			return err
		}
		caller = id
	}
	out := api.Readiness{}
	usable := s.health == nil
	if s.health != nil {
		for _, h := range s.health.Health() {
			usable = usable || h.Healthy
			if !caller.admin {
				continue
			}
			st := api.ServerStatus{Name: h.Name, Healthy: h.Healthy, Fenced: h.Fenced, Marks: clipReason(h.Marks)}
			if !h.Healthy {
				st.Reason = clipReason(h.Error)
			}
			out.Servers = append(out.Servers, st)
		}
	}
	switch {
	case s.draining.Load():
		out.Error = &api.ErrorBody{Code: api.CodeShuttingDown, Message: "this ticketd is shutting down"}
	case !usable:
		out.Error = &api.ErrorBody{Code: api.CodeNotReady, Message: "no ticket server is usable; see the server log and ticketd_ticket_server_up"}
	default:
		out.Ready = true
		return c.JSON(http.StatusOK, out)
	}
	c.Response().Header().Set("Retry-After", "1")
	return c.JSON(http.StatusServiceUnavailable, out)
}

// metricsRoute serves the Prometheus metrics to the admin and to the metrics token: they name every
// namespace and ticket server.
func (s *Server) metricsRoute(c echo.Context, caller identity) error {
	if !caller.admin && !caller.metrics {
		return errorf(http.StatusForbidden, api.CodeForbidden, "/metrics needs the admin token or the metrics token")
	}
	s.metrics.Handler().ServeHTTP(c.Response(), c.Request())
	return nil
}

// MetricsHandler serves the metrics without a token, for a listener of their own that only the
// scraper reaches (ticketd serve --metrics-listen).
func (s *Server) MetricsHandler() http.Handler { return s.metrics.Handler() }

// tlsConfig accepts TLS 1.3, and TLS 1.2 with ECDHE key exchange and AEAD ciphers only (no CBC, no
// RSA key exchange). TLS 1.3's suites are all AEAD and not configurable.
func tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	}}
}

//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openapi(c echo.Context) error {
	return c.JSONBlob(http.StatusOK, openapiJSON)
}
