package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ticketd/ticketd/internal/backoff"
)

// HTTP is a Source that leases blocks from ticketd servers at the given base URLs, e.g.
// "http://ticketd-a:8080". Leases go round-robin across the URLs; one that fails (no answer, 5xx, 429)
// is skipped with exponential backoff while the others serve, and is tried again once its backoff has
// passed or when no other answers. An error about the request itself (4xx) is returned at once, since
// every server would give the same answer. With two URLs or more, a lease not answered within the
// hedge delay is sent to another URL too (see WithHedgeDelay); a URL whose request such a hedge
// outpaced is skipped with backoff like one that failed, until it answers again.
func HTTP(urls ...string) Source { return httpSource{urls: slices.Clone(urls)} }

type httpSource struct{ urls []string }

// maxAnswer bounds the body read from a server.
const maxAnswer = 64 << 10

func (s httpSource) open(namespace string, cfg *config) (leaser, error) {
	if len(s.urls) == 0 {
		return nil, errors.New("client: HTTP() needs at least one ticketd base URL")
	}
	h := &httpLeaser{ns: namespace, token: cfg.token, timeout: cfg.requestTimeout, clock: cfg.clock,
		policy: cfg.retryPolicy()}
	if secs := int64(cfg.requestTimeout / 2 / time.Second); secs > 0 {
		// While no ticket server is in rotation, ticketd holds the lease up to half the request
		// timeout and serves it the moment one is back, rather than answer 503 to a client that would
		// then sleep its backoff past that moment.
		h.prefer = "wait=" + strconv.FormatInt(secs, 10)
	}
	if strings.ContainsFunc(cfg.token, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		return nil, errors.New("client: WithToken: the token contains spaces or control characters")
	}
	seen := map[string]bool{}
	for _, raw := range s.urls {
		base, err := parseBase(raw)
		if err != nil {
			return nil, err
		}
		if seen[base] {
			return nil, fmt.Errorf("client: URL %s is listed twice", base)
		}
		seen[base] = true
		h.eps = append(h.eps, &endpoint{base: base})
	}
	h.hc = cfg.httpClient
	if h.hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// A connection for each lease in flight, and one being handed back as the next lease starts:
		// a lease that has to dial first takes one more network round trip, which on a busy process
		// waits for a processor like the answer does.
		t.MaxIdleConnsPerHost = cfg.maxInFlight + 1
		h.hc, h.own = &http.Client{Transport: t}, true
	}
	return h, nil
}

