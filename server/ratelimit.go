package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/ticketd/ticketd/api"
)

// maxLimiters bounds the callers tracked at once; past it, idle ones are forgotten.
const maxLimiters = 10_000

// limiter is a token bucket per caller (per token; per client address without auth). Safe for
// concurrent use.
type limiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	lim      *rate.Limiter
	lastSeen time.Time
}

func newLimiter(perSecond float64, burst int, now func() time.Time) *limiter {
	return &limiter{rate: rate.Limit(perSecond), burst: burst, now: now, buckets: map[string]*bucket{}}
}

// allow takes one request from key's bucket, or says how long to wait for one.
func (l *limiter) allow(key string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxLimiters {
			l.sweepLocked(now)
		}
		b = &bucket{lim: rate.NewLimiter(l.rate, l.burst)}
		l.buckets[key] = b
	}
	b.lastSeen = now
	l.mu.Unlock()
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweepLocked forgets buckets idle long enough to be full again.
func (l *limiter) sweepLocked(now time.Time) {
	idle := time.Minute
	if l.rate > 0 {
		idle = max(idle, time.Duration(float64(l.burst)/float64(l.rate)*float64(time.Second)))
	}
	for k, b := range l.buckets {
		if now.Sub(b.lastSeen) > idle {
			delete(l.buckets, k)
		}
	}
}

// checkRate answers 429 with Retry-After once the caller's bucket is empty.
func (s *Server) checkRate(id identity) error {
	ok, wait := s.limiter.allow(id.key)
	if ok {
		return nil
	}
	who := "this token"
	if s.auth.disabled {
		who = "this client address" // without authentication the bucket is the peer's address
	}
	e := errorf(http.StatusTooManyRequests, api.CodeRateLimited,
		"more than %g requests per second for %s; retry after the Retry-After delay", float64(s.limiter.rate), who)
	e.retryAfterSec = int(math.Ceil(wait.Seconds()))
	return e
}
