// Command shortener is a URL shortener that takes its link IDs from ticketd over HTTP and keeps its
// links in Redis. The service itself is package links; this file reads the flags, connects, serves,
// and shuts down cleanly on SIGINT or SIGTERM.
//
//	SHORTENER_TOKEN=… SHORTENER_SCRAMBLE_KEY=$(openssl rand -hex 32) go run ./examples/shortener \
//	    --listen 127.0.0.1:8081 --ticketd http://127.0.0.1:8080 --redis 127.0.0.1:6379 \
//	    --base-url http://localhost:8081
//
// Every flag falls back to an environment variable: --token to SHORTENER_TOKEN, --base-url to
// SHORTENER_BASE_URL, and so on (give the token and keys in the variables: the command line is
// visible to other users of the machine). It will not start without a scramble key of real strength
// and a base URL, unless --dev says it runs on a developer's machine.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/examples/shortener/links"
	"github.com/ticketd/ticketd/internal/clientip"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "shortener:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	listen, ticketd, token, namespace string
	redis, keyPrefix, baseURL         string
	scramble                          bool
	scrambleKey                       string
	dev                               bool
	createToken                       string
	openCreation                      bool
	createRate                        float64
	createBurst                       int
	createQuota                       int64
	createQuotaWindow                 time.Duration
	linkTTL                           time.Duration
	missRate                          float64
	missBurst                         int
	trustedProxy                      string
	maxLinks                          int64
	codeLength                        int
	adminToken                        string
	shutdownTimeout                   time.Duration
	logLevel                          string
}

// parseFlags reads args, then the SHORTENER_* variable of each flag not given on the command line.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("shortener", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8081", "`ADDRESS` to listen on")
	fs.StringVar(&o.ticketd, "ticketd", "http://127.0.0.1:8080", "ticketd base `URL`s, comma-separated")
	fs.StringVar(&o.token, "token", "", "ticketd bearer `TOKEN` of the namespace; prefer the environment variable to the command line")
	fs.StringVar(&o.namespace, "namespace", "links", "ticketd `NAMESPACE` of the link IDs")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis `ADDRESS` (host:port or redis://[user:password@]host:port/db)")
	fs.StringVar(&o.keyPrefix, "key-prefix", links.DefaultKeyPrefix, "`PREFIX` of every Redis key")
	fs.StringVar(&o.baseURL, "base-url", "", "`URL` that short URLs start with; required unless --dev (then: the scheme and host of each request)")
	fs.BoolVar(&o.scramble, "scramble", true, "scramble IDs into codes, so that nobody can list the links by counting (--scramble=false only with --dev)")
	fs.StringVar(&o.scrambleKey, "scramble-key", "", "secret `KEY` of the scramble, at least 32 characters (openssl rand -hex 32); required unless --dev; never change it once links exist")
	fs.BoolVar(&o.dev, "dev", false, "development: run without --scramble-key (a random key of this run) and --base-url (short URLs from the request's Host), and allow --scramble=false")
	fs.StringVar(&o.createToken, "create-token", "", "bearer `TOKEN` that creating a link requires (openssl rand -hex 32); required on an address that is not loopback, unless --open-creation")
	fs.BoolVar(&o.openCreation, "open-creation", false, "let anyone who reaches an address that is not loopback create links without --create-token (the quotas, the rate and --max-links still apply)")
	fs.Float64Var(&o.createRate, "create-rate", 1, "links a second one client address may create; 0: no limit")
	fs.IntVar(&o.createBurst, "create-burst", 20, "links one client address may create at once above --create-rate")
	fs.Int64Var(&o.createQuota, "create-quota", 100, "links one client address may create per --create-quota-window, counted in Redis; 0: no quota")
	fs.DurationVar(&o.createQuotaWindow, "create-quota-window", 24*time.Hour, "the window of --create-quota")
	fs.DurationVar(&o.linkTTL, "link-ttl", 0, "how long a link lives, e.g. 720h; expired links no longer count against --max-links; 0: forever")
	fs.Float64Var(&o.missRate, "miss-rate", 1, "lookups of unknown codes a second one client address may make; past it every lookup from there is answered 429; 0: no limit")
	fs.IntVar(&o.missBurst, "miss-burst", 30, "lookups of unknown codes one client address may make at once above --miss-rate")
	fs.StringVar(&o.trustedProxy, "trusted-proxy", "", "`CIDRS` of the proxies in front (comma-separated): their X-Forwarded-For names the client for the per-address limits; empty: never")
	fs.Int64Var(&o.maxLinks, "max-links", 0, "most links the service holds; past it creating one answers 507 (0: no cap)")
	fs.IntVar(&o.codeLength, "code-length", links.MaxCodeLen, fmt.Sprintf("longest code, %d to %d characters: link IDs stop at 62^N-1, the namespace's max_id in ticketd; choose it before the first link", links.MinCodeLen, links.MaxCodeLen))
	fs.StringVar(&o.adminToken, "admin-token", "", "ticketd admin `TOKEN`, used once at start to set the namespace's max_id for --code-length (created if missing); without it, the namespace's max_id must already fit")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a shutdown waits for requests in flight")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " [$" + envName(f.Name) + "]" })
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q; every setting is a flag", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := envName(f.Name)
		if v := getenv(env); v != "" && !given[f.Name] && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("$%s: %v", env, e)
			}
		}
	})
	return o, err
}

