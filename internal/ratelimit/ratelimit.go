// Package ratelimit keeps a token bucket per key (a token, a client address) for a bounded number of
// keys. It serves ticketd's request limit, its failed-login limit and the shortener's limit on new links.
package ratelimit

import (
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// DefaultKeys is the number of keys a Limiter tracks when New is given none.
const DefaultKeys = 10_000

// Limiter is a token bucket per key, for at most a fixed number of keys. A new key past that number
// replaces the least recently used one, in constant time: no request ever sweeps the others, and a flood
// of new keys costs each of them the same as one. A forgotten key starts again with a full bucket, as
// an idle one would have. Safe for concurrent use.
type Limiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time
	keys  *lru.Cache[string, *bucket]
}

type bucket struct {
	lim   *rate.Limiter
	taken atomic.Int64 // tokens taken since the key was last forgotten
}

// New returns a Limiter of perSecond tokens per key, up to burst at once (at least 1), tracking at most
// keys keys (DefaultKeys when keys <= 0). now is the clock; nil means time.Now.
func New(perSecond float64, burst, keys int, now func() time.Time) *Limiter {
	if keys <= 0 {
		keys = DefaultKeys
	}
	if now == nil {
		now = time.Now
	}
	c, err := lru.New[string, *bucket](keys)
	if err != nil {
		panic(err) // unreachable: keys is positive
	}
	return &Limiter{rate: rate.Limit(perSecond), burst: max(1, burst), now: now, keys: c}
}

// Rate is the tokens per second of each key.
func (l *Limiter) Rate() float64 { return float64(l.rate) }

// Len is the number of keys tracked now; never more than the limit New was given.
func (l *Limiter) Len() int { return l.keys.Len() }

func (l *Limiter) bucket(key string) *bucket {
	if b, ok := l.keys.Get(key); ok {
		return b
	}
	b := &bucket{lim: rate.NewLimiter(l.rate, l.burst)}
	if prev, ok, _ := l.keys.PeekOrAdd(key, b); ok {
		return prev
	}
	return b
}

// Take takes one token from key's bucket. Without one it takes nothing and says how long to wait for
// one. taken counts the tokens the key took while tracked, this one included.
func (l *Limiter) Take(key string) (ok bool, wait time.Duration, taken int64) {
	b := l.bucket(key)
	now := l.now()
	if wait, ok := reserve(b.lim, now); !ok {
		return false, wait, b.taken.Load()
	}
	return true, 0, b.taken.Add(1)
}

// Empty reports whether key's bucket has no token now, and how long until it has one; it takes nothing,
// and a key it does not track is not empty.
func (l *Limiter) Empty(key string) (bool, time.Duration) {
	b, ok := l.keys.Peek(key)
	if !ok {
		return false, 0
	}
	tokens := b.lim.TokensAt(l.now())
	switch {
	case tokens >= 1:
		return false, 0
	case l.rate <= 0:
		return true, time.Second
	}
	return true, time.Duration((1 - tokens) / float64(l.rate) * float64(time.Second))
}

// reserve takes one token at now, or nothing and the wait for one.
func reserve(lim *rate.Limiter, now time.Time) (time.Duration, bool) {
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return time.Second, false
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}
