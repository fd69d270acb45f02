package links

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// store keeps links in Redis: one hash per link, under KeyPrefix + "link:" + code, with the fields url,
// id, created (RFC 3339, UTC), hits and, for a link that expires, expires (and a Redis expiry). The
// links that never expire are counted in KeyPrefix + "links"; those that expire are in the sorted set
// KeyPrefix + "expiring", scored by their expiry in Unix milliseconds, so that the cap counts only
// live ones. Quotas are counters under KeyPrefix + "quota:" + client, which expire with their window.
type store struct {
	rdb    goredis.UniversalClient
	prefix string
}

// link is a stored link.
type link struct {
	Code    string
	URL     string
	ID      int64
	Created time.Time
	Expires time.Time // zero: never
	Hits    int64
}

// createScript writes a link unless its key exists, so that a link is never overwritten, and counts it:
// in KEYS[2] when it never expires, in the sorted set KEYS[3] (scored by its expiry, ARGV[5] in Unix
// ms, with a Redis expiry of ARGV[6] ms) when it does. With a cap (ARGV[4] > 0) it writes nothing once
// the live links (KEYS[2] and the members of KEYS[3] not expired at ARGV[7]) have reached it.
var createScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local cap = tonumber(ARGV[4])
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[7])
  if tonumber(redis.call('GET', KEYS[2]) or '0') + redis.call('ZCARD', KEYS[3]) >= cap then return -1 end
end
redis.call('HSET', KEYS[1], 'url', ARGV[1], 'id', ARGV[2], 'created', ARGV[3], 'hits', 0)
if tonumber(ARGV[6]) > 0 then
  redis.call('HSET', KEYS[1], 'expires', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('ZADD', KEYS[3], ARGV[5], KEYS[1])
else
  redis.call('INCR', KEYS[2])
end
return 1`)

// countScript returns the live links: KEYS[2]'s count and the members of KEYS[3] not expired at
// ARGV[1] (the expired ones are dropped).
var countScript = goredis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
return tonumber(redis.call('GET', KEYS[1]) or '0') + redis.call('ZCARD', KEYS[2])`)

// quotaScript counts one more link in KEYS[1], which expires ARGV[1] ms after its first; it returns the
// count and the milliseconds left of the window.
var quotaScript = goredis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {n, ttl}`)

// errFull means the store holds its cap of links.
var errFull = errors.New("shortener: the cap on links is reached")

// hitScript returns a link's URL and counts the hit, in one round trip; nil for an unknown code (and
// then creates nothing).
var hitScript = goredis.NewScript(`
local url = redis.call('HGET', KEYS[1], 'url')
if url then redis.call('HINCRBY', KEYS[1], 'hits', 1) end
return url`)

func (s *store) key(code string) string { return s.prefix + "link:" + code }

// countKey holds the number of links created that never expire.
func (s *store) countKey() string { return s.prefix + "links" }

// expiringKey is the sorted set of the links that expire.
func (s *store) expiringKey() string { return s.prefix + "expiring" }

// create stores l; false when a link with its code exists already, errFull when maxLinks (if
// positive) live links exist.
func (s *store) create(ctx context.Context, l link, maxLinks int64) (bool, error) {
	var expires, ttl int64
	if !l.Expires.IsZero() {
		expires, ttl = l.Expires.UnixMilli(), max(1, l.Expires.Sub(l.Created).Milliseconds())
	}
	n, err := createScript.Run(ctx, s.rdb, []string{s.key(l.Code), s.countKey(), s.expiringKey()},
		l.URL, strconv.FormatInt(l.ID, 10), l.Created.UTC().Format(time.RFC3339Nano), maxLinks,
		expires, ttl, l.Created.UnixMilli()).Int()
	if n == -1 {
		return false, errFull
	}
	return n == 1, err
}

// count returns the number of live links at now.
func (s *store) count(ctx context.Context, now time.Time) (int64, error) {
	return countScript.Run(ctx, s.rdb, []string{s.countKey(), s.expiringKey()}, now.UnixMilli()).Int64()
}

// takeQuota counts one more link of client in its window, and returns the count so far and the time
// left of the window.
func (s *store) takeQuota(ctx context.Context, client string, window time.Duration) (int64, time.Duration, error) {
	v, err := quotaScript.Run(ctx, s.rdb, []string{s.prefix + "quota:" + client}, window.Milliseconds()).Int64Slice()
	if err != nil || len(v) != 2 {
		return 0, 0, fmt.Errorf("quota of %s: %v %w", client, v, err)
	}
	return v[0], time.Duration(v[1]) * time.Millisecond, nil
}

// hit returns the URL of code and counts one hit; ok is false for an unknown code.
func (s *store) hit(ctx context.Context, code string) (url string, ok bool, err error) {
	url, err = hitScript.Run(ctx, s.rdb, []string{s.key(code)}).Text()
	if errors.Is(err, goredis.Nil) {
		return "", false, nil
	}
	return url, err == nil, err
}

// get returns the link of code; ok is false for an unknown code.
func (s *store) get(ctx context.Context, code string) (l link, ok bool, err error) {
	m, err := s.rdb.HGetAll(ctx, s.key(code)).Result()
	if err != nil || len(m) == 0 {
		return link{}, false, err
	}
	l = link{Code: code, URL: m["url"]}
	if l.ID, err = strconv.ParseInt(m["id"], 10, 64); err == nil {
		if l.Hits, err = strconv.ParseInt(m["hits"], 10, 64); err == nil {
			l.Created, err = time.Parse(time.RFC3339Nano, m["created"])
		}
		if ms, perr := strconv.ParseInt(m["expires"], 10, 64); err == nil && perr == nil {
			l.Expires = time.UnixMilli(ms).UTC()
		}
	}
	if err != nil {
		return link{}, false, fmt.Errorf("link %s is corrupt in Redis: %w", code, err)
	}
	return l, true, nil
}