// envName is the environment variable of a flag: --base-url reads SHORTENER_BASE_URL.
func envName(flag string) string {
	return "SHORTENER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// open connects to ticketd and Redis and returns the service and a function that disconnects.
func open(ctx context.Context, o options, logger *slog.Logger) (*links.Service, func(), error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ropt, err := redisOptions(o.redis)
	if err != nil {
		return nil, nil, err
	}
	rdb := goredis.NewClient(ropt)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s does not answer: %w", ropt.Addr, err)
	}
	// The ceiling is set before the client exists: its first lease may come at once, and ticketd
	// refuses a max_id below an ID it issued.
	urls := strings.Split(o.ticketd, ",")
	ns, err := checkTicketd(ctx, urls, o.namespace, o.token, logger)
	if err == nil && o.codeLength != 0 && o.codeLength < links.MaxCodeLen { // 0: the default, MaxCodeLen
		err = ensureCeiling(ctx, urls, o, ns, logger)
	}
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	// The client leases a block of IDs in the background and serves links from it; a link waits for
	// ticketd only when the block runs dry before the next one arrives.
	ids, err := client.New(client.HTTP(urls...), o.namespace, client.WithToken(o.token))
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	proxies, err := clientip.ParsePrefixes(o.trustedProxy)
	if err != nil {
		_ = ids.Close()
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("--trusted-proxy: %w", err)
	}
	svc, err := links.New(links.Config{IDs: ids, Redis: rdb, KeyPrefix: o.keyPrefix, BaseURL: o.baseURL, CodeLength: o.codeLength,
		NoScramble: !o.scramble, ScrambleKey: o.scrambleKey, Development: o.dev, CreateToken: o.createToken,
		CreateRate: o.createRate, CreateBurst: o.createBurst, CreateQuota: o.createQuota, CreateQuotaWindow: o.createQuotaWindow,
		LinkTTL: o.linkTTL, MissRate: o.missRate, MissBurst: o.missBurst, TrustedProxies: proxies, MaxLinks: o.maxLinks, Logger: logger})
	if err != nil {
		_ = ids.Close()
		_ = rdb.Close()
		return nil, nil, err
	}
	return svc, func() { _ = ids.Close(); _ = rdb.Close() }, nil
}

// checkToken refuses a token that ticketd could not accept, before anything is connected: the
// shortener would start and answer 503 to every new link.
func checkToken(o options) error {
	switch {
	case o.token == "":
		return fmt.Errorf("no ticketd token: give --token or $SHORTENER_TOKEN, the token ticketd serve has for namespace %s (TICKETD_TOKENS=%s=TOKEN)", o.namespace, o.namespace)
	case len(o.token) < api.MinTokenLength:
		return fmt.Errorf("the ticketd token (--token or $SHORTENER_TOKEN) is %d characters; ticketd accepts none shorter than %d, so it would refuse every lease", len(o.token), api.MinTokenLength)
	}
	return nil
}