// parseBase checks a ticketd base URL: http or https, a host, no query, fragment or credentials.
func parseBase(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("client: ticketd URL %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("client: ticketd URL %q must start with http:// or https://", raw)
	case u.Host == "":
		return "", fmt.Errorf("client: ticketd URL %q has no host", raw)
	case u.User != nil:
		return "", fmt.Errorf("client: ticketd URL %s must not carry credentials; use WithToken", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("client: ticketd URL %q must be a base URL, without query or fragment", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Endpoint is the health of one ticketd URL as a Client sees it.
type Endpoint struct {
	URL string
	// Healthy is false while the URL is skipped after a failure.
	Healthy bool
	// Failures counts consecutive failed requests (a request that a hedge to another URL outpaced
	// counts as failed); Leases successful ones in all.
	Failures int
	Leases   int64
	// LastError is the last failure, empty once a request succeeds.
	LastError string
}

type endpoint struct {
	base string

	mu      sync.Mutex
	streak  backoff.Streak
	lastErr string
	leases  int64
}

type httpLeaser struct {
	ns, token string
	eps       []*endpoint
	hc        *http.Client
	own       bool
	timeout   time.Duration
	prefer    string // the Prefer header of a lease: "wait=N", or empty
	clock     clock
	policy    backoff.Policy
	next      atomic.Uint64
}

// order returns the endpoints to try: the usable ones in round-robin order, then the ones in backoff,
// soonest first. Only a request that is not a hedge moves the rotation: a hedge that finds its refill
// already settled sends nothing, and would otherwise have taken a URL's turn.
func (h *httpLeaser) order(hedge bool) []*endpoint {
	rotated := backoff.RotateAt(h.eps, h.next.Load())
	if !hedge {
		rotated = backoff.Rotate(h.eps, &h.next)
	}
	return backoff.HealthyFirst(rotated, h.clock.Now(), func(ep *endpoint) time.Time {
		ep.mu.Lock()
		defer ep.mu.Unlock()
		return ep.streak.RetryAt
	})
}

func (h *httpLeaser) paths() int { return len(h.eps) }

// errSettled ends a request whose refill the other request settled, instead of a failover.
var errSettled = errors.New("client: the refill was settled by its other request")

func (h *httpLeaser) lease(ctx context.Context, size int64, r *route, hedge bool) (Block, error) {
	order := h.order(hedge)
	var errs []error
	var exhausted error
	for _, ep := range order {
		if r.settled.Load() {
			return Block{}, errSettled
		}
		if hedge && ep == r.first.Load() {
			// The first request waits there: a hedge that failed over to it would only wait with it
			// (see Client.rehedgeLocked for what comes after a hedge that failed).
			continue
		}
		if !hedge {
			r.first.Store(ep)
		}
		blk, err := h.leaseFrom(ctx, ep, size)
		if err == nil {
			ep.up()
			if first := r.first.Load(); hedge && first != nil && first != ep && !r.settled.Load() {
				// The hedge answered while the first request still waits: skip that URL for a while, as
				// after a failure, rather than send every other refill there to wait for a hedge too.
				err := fmt.Errorf("%s: no answer before a hedge to %s answered", first.base, ep.base)
				first.down(h.clock.Now(), err, h.wait(first))
			}
			return blk, nil
		}
		if ctx.Err() != nil {
			return Block{}, err
		}
		if errors.Is(err, ErrExhausted) {
			// No ID is left below the namespace's ceiling, but another ticketd's segments may still
			// hold the last ones: ask the other URLs before giving up.
			exhausted = err
			continue
		}
		if !retryable(err) {
			return Block{}, err
		}
		ep.down(h.clock.Now(), err, h.wait(ep))
		r.failedOver.Store(true)
		errs = append(errs, err)
	}
	if exhausted != nil {
		return Block{}, exhausted
	}
	if hedge {
		if len(errs) == 0 {
			return Block{}, fmt.Errorf("%w: no ticketd URL to hedge to: the first request waits on the others", ErrServerUnavailable)
		}
		return Block{}, fmt.Errorf("%w: every other ticketd URL failed: %w", ErrServerUnavailable, errors.Join(errs...))
	}
	return Block{}, fmt.Errorf("%w: every ticketd URL failed: %w", ErrServerUnavailable, errors.Join(errs...))
}

// wait is how long ep is skipped after its next failure.
func (h *httpLeaser) wait(ep *endpoint) time.Duration {
	ep.mu.Lock()
	f := ep.streak.Failures
	ep.mu.Unlock()
	return h.policy.Wait(f + 1)
}

func (ep *endpoint) up() {
	ep.mu.Lock()
	ep.streak.Reset()
	ep.lastErr = ""
	ep.leases++
	ep.mu.Unlock()
}

func (ep *endpoint) down(now time.Time, err error, wait time.Duration) {
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > wait {
		wait = se.RetryAfter
	}
	ep.mu.Lock()
	ep.streak.Fail(now, wait)
	ep.lastErr = err.Error()
	ep.mu.Unlock()
}

func (h *httpLeaser) endpoints() []Endpoint {
	now := h.clock.Now()
	out := make([]Endpoint, len(h.eps))
	for i, ep := range h.eps {
		ep.mu.Lock()
		out[i] = Endpoint{URL: ep.base, Healthy: ep.streak.Failures == 0 || ep.streak.Due(now),
			Failures: ep.streak.Failures, Leases: ep.leases, LastError: ep.lastErr}
		ep.mu.Unlock()
	}
	return out
}

func (h *httpLeaser) close() {
	if h.own {
		h.hc.CloseIdleConnections()
	}
}

// do sends one request to ep and reads the answer, at most maxAnswer bytes; an answer other than 200
// is returned as a *StatusError.
func (h *httpLeaser) do(ctx context.Context, ep *endpoint, method, path string, body []byte, prefer string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, ep.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "ticketd-go-client")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ep.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", ep.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(ep.base, resp, data, h.clock.Now())
	}
	return data, nil
}

func (h *httpLeaser) leaseFrom(ctx context.Context, ep *endpoint, size int64) (Block, error) {
	body := []byte("{}")
	if size > 0 {
		body = fmt.Appendf(nil, `{"size":%d}`, size)
	}
	data, err := h.do(ctx, ep, http.MethodPost, "/v1/namespaces/"+h.ns+"/blocks", body, h.prefer)
	if err != nil {
		return Block{}, err
	}
	return parseBlock(ep.base, h.ns, data)
}

// wireBlock is a block as the API carries it: IDs are decimal strings, since they pass 2^53.
type wireBlock struct {
	Namespace string     `json:"namespace"`
	Start     string     `json:"start"`
	Step      int64      `json:"step"`
	Size      int64      `json:"size"`
	Last      string     `json:"last"`
	ExpiresAt *time.Time `json:"expires_at"`
	Server    string     `json:"server"`
}

// wireSettings is the part of a namespace as GET /v1/namespaces/{ns} shows it that a Client reads.
type wireSettings struct {
	BlockSize    int64  `json:"block_size"`
	MaxBlockSize int64  `json:"max_block_size"`
	LeaseTTL     string `json:"lease_ttl"`
}

// wireError is every error answer: {"error":{"code":"…","message":"…"}}.
type wireError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// parseID parses a decimal ID: 1 to 19 digits, no sign, at most the largest int64.
func parseID(s string) (int64, error) {
	if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("ID %q is not 1 to 19 decimal digits", clip(s, 40))
	}
	return strconv.ParseInt(s, 10, 64)
}

// parseBlock decodes a 200 answer to a lease: a valid block of namespace ns, or ErrBadResponse.
func parseBlock(base, ns string, data []byte) (Block, error) {
	var wb wireBlock
	if err := json.Unmarshal(data, &wb); err != nil {
		return Block{}, fmt.Errorf("%w: %s: block is not JSON: %w", ErrBadResponse, base, err)
	}
	start, err := parseID(wb.Start)
	if err != nil {
		return Block{}, fmt.Errorf("%w: %s: block start: %w", ErrBadResponse, base, err)
	}
	blk := Block{Namespace: wb.Namespace, Server: wb.Server, Start: start, Step: wb.Step, Size: wb.Size}
	if wb.ExpiresAt != nil {
		blk.ExpiresAt = *wb.ExpiresAt
	}
	last, ok := blk.last()
	if !ok {
		return Block{}, fmt.Errorf("%w: %s: %w", ErrBadResponse, base, blk.validate())
	}
	if wb.Last != "" && wb.Last != strconv.FormatInt(last, 10) {
		return Block{}, fmt.Errorf("%w: %s: block last %q is not start %d + (%d-1)×%d = %d",
			ErrBadResponse, base, clip(wb.Last, 40), start, blk.Size, blk.Step, last)
	}
	if blk.Namespace != ns {
		return Block{}, fmt.Errorf("%w: %s: asked for a block of %s, got one of %q", ErrBadResponse, base, ns, clip(blk.Namespace, 80))
	}
	return blk, nil
}

func (h *httpLeaser) settings(ctx context.Context) (Settings, error) {
	var errs []error
	for _, ep := range h.order(false) {
		data, err := h.do(ctx, ep, http.MethodGet, "/v1/namespaces/"+h.ns, nil, "")
		if err != nil {
			errs = append(errs, err)
			if retryable(err) {
				continue
			}
			break
		}
		var wn wireSettings
		if err := json.Unmarshal(data, &wn); err != nil {
			return Settings{}, fmt.Errorf("%w: %s: namespace is not JSON: %w", ErrBadResponse, ep.base, err)
		}
		ns := Settings{BlockSize: wn.BlockSize, MaxBlockSize: wn.MaxBlockSize}
		if wn.LeaseTTL != "" {
			ttl, err := time.ParseDuration(wn.LeaseTTL)
			if err != nil || ttl < 0 {
				return Settings{}, fmt.Errorf("%w: %s: lease_ttl %q", ErrBadResponse, ep.base, wn.LeaseTTL)
			}
			ns.LeaseTTL = ttl
		}
		return ns, nil
	}
	return Settings{}, errors.Join(errs...)
}

// StatusError is an answer other than 200 from a ticketd server. It unwraps to the sentinel error of
// its code (see the HTTP API), or of its status when the code is not one of ticketd's, for errors.Is:
//
//	400 invalid_namespace                 ErrInvalidNamespace
//	400 invalid_size                      ErrInvalidSize
//	400, 413 otherwise                    ErrBadRequest
//	401 missing_token, invalid_token      ErrUnauthorized
//	403 forbidden                         ErrForbidden
//	404 namespace_not_found               ErrNotFound
//	409 id_space_exhausted                ErrExhausted
//	429 rate_limited                      ErrRateLimited
//	500 misconfigured                     ErrMisconfigured
//	503 and other 5xx                     ErrServerUnavailable
//	anything else (a proxy, a wrong URL)  ErrBadResponse
type StatusError struct {
	// URL is the base URL of the server that answered.
	URL string
	// Status is the HTTP status; Code and Message come from the {"error":{...}} body, when it has one.
	Status        int
	Code, Message string
	// RetryAfter is the server's Retry-After, zero when it sent none.
	RetryAfter time.Duration
	// Held is how long the server held the request, as the client asked ("Preference-Applied: wait=N"),
	// before it gave this answer: zero when it did not. A lease held while no ticket server was in
	// rotation may be asked again at once.
	Held time.Duration
	err  error
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s answered %d", e.URL, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns the sentinel error of the status (see StatusError).
func (e *StatusError) Unwrap() error { return e.err }

func statusError(base string, resp *http.Response, body []byte, now time.Time) *StatusError {
	e := &StatusError{URL: base, Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now),
		Held: heldFor(resp.Header.Values("Preference-Applied"))}
	var wire wireError
	if json.Unmarshal(body, &wire) == nil && (wire.Error.Code != "" || wire.Error.Message != "") {
		e.Code, e.Message = clip(wire.Error.Code, 64), clip(wire.Error.Message, 300)
	} else if len(body) > 0 {
		e.Message = clip(string(body), 300)
	}
	e.err = sentinelFor(e.Status, e.Code)
	return e
}

// byCode maps the error codes of ticketd's API that a lease may meet to their sentinel errors.
var byCode = map[string]error{
	"invalid_namespace":   ErrInvalidNamespace,
	"invalid_size":        ErrInvalidSize,
	"missing_token":       ErrUnauthorized,
	"invalid_token":       ErrUnauthorized,
	"forbidden":           ErrForbidden,
	"namespace_not_found": ErrNotFound,
	"id_space_exhausted":  ErrExhausted,
	"rate_limited":        ErrRateLimited,
	"misconfigured":       ErrMisconfigured,
	"unavailable":         ErrServerUnavailable,
	"shutting_down":       ErrServerUnavailable,
}

// sentinelFor maps an error answer back to a sentinel error: by ticketd's code, else by status.
func sentinelFor(status int, code string) error {
	if err, ok := byCode[code]; ok {
		return err
	}
	switch {
	case status == http.StatusBadRequest, status == http.StatusRequestEntityTooLarge:
		return ErrBadRequest
	case status == http.StatusUnauthorized:
		return ErrUnauthorized
	case status == http.StatusForbidden:
		return ErrForbidden
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status >= 500:
		return ErrServerUnavailable
	}
	return ErrBadResponse // e.g. 404 route_not_found: this URL is not a ticketd API v1
}

// retryable reports whether another server, or the same one later, may answer differently.
func retryable(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return true // no answer, or an unusable one
	}
	return se.Status >= 500 || se.Status == http.StatusTooManyRequests || se.Status == http.StatusRequestTimeout ||
		errors.Is(se.err, ErrBadResponse)
}

// retryAfter parses a Retry-After header (seconds or an HTTP date), capped at a minute.
// heldFor reads "wait=N" from Preference-Applied headers: how long the server held the request.
func heldFor(lines []string) time.Duration {
	for _, line := range lines {
		for pref := range strings.SplitSeq(line, ",") {
			name, value, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(name, "wait") {
				continue
			}
			if n, err := strconv.ParseInt(strings.Trim(value, `"`), 10, 32); err == nil && n > 0 {
				return time.Duration(n) * time.Second
			}
		}
	}
	return 0
}

func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		d = time.Duration(max(secs, 0)) * time.Second
		if secs > 60 {
			d = time.Minute
		}
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, time.Minute))
}

// clip makes s printable (control characters become spaces, invalid UTF-8 a replacement character) and
// shortens it to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
