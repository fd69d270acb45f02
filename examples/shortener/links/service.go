// Package links is the URL shortener's service: it takes its link IDs from ticketd, a link's code is
// its ID scrambled and written in base 62, and links and their hit counts live in Redis. The command in
// examples/shortener serves it; tests run it in their own process.
//
// The HTTP API:
//
//	POST /api/links        {"url":"https://…"} → 201 {"code","short_url","url"[,"expires_at"]}; with a
//	                       creation token, only for "Authorization: Bearer TOKEN" (wrong tokens from
//	                       one address are limited and logged); 429 with Retry-After past a client
//	                       address's rate or quota; 507 past the cap on links, and 507 codes_exhausted
//	                       once every code of Config.CodeLength characters is taken
//	GET  /{code}           → 301 to the link's URL, and one more hit; 404 for an unknown code
//	GET  /api/links/{code} → 200 {"code","short_url","url","hits","created_at"[,"expires_at"]}
//	GET  /healthz          → 200 {"status":"ok","ticketd":"ok"} while Redis answers; "degraded", with
//	                         the cause in "ticketd", while leases from ticketd fail; "exhausted"
//	                         once every code is taken
//
// A link's ID is never shown: IDs count the links. Unknown codes looked up by one client address are
// limited (Config.MissRate): past it, every lookup from there is 429, hits included, so that a walk
// of the codes learns nothing. Errors have ticketd's shape: {"error":{"code":"…","message":"…"}}, and
// name no host or address of ticketd or Redis. A refused request (400, 401, 413, 429, 507) creates
// nothing and takes no ID. Every answer is Cache-Control: no-store and X-Content-Type-Options: nosniff.
package links

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/clientip"
	"github.com/ticketd/ticketd/internal/ratelimit"
)

const (
	// MaxURLBytes bounds a link's URL, before and after normalisation.
	MaxURLBytes = 2048
	// MaxBodyBytes bounds the body of POST /api/links: room for a URL of MaxURLBytes written entirely
	// in JSON \u escapes.
	MaxBodyBytes = 16 << 10
	// DefaultKeyPrefix is the default Config.KeyPrefix.
	DefaultKeyPrefix = "shortener:"
	// MinScrambleKeyBytes is the fewest random bytes a scramble key must hold (written in hex or
	// base64): with a guessable key anyone can list every link by encoding the IDs 1, 2, 3, …, and one
	// public code lets an offline search test keys.
	MinScrambleKeyBytes = 32
	// tokenFailureBurst and tokenFailureRate bound the wrong creation tokens one client address may
	// send: 10 at once, then one every 10 seconds.
	tokenFailureBurst = 10
	tokenFailureRate  = 0.1
)

// Error codes of the API, besides ticketd's own invalid_json, unknown_field, body_too_large,
// route_not_found, method_not_allowed, unavailable and internal.
const (
	CodeInvalidURL   = "invalid_url"     // 400: not an http(s) URL with a host, of at most MaxURLBytes
	CodeInvalidCode  = "invalid_code"    // 400 from /api/links/{code}: not a code the service could have made
	CodeLinkNotFound = "link_not_found"  // 404: no link has this code
	CodeTooManyLinks = "too_many_links"  // 507: the service holds Config.MaxLinks links already
	CodeExhausted    = "codes_exhausted" // 507: every code of Config.CodeLength characters is taken
)

