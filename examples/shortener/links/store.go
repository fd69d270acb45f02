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
// id, created (RFC 3339, UTC) and hits.
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
	Hits    int64
}

// createScript writes a link unless its key exists, so that a link is never overwritten, and counts it
// in KEYS[2]; with a cap (ARGV[4] > 0) it writes nothing once the count has reached it.
var createScript = goredis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local cap = tonumber(ARGV[4])
if cap > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') >= cap then return -1 end
redis.call('HSET', KEYS[1], 'url', ARGV[1], 'id', ARGV[2], 'created', ARGV[3], 'hits', 0)
redis.call('INCR', KEYS[2])
return 1`)

// errFull means the store holds its cap of links.
var errFull = errors.New("shortener: the cap on links is reached")

// hitScript returns a link's URL and counts the hit, in one round trip; nil for an unknown code (and
// then creates nothing).
var hitScript = goredis.NewScript(`
local url = redis.call('HGET', KEYS[1], 'url')
if url then redis.call('HINCRBY', KEYS[1], 'hits', 1) end
return url`)

func (s *store) key(code string) string { return s.prefix + "link:" + code }

// countKey holds the number of links created.
func (s *store) countKey() string { return s.prefix + "links" }

// create stores l; false when a link with its code exists already, errFull when maxLinks (if
// positive) links exist.
func (s *store) create(ctx context.Context, l link, maxLinks int64) (bool, error) {
	n, err := createScript.Run(ctx, s.rdb, []string{s.key(l.Code), s.countKey()},
		l.URL, strconv.FormatInt(l.ID, 10), l.Created.UTC().Format(time.RFC3339Nano), maxLinks).Int()
	if n == -1 {
		return false, errFull
	}
	return n == 1, err
}

// count returns the number of links created.
func (s *store) count(ctx context.Context) (int64, error) {
	n, err := s.rdb.Get(ctx, s.countKey()).Int64()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	return n, err
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
	}
	if err != nil {
		return link{}, false, fmt.Errorf("link %s is corrupt in Redis: %w", code, err)
	}
	return l, true, nil
}
