package server

import (
	"math"
	"net/http"
	"time"

	"github.com/ticketd/ticketd/api"
)

// checkRate answers 429 with Retry-After once the caller's bucket is empty.
func (s *Server) checkRate(id identity) error {
	ok, wait, _ := s.limiter.Take(id.key)
	if ok {
		return nil
	}
	who := "this token"
	if s.auth.disabled {
		who = "this client address" // without authentication the bucket is the peer's address
	}
	return tooMany(wait, "more than %g requests per second for %s; retry after the Retry-After delay", s.limiter.Rate(), who)
}

// tooMany is a 429 whose Retry-After is wait, in whole seconds rounded up (at least 1).
func tooMany(wait time.Duration, format string, a ...any) error {
	e := errorf(http.StatusTooManyRequests, api.CodeRateLimited, format, a...)
	e.retryAfterSec = max(1, int(math.Ceil(wait.Seconds())))
	return e
}