// checkSecrets refuses, before anything is connected, a start that would leave the links open to
// listing or the short URLs to the client's Host, unless --dev says this is a developer's machine.
func checkSecrets(o options) error {
	if o.createToken != "" {
		if err := api.CheckToken(o.createToken); err != nil {
			return fmt.Errorf("the creation token (--create-token or $SHORTENER_CREATE_TOKEN): %w", err)
		}
	} else if !clientip.LoopbackListen(o.listen) && !o.openCreation {
		return fmt.Errorf("--listen %s is not a loopback address, and there is no creation token: anyone who reaches it could create links until --max-links stops everyone; "+
			"give $SHORTENER_CREATE_TOKEN (openssl rand -hex 32), or, if anyone may create links, --open-creation", o.listen)
	}
	if o.openCreation && o.createToken != "" {
		return errors.New("--open-creation and --create-token both given: creating links either needs the token or is open; choose one")
	}
	if _, err := clientip.ParsePrefixes(o.trustedProxy); err != nil {
		return fmt.Errorf("--trusted-proxy: %w; give the proxies' addresses or networks, comma-separated", err)
	}
	if o.createQuota < 0 || o.createQuotaWindow <= 0 || o.linkTTL < 0 || (o.linkTTL > 0 && o.linkTTL < time.Second) || o.missRate < 0 || o.missBurst < 0 {
		return errors.New("--create-quota, --link-ttl (0 or at least 1s), --miss-rate and --miss-burst must not be negative, and --create-quota-window must be positive")
	}
	if o.dev {
		return nil
	}
	switch {
	case !o.scramble:
		return errors.New("--scramble=false makes codes the IDs in order, so anyone can list every link; it is for --dev only")
	case o.scrambleKey == "":
		return errors.New("no scramble key: give $SHORTENER_SCRAMBLE_KEY (or --scramble-key), 32 random bytes in hex or base64 (openssl rand -hex 32); without one anyone could list every link by encoding 1, 2, 3, … (--dev runs with a random key of its own)")
	case o.baseURL == "":
		return errors.New("no base URL: give --base-url (or $SHORTENER_BASE_URL), the one short URLs start with, e.g. https://sho.rt; only with --dev are they built from the Host a client sends")
	}
	if err := links.CheckScrambleKey(o.scrambleKey); err != nil {
		return fmt.Errorf("--scramble-key or $SHORTENER_SCRAMBLE_KEY: %w", err)
	}
	return nil
}

// namespaceInfo is what the shortener reads of ticketd's namespace: whether it answered, and the
// namespace's ceiling (max_id, a decimal string; absent from a ticketd without ceilings).
type namespaceInfo struct {
	found bool
	MaxID string `json:"max_id"`
}

