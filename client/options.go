package client

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/ticketd/ticketd/internal/backoff"
)

// An Option configures a Client. Values out of range are clamped to the nearest sane value, so every
// combination of options gives a working client; zero or negative values mean the default.
type Option func(*config)

type config struct {
	token          string
	httpClient     *http.Client
	refillInterval time.Duration
	minBlock       int64
	maxBlock       int64
	maxWait        time.Duration
	requestTimeout time.Duration
	backoffMin     time.Duration
	backoffMax     time.Duration
	maxInFlight    int
	hedgeDelay     time.Duration // 0: derived from recent requests
	hooks          Hooks

	clock  clock
	jitter func() float64 // in [0, 1)
	procs  int            // processors the runs are sized for; default GOMAXPROCS
}

// Defaults and bounds of the options.
const (
	DefaultRefillInterval = time.Second
	DefaultMaxWait        = 10 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultBackoffMin     = 50 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
	DefaultMaxInFlight    = 16

	minRefillInterval = 10 * time.Millisecond
	maxRefillInterval = time.Hour
	minWait           = time.Millisecond
	maxWaitLimit      = time.Hour
	minRequestTimeout = 10 * time.Millisecond
	maxRequestTimeout = 5 * time.Minute
	minBackoff        = time.Millisecond
	maxBackoff        = 10 * time.Minute
	maxInFlightLimit  = 64
	minHedgeDelay     = time.Millisecond
)

// WithToken sets the bearer token sent to ticketd servers (the namespace's token or the admin token).
// It is never logged nor put in an error. Only HTTP sources use it.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHTTPClient sets the http.Client of an HTTP source. Default: a client of its own, whose idle
// connections Close closes. A client given here is left open. Its Timeout, if any, applies on top of
// WithRequestTimeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithRefillInterval sets how long a block should last at the observed rate: the next block asks for
// rate × d IDs, within the block size bounds. Default DefaultRefillInterval (1s); clamped to [10ms, 1h].
func WithRefillInterval(d time.Duration) Option { return func(c *config) { c.refillInterval = d } }

// WithMinBlockSize sets the smallest block the client asks for, however low the rate. Default: the
// namespace's block size (what the first lease returns). Clamped to [1, the largest block size].
func WithMinBlockSize(n int64) Option { return func(c *config) { c.minBlock = n } }

// WithMaxBlockSize sets the largest block the client asks for. Default and upper bound: the namespace's
// maximum block size (defaultMaxBlockSize when the source does not say).
func WithMaxBlockSize(n int64) Option { return func(c *config) { c.maxBlock = n } }

// WithMaxWait bounds how long Next and NextN wait for a refill when no ID is cached, whatever the
// context allows; then they return ErrUnavailable. Default DefaultMaxWait (10s); clamped to [1ms, 1h].
func WithMaxWait(d time.Duration) Option { return func(c *config) { c.maxWait = d } }

// WithRequestTimeout bounds one lease request: one attempt on one ticketd URL, or one Lease call on a
// backend. Default DefaultRequestTimeout (5s); clamped to [10ms, 5m].
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// WithBackoff sets how long the client waits before retrying after a failed refill: min after the first
// failure, doubling up to max, each wait jittered to between half and all of it. A server's Retry-After
// lengthens the wait. Default DefaultBackoffMin (50ms) and DefaultBackoffMax (5s); each clamped to
// [1ms, 10m], and max to at least min.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.backoffMin, c.backoffMax = min, max }
}

// WithMaxInFlight bounds the leases a Client has in flight at once. One lease at a time is enough
// while a block covers the IDs taken during a refill; when demand × refill latency is more than the
// largest block the namespace allows, the Client keeps several blocks cached and several leases in
// flight, as many as its low-water mark needs, up to n. Default DefaultMaxInFlight (16); clamped to
// [1, 64].
func WithMaxInFlight(n int) Option { return func(c *config) { c.maxInFlight = n } }

// WithHedgeDelay fixes how long a refill waits for an answer before the client sends a second lease for
// it to another URL (a hedge); the first block to arrive is used. Default: derived from the latencies of
// recent requests, their 95th percentile, at least 20ms (1s until a first request has been
// answered). Clamped to [1ms, half of WithRequestTimeout]. The low-water mark covers the delay: the
// cache holds enough IDs for it at the observed rate. Only an HTTP source of two or more URLs hedges;
// with one URL a refill past the delay is only counted (Stats.SlowRefills).
func WithHedgeDelay(d time.Duration) Option { return func(c *config) { c.hedgeDelay = d } }

// retryPolicy is the backoff WithBackoff configures, after a failed refill and for a failed URL.
func (c config) retryPolicy() backoff.Policy {
	return backoff.Policy{Min: c.backoffMin, Max: c.backoffMax, Jitter: c.jitter}
}

func clampDuration(d, def, lo, hi time.Duration) time.Duration {
	switch {
	case d <= 0:
		return def
	case d < lo:
		return lo
	case d > hi:
		return hi
	}
	return d
}

// withDefaults fills in defaults and clamps every value into its range.
func (c config) withDefaults() config {
	c.refillInterval = clampDuration(c.refillInterval, DefaultRefillInterval, minRefillInterval, maxRefillInterval)
	c.maxWait = clampDuration(c.maxWait, DefaultMaxWait, minWait, maxWaitLimit)
	c.requestTimeout = clampDuration(c.requestTimeout, DefaultRequestTimeout, minRequestTimeout, maxRequestTimeout)
	c.backoffMin = clampDuration(c.backoffMin, DefaultBackoffMin, minBackoff, maxBackoff)
	c.backoffMax = clampDuration(c.backoffMax, DefaultBackoffMax, minBackoff, maxBackoff)
	c.backoffMax = max(c.backoffMax, c.backoffMin)
	if c.hedgeDelay != 0 {
		c.hedgeDelay = clampDuration(c.hedgeDelay, 0, minHedgeDelay, c.requestTimeout/2)
	}
	switch {
	case c.maxInFlight <= 0:
		c.maxInFlight = DefaultMaxInFlight
	case c.maxInFlight > maxInFlightLimit:
		c.maxInFlight = maxInFlightLimit
	}
	if c.minBlock < 0 {
		c.minBlock = 0
	}
	if c.maxBlock < 0 {
		c.maxBlock = 0
	}
	c.minBlock = min(c.minBlock, maxBlockSizeLimit)
	c.maxBlock = min(c.maxBlock, maxBlockSizeLimit)
	if c.minBlock > 0 && c.maxBlock > 0 && c.minBlock > c.maxBlock {
		c.minBlock = c.maxBlock
	}
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.jitter == nil {
		c.jitter = rand.Float64
	}
	return c
}