// Config configures a Service. Zero values mean the defaults given with each field.
type Config struct {
	// IDs is the ticketd client that link IDs come from. Required; the Service does not close it.
	IDs *client.Client
	// Redis holds links and hit counts. Required; the Service does not close it.
	Redis goredis.UniversalClient
	// KeyPrefix starts every Redis key of the Service. Default DefaultKeyPrefix.
	KeyPrefix string
	// BaseURL starts each short URL, e.g. "https://sho.rt". Required unless Development: then, when
	// empty, the scheme and Host of the request that asks (a Host the client chooses).
	BaseURL string
	// NoScramble makes codes the plain IDs in base 62 (consecutive links get consecutive codes, so
	// anyone can list every link).
	// Default false: codes are scrambled (see Codec).
	NoScramble bool
	// ScrambleKey keys the scramble: MinScrambleKeyBytes random bytes or more, in hex or base64 (openssl
	// rand -hex 32). Required unless NoScramble or Development; never change it once links exist.
	ScrambleKey string
	// CodeLength is the length of the longest code, MinCodeLen to MaxCodeLen: link IDs go up to
	// 62^CodeLength-1, and the namespace's max_id in ticketd must not be above that (Codec.MaxID).
	// Past it, creating a link answers 507 codes_exhausted. Choose it before the first link: the codes
	// of one key differ from one length to another. Default MaxCodeLen (IDs up to 2^63-1).
	CodeLength int
	// Development lets the service run without a ScrambleKey (a random key of this process is used:
	// codes stay unguessable, and links made before a restart keep working) and without a BaseURL. For
	// a developer's machine only.
	Development bool
	// CreateToken, when set, is the bearer token that POST /api/links requires; redirects and reads
	// need none. Default: anyone may create links.
	CreateToken string
	// CreateRate is how many links a second one client address (the connection's peer, or what a
	// TrustedProxies proxy says; an IPv6 /64) may create, up to CreateBurst at once (default
	// max(1, CreateRate)); past it the answer is 429 with Retry-After. Zero means no limit.
	CreateRate  float64
	CreateBurst int
	// CreateQuota is how many links one client address may create in CreateQuotaWindow (default 24h),
	// counted in Redis so that every replica and restart shares it; past it, 429 with Retry-After.
	// Zero means no quota.
	CreateQuota       int64
	CreateQuotaWindow time.Duration
	// LinkTTL, when set, is how long a link lives: Redis forgets it then, and it no longer counts
	// against MaxLinks. Zero: links never expire.
	LinkTTL time.Duration
	// MissRate is how many lookups of unknown codes a second one client address may make, up to
	// MissBurst at once (default max(1, MissRate)); past it every lookup from there is 429 with
	// Retry-After. Zero means no limit.
	MissRate  float64
	MissBurst int
	// TrustedProxies are the proxies whose X-Forwarded-For names the client, for the limits above.
	// Empty: the connection's peer is the client.
	TrustedProxies []netip.Prefix
	// MaxLinks caps the links the service holds (counted from the first link this version made);
	// past it POST /api/links answers 507. Zero means no cap.
	MaxLinks int64
	// Logger receives a line for each failed request (5xx). Default: discard.
	Logger *slog.Logger
	// Now is the clock of created_at. Default time.Now.
	Now func() time.Time
}

// Service is the URL shortener: an http.Handler and its counters. It is safe for concurrent use.
type Service struct {
	ids     *client.Client
	links   store
	codec   *Codec
	baseURL string
	logger  *slog.Logger
	now     func() time.Time
	echo    *echo.Echo

	createToken   [sha256.Size]byte // zero: no token required
	creates       *ratelimit.Limiter
	tokenFailures *ratelimit.Limiter // wrong creation tokens per client
	misses        *ratelimit.Limiter // unknown codes per client; nil: no limit
	maxLinks      int64
	quota         int64
	quotaWindow   time.Duration
	linkTTL       time.Duration

	created, redirects, refused, notFound, failed atomic.Int64
	unauthorized, rateLimited, overCap, exhausted atomic.Int64
	overQuota, missLimited                        atomic.Int64
	codesLeft                                     atomic.Bool // false once a link found every code taken
}