// checkTicketd asks ticketd for the namespace with the token before serving. A token it refuses (401,
// 403) stops the start with ticketd's own reason, which would otherwise show only as 503s on the first
// links and in the log. A ticketd that does not answer yet is logged, not fatal: the client retries.
func checkTicketd(ctx context.Context, urls []string, namespace, token string, logger *slog.Logger) (namespaceInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, base := range urls {
		base = strings.TrimRight(strings.TrimSpace(base), "/")
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/namespaces/"+namespace, nil)
		if err != nil {
			return namespaceInfo{}, fmt.Errorf("--ticketd %q: %w", base, err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			logger.Warn("ticketd does not answer yet; starting anyway, and leasing once it does", "ticketd", base, "err", err)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		var e api.Error
		_ = json.Unmarshal(body, &e)
		switch resp.StatusCode {
		case http.StatusOK:
			ns := namespaceInfo{found: true}
			_ = json.Unmarshal(body, &ns)
			return ns, nil
		case http.StatusUnauthorized, http.StatusForbidden:
			return namespaceInfo{}, fmt.Errorf("ticketd at %s refuses the token for namespace %s: %d %s: %s; give the token ticketd serve has for it (--token or $SHORTENER_TOKEN)",
				base, namespace, resp.StatusCode, e.Error.Code, e.Error.Message)
		default:
			logger.Warn("ticketd cannot lease IDs of the namespace yet; starting anyway", "ticketd", base, "namespace", namespace,
				"status", resp.StatusCode, "code", e.Error.Code, "message", e.Error.Message)
		}
	}
	return namespaceInfo{}, nil
}

// ensureCeiling makes sure ticketd issues no link ID above the largest that a code of --code-length
// holds: the namespace's max_id must be at most 62^N-1. With --admin-token it sets max_id to that
// (PUT /v1/namespaces/{ns}, which creates the namespace if missing, and which ticketd refuses if an ID
// above it was issued already); without, a namespace whose max_id is higher, or that cannot be read,
// stops the start with what to do.
func ensureCeiling(ctx context.Context, urls []string, o options, ns namespaceInfo, logger *slog.Logger) error {
	codec, err := links.PlainCodec().WithLength(o.codeLength)
	if err != nil {
		return fmt.Errorf("--code-length: %w", err)
	}
	want := codec.MaxID()
	if cur, err := strconv.ParseInt(ns.MaxID, 10, 64); ns.found && err == nil && cur <= want {
		return nil // already within the codes
	}
	if o.adminToken == "" {
		have := "cannot be read"
		if ns.found {
			have = "has max_id " + orDefault(ns.MaxID, "2^63-1")
		}
		return fmt.Errorf("--code-length %d: namespace %s %s, but codes of %d characters hold IDs up to %d; set its max_id to %d (PUT /v1/namespaces/%s {\"max_id\":\"%d\"}), or give --admin-token ($SHORTENER_ADMIN_TOKEN) and the shortener sets it",
			o.codeLength, o.namespace, have, o.codeLength, want, want, o.namespace, want)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"max_id":"%d"}`, want)
	var lastErr error
	for _, base := range urls {
		base = strings.TrimRight(strings.TrimSpace(base), "/")
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/namespaces/"+o.namespace, strings.NewReader(body))
		if err != nil {
			return fmt.Errorf("--ticketd %q: %w", base, err)
		}
		req.Header.Set("Authorization", "Bearer "+o.adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
			logger.Info("namespace max_id set for the code length", "namespace", o.namespace, "max_id", want, "code_length", o.codeLength)
			return nil
		}
		var e api.Error
		_ = json.Unmarshal(answer, &e)
		return fmt.Errorf("--code-length %d: ticketd at %s refused max_id %d for namespace %s: %d %s: %s",
			o.codeLength, base, want, o.namespace, resp.StatusCode, e.Error.Code, e.Error.Message)
	}
	return fmt.Errorf("--code-length %d: no ticketd answered to set namespace %s's max_id to %d: %w", o.codeLength, o.namespace, want, lastErr)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// redisOptions reads --redis. Its errors never quote the value: it may hold a password, in a URL or
// written without a scheme (:PASSWORD@host:port).
func redisOptions(addr string) (*goredis.Options, error) {
	if strings.Contains(addr, "://") {
		o, err := goredis.ParseURL(addr)
		if err != nil { // not wrapped: the error would quote the URL, password included
			return nil, errors.New("--redis: not a valid redis:// or rediss:// URL")
		}
		return o, nil
	}
	if strings.Contains(addr, "@") {
		return nil, errors.New("--redis: an address with '@' looks like it holds a password (not shown); write it as redis://:PASSWORD@host:port")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, errors.New("--redis must be host:port or a redis:// URL")
	}
	return &goredis.Options{Addr: addr}, nil
}

// run serves until ctx ends, then lets the requests in flight finish.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q must be debug, info, warn or error", o.logLevel)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	// go-redis logs its dial failures raw ("redis: … pool.go:…") before open reports them once, clearly:
	// into this log, at debug level.
	redis.RouteClientLogs(logger)
	if err := checkToken(o); err != nil {
		return err
	}
	if err := checkSecrets(o); err != nil {
		return err
	}
	if o.codeLength < links.MinCodeLen || o.codeLength > links.MaxCodeLen {
		return fmt.Errorf("--code-length %d: it must be %d to %d", o.codeLength, links.MinCodeLen, links.MaxCodeLen)
	}
	if o.dev {
		logger.Warn("development mode (--dev): codes may be unscrambled or scrambled with a random key of this run, and short URLs may take the Host a client sends; never run so in production")
	}
	svc, disconnect, err := open(ctx, o, logger)
	if err != nil {
		return err
	}
	defer disconnect()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "ticketd", o.ticketd, "namespace", o.namespace,
		"key_prefix", o.keyPrefix, "scramble", o.scramble)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down", "timeout", o.shutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	st := svc.Stats()
	logger.Info("stopped", "links_created", st.Created, "redirects", st.Redirects, "refused", st.Refused,
		"unauthorized", st.Unauthorized, "rate_limited", st.RateLimited, "over_quota", st.OverQuota, "miss_limited", st.MissLimited, "over_cap", st.OverCap, "codes_exhausted", st.Exhausted, "failed", st.Failed, "blocks_leased", st.IDs.Refills, "blocks_per_1000_links", st.BlocksPer1000Links())
	return err
}