// Stats are a Service's counters.
type Stats struct {
	// Created counts links created; Redirects redirects served (each one hit).
	Created, Redirects int64
	// Refused counts requests refused as invalid (400, 413): they created nothing and took no ID.
	Refused int64
	// NotFound counts requests for codes that no link has.
	NotFound int64
	// Failed counts requests that failed because ticketd or Redis did not answer (5xx).
	Failed int64
	// Unauthorized, RateLimited, OverQuota and OverCap count link creations refused for a missing or
	// wrong creation token (401), past a client address's rate or its wrong tokens' limit (429), past
	// its quota (429) and past MaxLinks (507); Exhausted those refused because every code is taken
	// (507 codes_exhausted).
	Unauthorized, RateLimited, OverQuota, OverCap, Exhausted int64
	// MissLimited counts lookups refused (429) because their client address looked up too many
	// unknown codes.
	MissLimited int64
	// IDs are the ticketd client's counters: IDs.Refills is the number of blocks leased from ticketd.
	IDs client.Stats
}

// BlocksPer1000Links is the number of blocks leased from ticketd per 1,000 links created; 0 before
// the first link.
func (s Stats) BlocksPer1000Links() float64 {
	if s.Created == 0 {
		return 0
	}
	return float64(s.IDs.Refills) * 1000 / float64(s.Created)
}

// New returns a Service. It does no I/O.
func New(cfg Config) (*Service, error) {
	if cfg.IDs == nil {
		return nil, errors.New("shortener: Config.IDs (a ticketd client) is required")
	}
	if cfg.Redis == nil {
		return nil, errors.New("shortener: Config.Redis is required")
	}
	s := &Service{ids: cfg.IDs, links: store{rdb: cfg.Redis, prefix: cfg.KeyPrefix}, logger: cfg.Logger, now: cfg.Now}
	if s.links.prefix == "" {
		s.links.prefix = DefaultKeyPrefix
	}
	if cfg.BaseURL != "" {
		u, err := url.Parse(cfg.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("shortener: base URL %q must be http(s)://HOST[/PATH], without query or fragment", cfg.BaseURL)
		}
		s.baseURL = strings.TrimRight(u.String(), "/")
	}
	if s.baseURL == "" && !cfg.Development {
		return nil, errors.New("shortener: no base URL: give the one short URLs start with, e.g. https://sho.rt (only in development are they built from the Host a client sends)")
	}
	switch {
	case cfg.NoScramble:
		s.codec = PlainCodec()
	case cfg.ScrambleKey != "":
		if err := CheckScrambleKey(cfg.ScrambleKey); err != nil {
			return nil, fmt.Errorf("shortener: %w", err)
		}
		s.codec = NewCodec(cfg.ScrambleKey)
	case cfg.Development:
		var key [32]byte
		_, _ = rand.Read(key[:])
		s.codec = NewCodec(hex.EncodeToString(key[:]))
	default:
		return nil, errors.New("shortener: no scramble key: give a secret of at least 32 characters (openssl rand -hex 32); without one anyone could list every link by encoding 1, 2, 3, …")
	}
	if cfg.CodeLength != 0 {
		c, err := s.codec.WithLength(cfg.CodeLength)
		if err != nil {
			return nil, err
		}
		s.codec = c
	}
	s.codesLeft.Store(true)
	if cfg.CreateToken != "" {
		if err := api.CheckToken(cfg.CreateToken); err != nil {
			return nil, fmt.Errorf("shortener: creation token: %w", err)
		}
		s.createToken = sha256.Sum256([]byte(cfg.CreateToken))
	}
	if cfg.CreateRate < 0 || cfg.CreateBurst < 0 || cfg.MaxLinks < 0 || cfg.CreateQuota < 0 || cfg.CreateQuotaWindow < 0 ||
		cfg.LinkTTL < 0 || cfg.MissRate < 0 || cfg.MissBurst < 0 {
		return nil, errors.New("shortener: CreateRate, CreateBurst, CreateQuota, CreateQuotaWindow, LinkTTL, MissRate, MissBurst and MaxLinks must not be negative")
	}
	if cfg.LinkTTL > 0 && cfg.LinkTTL < time.Second {
		return nil, fmt.Errorf("shortener: LinkTTL %s is under a second", cfg.LinkTTL)
	}
	s.creates = newLimiter(cfg.CreateRate, cfg.CreateBurst, cfg.Now)
	s.misses = newLimiter(cfg.MissRate, cfg.MissBurst, cfg.Now)
	s.tokenFailures = ratelimit.New(tokenFailureRate, tokenFailureBurst, 0, cfg.Now)
	s.maxLinks, s.quota, s.quotaWindow, s.linkTTL = cfg.MaxLinks, cfg.CreateQuota, cfg.CreateQuotaWindow, cfg.LinkTTL
	if s.quotaWindow == 0 {
		s.quotaWindow = 24 * time.Hour
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	// The peer's address, or what a trusted proxy says: a client must not pick the bucket it uses.
	e.IPExtractor = clientip.Extractor(cfg.TrustedProxies)
	e.Use(plainAnswers)
	e.POST("/api/links", s.createLink)
	e.GET("/api/links/:code", s.getLink)
	e.GET("/healthz", s.healthz)
	e.GET("/:code", s.redirect)
	s.echo = e
	return s, nil
}

// newLimiter is a per-client limiter of rate a second, up to burst at once (default max(1, rate));
// nil when rate is zero.
func newLimiter(rate float64, burst int, now func() time.Time) *ratelimit.Limiter {
	if rate == 0 {
		return nil
	}
	if burst == 0 {
		burst = max(1, int(rate))
	}
	return ratelimit.New(rate, burst, 0, now)
}

// plainAnswers marks every answer as not to be stored by caches, nor read as another type than its
// own.
func plainAnswers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		return next(c)
	}
}

// client names the request's client for the per-client limits.
func clientOf(c echo.Context) string { return clientip.Key(c.RealIP()) }

// Handler returns the HTTP API.
func (s *Service) Handler() http.Handler { return s.echo }

// Stats returns the Service's counters and its ticketd client's.
func (s *Service) Stats() Stats {
	return Stats{Created: s.created.Load(), Redirects: s.redirects.Load(), Refused: s.refused.Load(),
		NotFound: s.notFound.Load(), Failed: s.failed.Load(), Unauthorized: s.unauthorized.Load(),
		RateLimited: s.rateLimited.Load(), OverQuota: s.overQuota.Load(), OverCap: s.overCap.Load(), Exhausted: s.exhausted.Load(),
		MissLimited: s.missLimited.Load(), IDs: s.ids.Stats()}
}

// linkJSON is a link on the wire. It has no ID: IDs are sequential, and would tell how many links
// exist.
type linkJSON struct {
	Code      string     `json:"code"`
	ShortURL  string     `json:"short_url"`
	URL       string     `json:"url"`
	Hits      *int64     `json:"hits,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// createLink: POST /api/links. The request is checked in full before an ID is taken, so that a refused
// request costs nothing: the creation token, the client's rate, the body, the cap on links.
func (s *Service) createLink(c echo.Context) error {
	if err := s.mayCreate(c); err != nil {
		return err
	}
	target, err := readLinkRequest(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if s.maxLinks > 0 {
		n, err := s.links.count(ctx, s.now())
		if err != nil {
			return unavailable("the link store did not answer; retry", err)
		}
		if n >= s.maxLinks {
			return s.tooManyLinks()
		}
	}
	if s.quota > 0 {
		n, wait, err := s.links.takeQuota(ctx, clientOf(c), s.quotaWindow)
		if err != nil {
			return unavailable("the link store did not answer; retry", err)
		}
		if n > s.quota {
			s.overQuota.Add(1)
			c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
			return refuse(http.StatusTooManyRequests, api.CodeRateLimited, "this client address created its quota of %d links in %s; retry after the Retry-After delay", s.quota, s.quotaWindow)
		}
	}
	// A link never replaces another. A new ID's code can be taken only by a link made under another
	// scramble key or setting (or by this very write, when Redis retried it); then the next ID is tried.
	for range 3 {
		id, err := s.ids.Next(ctx)
		if errors.Is(err, client.ErrExhausted) {
			return s.codesExhausted()
		}
		if err != nil {
			return unavailable("no link ID available from ticketd: "+TicketdCause(err), err)
		}
		code, err := s.codec.Encode(id)
		if errors.Is(err, ErrCodesExhausted) {
			s.logger.Error("ticketd issued an ID above the largest code: the namespace's max_id must be at most the codec's MaxID",
				"id", id, "max_id", s.codec.MaxID(), "code_length", s.codec.Length())
			return s.codesExhausted()
		}
		if err != nil {
			return fmt.Errorf("ticketd issued ID %d: %w", id, err)
		}
		l := link{Code: code, URL: target, ID: id, Created: s.now()}
		if s.linkTTL > 0 {
			l.Expires = l.Created.Add(s.linkTTL)
		}
		ok, err := s.links.create(ctx, l, s.maxLinks)
		if errors.Is(err, errFull) {
			return s.tooManyLinks()
		}
		if err != nil {
			return unavailable("the link store did not answer; retry", err)
		}
		if !ok {
			s.logger.Warn("code already taken; taking another ID", "code", code, "id", id)
			continue
		}
		s.created.Add(1)
		s.codesLeft.Store(true)
		c.Response().Header().Set(echo.HeaderLocation, "/api/links/"+code)
		return c.JSON(http.StatusCreated, linkJSON{Code: code, ShortURL: s.shortURL(c, code), URL: target, ExpiresAt: expiresAt(l)})
	}
	return errors.New("three new IDs in a row gave codes of existing links")
}

// mayCreate checks the creation token, then takes one link from the client address's rate. A client
// address that sent too many wrong tokens has its wrong ones answered 429; the right token is never
// refused for them (the address may be a proxy shared with the real client). Wrong tokens are logged
// at the 1st, 2nd, 4th, … from an address, never the token itself.
func (s *Service) mayCreate(c echo.Context) error {
	who := clientOf(c)
	if s.createToken != ([sha256.Size]byte{}) {
		tok, ok := api.Bearer(c.Request().Header.Get(echo.HeaderAuthorization))
		d := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(d[:], s.createToken[:]) != 1 || !ok {
			if blocked, wait := s.tokenFailures.Empty(who); blocked {
				s.rateLimited.Add(1)
				return tooMany(c, wait, "too many requests with a wrong creation token from this client address; retry after the Retry-After delay")
			}
			_, _, n := s.tokenFailures.Take(who)
			if n&(n-1) == 0 {
				s.logger.Warn("wrong creation token", "remote", who, "failures", n)
			}
			s.unauthorized.Add(1)
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="shortener"`)
			return refuse(http.StatusUnauthorized, api.CodeInvalidToken, `creating links needs "Authorization: Bearer TOKEN" with the service's creation token`)
		}
	}
	if s.creates != nil {
		if ok, wait, _ := s.creates.Take(who); !ok {
			s.rateLimited.Add(1)
			return tooMany(c, wait, "more than %g new links a second from this client address; retry after the Retry-After delay", s.creates.Rate())
		}
	}
	return nil
}

// tooMany is a 429 whose Retry-After is wait in whole seconds, at least 1.
func tooMany(c echo.Context, wait time.Duration, format string, args ...any) error {
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	return refuse(http.StatusTooManyRequests, api.CodeRateLimited, format, args...)
}

// lookupAllowed refuses every lookup (429) from a client address that looked up too many unknown
// codes: hits too, or the refusals would tell codes that exist from codes that do not.
func (s *Service) lookupAllowed(c echo.Context) error {
	if s.misses == nil {
		return nil
	}
	if blocked, wait := s.misses.Empty(clientOf(c)); blocked {
		s.missLimited.Add(1)
		return tooMany(c, wait, "too many lookups of unknown codes from this client address; retry after the Retry-After delay")
	}
	return nil
}

// missed counts a lookup of an unknown code against its client address, and logs the 1st, 2nd, 4th,
// … miss from there.
func (s *Service) missed(c echo.Context, message string) error {
	if s.misses != nil {
		who := clientOf(c)
		if _, _, n := s.misses.Take(who); n&(n-1) == 0 {
			s.logger.Info("lookups of unknown codes", "remote", who, "misses", n)
		}
	}
	return s.linkNotFound(message)
}

func (s *Service) tooManyLinks() error {
	s.overCap.Add(1)
	return refuse(http.StatusInsufficientStorage, CodeTooManyLinks, "the service holds its limit of %d links; no more can be created", s.maxLinks)
}

// codesExhausted refuses a link for want of codes: ticketd has no ID left below the namespace's max_id.
func (s *Service) codesExhausted() error {
	s.exhausted.Add(1)
	s.codesLeft.Store(false)
	return refuse(http.StatusInsufficientStorage, CodeExhausted, "%s; no more links can be created", s.exhaustedCause())
}

func (s *Service) exhaustedCause() string {
	return fmt.Sprintf("every code is taken: ticketd has no link ID left below the namespace's max_id (codes of up to %d characters hold the IDs 1 to %d)",
		s.codec.Length(), s.codec.MaxID())
}

// readLinkRequest reads and checks the body of POST /api/links: {"url":"…"} and nothing else.
func readLinkRequest(c echo.Context) (string, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", refuse(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, "the body must be at most %d bytes", MaxBodyBytes)
		}
		return "", refuse(http.StatusBadRequest, api.CodeInvalidJSON, "the body could not be read: %v", err)
	}
	var req struct {
		URL *string `json:"url"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return "", refuse(http.StatusBadRequest, api.CodeUnknownField, "unknown field %s; the body is {\"url\":\"https://…\"}", field)
		}
		return "", refuse(http.StatusBadRequest, api.CodeInvalidJSON, "the body must be the JSON object {\"url\":\"https://…\"}: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", refuse(http.StatusBadRequest, api.CodeInvalidJSON, "the body must be one JSON object, with nothing after it")
	}
	if req.URL == nil {
		return "", refuse(http.StatusBadRequest, CodeInvalidURL, "the body has no url; send {\"url\":\"https://…\"}")
	}
	target, err := CheckURL(*req.URL)
	if err != nil {
		return "", refuse(http.StatusBadRequest, CodeInvalidURL, "%v", err)
	}
	return target, nil
}

// CheckURL returns raw in normal form (as net/url writes it) if it can be shortened: an http or https
// URL with a host, no user name or password, no spaces or control characters, and at most MaxURLBytes
// long before and after normalisation. Otherwise its error says what is wrong.
func CheckURL(raw string) (string, error) {
	switch {
	case raw == "":
		return "", errors.New("the url is empty")
	case len(raw) > MaxURLBytes:
		return "", fmt.Errorf("the url is %d bytes long; at most %d", len(raw), MaxURLBytes)
	case strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return "", errors.New("the url contains spaces or control characters; percent-encode them (%20)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("the url cannot be parsed: %v", errors.Unwrap(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("only http and https URLs can be shortened, not %q", clip(u.Scheme))
	case u.Hostname() == "":
		return "", errors.New("the url has no host; write it as https://host/path")
	case u.User != nil:
		return "", errors.New("the url must not carry a user name or password")
	}
	norm := u.String()
	if len(norm) > MaxURLBytes {
		return "", fmt.Errorf("the url is %d bytes long once percent-encoded; at most %d", len(norm), MaxURLBytes)
	}
	return norm, nil
}

// redirect: GET /{code}. A malformed code is a 404 like any unknown one: no link can have it.
func (s *Service) redirect(c echo.Context) error {
	if err := s.lookupAllowed(c); err != nil {
		return err
	}
	code := c.Param("code")
	if _, err := s.codec.Decode(code); err != nil {
		return s.missed(c, "no such link: "+trimErr(err))
	}
	target, ok, err := s.links.hit(c.Request().Context(), code)
	if err != nil {
		return unavailable("the link store did not answer; retry", err)
	}
	if !ok {
		return s.missed(c, fmt.Sprintf("no link has the code %q", code))
	}
	s.redirects.Add(1)
	// Not to be cached, so that every visit comes here and is counted.
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Redirect(http.StatusMovedPermanently, target)
}

// getLink: GET /api/links/{code}.
func (s *Service) getLink(c echo.Context) error {
	if err := s.lookupAllowed(c); err != nil {
		return err
	}
	code := c.Param("code")
	if _, err := s.codec.Decode(code); err != nil {
		if s.misses != nil {
			s.misses.Take(clientOf(c))
		}
		return refuse(http.StatusBadRequest, CodeInvalidCode, "%v", trimErr(err))
	}
	l, ok, err := s.links.get(c.Request().Context(), code)
	if err != nil {
		return unavailable("the link store did not answer; retry", err)
	}
	if !ok {
		return s.missed(c, fmt.Sprintf("no link has the code %q", code))
	}
	created := l.Created
	return c.JSON(http.StatusOK, linkJSON{Code: code, ShortURL: s.shortURL(c, code), URL: l.URL, Hits: &l.Hits,
		CreatedAt: &created, ExpiresAt: expiresAt(l)})
}

// expiresAt is a link's expiry on the wire: nil for a link that never expires.
func expiresAt(l link) *time.Time {
	if l.Expires.IsZero() {
		return nil
	}
	t := l.Expires
	return &t
}

// Health is the answer of GET /healthz.
type Health struct {
	// Status is "ok", "degraded" while leases from ticketd fail (links are still served, and created
	// while cached IDs last), or "exhausted" once every code is taken (links are still served; none
	// can be created).
	Status string `json:"status"`
	// Ticketd is "ok", or why the last lease failed.
	Ticketd string `json:"ticketd"`
}

// healthz: GET /healthz, 200 while Redis answers, 503 when it does not. ticketd is not asked (cached IDs
// outlast it), but the last lease's failure is shown: a refused token is otherwise only in the log.
func (s *Service) healthz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.links.rdb.Ping(ctx).Err(); err != nil {
		return unavailable("the link store does not answer", err)
	}
	h := Health{Status: "ok", Ticketd: "ok"}
	err := s.ids.Stats().LastError
	switch {
	case !s.codesLeft.Load() || errors.Is(err, client.ErrExhausted):
		h.Status, h.Ticketd = "exhausted", s.exhaustedCause()
	case err != nil:
		h.Status, h.Ticketd = "degraded", "leases fail: "+TicketdCause(err)
	}
	return c.JSON(http.StatusOK, h)
}

// TicketdCause says in one line why ticketd gave no ID, for answers to the shortener's own callers,
// who may be anyone: ticketd's status and error code when it refused the lease (a wrong token, a
// missing namespace), otherwise that it did not answer. No host name, address or resolver: those stay
// in the log, with the error itself.
func TicketdCause(err error) string {
	var se *client.StatusError
	if errors.As(err, &se) {
		msg := fmt.Sprintf("ticketd answered %d", se.Status)
		if se.Code != "" {
			msg += " " + se.Code
		}
		if se.Message != "" && se.Status < 500 { // a refusal of the request, which names no server
			msg += ": " + se.Message
		}
		if se.Status == http.StatusUnauthorized || se.Status == http.StatusForbidden {
			msg += " (the shortener's --token is not one ticketd accepts for this namespace)"
		}
		return msg
	}
	switch {
	case errors.Is(err, client.ErrNotFound):
		return "the namespace does not exist on ticketd (create it with ticketd namespace create)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrUnavailable):
		return "ticketd did not answer in time; retry"
	}
	return "ticketd did not answer; retry"
}

// CheckScrambleKey says what makes a scramble key too weak to keep links private: it must be
// MinScrambleKeyBytes random bytes or more, written in hex or base64 (standard or URL alphabet, padded
// or not), as openssl rand -hex 32 or openssl rand -base64 32 make; a passphrase is refused, since one
// public code lets an offline search test millions of keys a second. Its messages never contain the
// key.
func CheckScrambleKey(key string) error {
	const how = "make one with: openssl rand -hex 32"
	n, ok := keyBytes(key)
	if !ok {
		return fmt.Errorf("the scramble key must be %d random bytes written in hex or base64, not a passphrase; %s", MinScrambleKeyBytes, how)
	}
	if n < MinScrambleKeyBytes {
		return fmt.Errorf("the scramble key holds %d bytes; it must be at least %d random bytes; %s", n, MinScrambleKeyBytes, how)
	}
	if err := api.CheckToken(key); err != nil {
		return fmt.Errorf("the scramble key: %s", strings.Replace(err.Error(), "a token", "it", 1))
	}
	if bits := api.TokenBits(key); bits < 8*MinScrambleKeyBytes*3/4 {
		return fmt.Errorf("the scramble key does not look random (about %.0f bits of guesswork); %s", bits, how)
	}
	return nil
}

// keyBytes is the number of bytes key holds in hex or base64, and whether it is either.
func keyBytes(key string) (int, bool) {
	if b, err := hex.DecodeString(key); err == nil {
		return len(b), true
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(key); err == nil {
			return len(b), true
		}
	}
	return 0, false
}

func (s *Service) shortURL(c echo.Context, code string) string {
	if s.baseURL != "" {
		return s.baseURL + "/" + code
	}
	return c.Scheme() + "://" + c.Request().Host + "/" + code
}

// apiError is an error answer with its status, code and message.
type apiError struct {
	status        int
	code, message string
	cause         error // logged, not sent
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func refuse(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func unavailable(message string, cause error) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, code: api.CodeUnavailable, message: message, cause: cause}
}

func (s *Service) linkNotFound(message string) *apiError {
	s.notFound.Add(1)
	return &apiError{status: http.StatusNotFound, code: CodeLinkNotFound, message: message}
}

// trimErr drops the package prefix from a sentinel error's message.
func trimErr(err error) string { return strings.TrimPrefix(err.Error(), "shortener: ") }

// handleError is echo's error handler: every error answer is {"error":{"code","message"}}.
func (s *Service) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *apiError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he) && he.Code == http.StatusNotFound:
		ae = &apiError{status: he.Code, code: api.CodeRouteNotFound, message: "no such endpoint: POST /api/links, GET /{code}, GET /api/links/{code}, GET /healthz"}
	case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
		ae = &apiError{status: he.Code, code: api.CodeMethodNotAllowed, message: "method not allowed on this endpoint"}
	default:
		ae = &apiError{status: http.StatusInternalServerError, code: api.CodeInternal, message: "internal error; see the service log", cause: err}
	}
	switch {
	case ae.status >= 500 && ae.status != http.StatusInsufficientStorage: // 507 is a refusal, counted as OverCap or Exhausted
		s.failed.Add(1)
		s.logger.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path,
			"status", ae.status, "code", ae.code, "err", ae.cause)
		if ae.status == http.StatusServiceUnavailable {
			c.Response().Header().Set("Retry-After", "1")
		}
	case ae.status == http.StatusBadRequest || ae.status == http.StatusRequestEntityTooLarge:
		s.refused.Add(1)
	}
	_ = c.JSON(ae.status, api.Error{Error: api.ErrorBody{Code: ae.code, Message: ae.message}})
}
