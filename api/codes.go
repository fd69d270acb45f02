package api

import (
	"errors"
	"fmt"
	"strings"
)

// Error codes: the "code" of an error answer. Each comes with one HTTP status; a client may switch on
// either. The server's error table is the one place that pairs allocator errors with them.
const (
	CodeInvalidNamespace = "invalid_namespace"      // 400: the name does not match ^[a-z0-9][a-z0-9_.-]{0,63}$
	CodeInvalidSize      = "invalid_size"           // 400: size below 1 or above the namespace's max_block_size
	CodeInvalidCount     = "invalid_count"          // 400: ?count= not a whole number in 1..10000
	CodeInvalidSettings  = "invalid_settings"       // 400: namespace settings out of range
	CodeInvalidJSON      = "invalid_json"           // 400: the body is not the JSON object expected
	CodeUnknownField     = "unknown_field"          // 400: the body has a field the endpoint does not take
	CodeUnknownParameter = "unknown_parameter"      // 400: the query has a parameter the endpoint does not take
	CodeInvalidPrefer    = "invalid_prefer"         // 400: a lease's "Prefer: wait=N" is not whole seconds
	CodeMissingToken     = "missing_token"          // 401: no "Authorization: Bearer TOKEN" header
	CodeInvalidToken     = "invalid_token"          // 401: a token that is not configured
	CodeForbidden        = "forbidden"              // 403: the token is another namespace's, or not the admin's
	CodeForeignHost      = "foreign_host"           // 403 without authentication: the Host is not a loopback name or address
	CodeCrossSite        = "cross_site"             // 403: a state-changing request from a foreign Origin, or one the browser marks cross-site
	CodeNotJSON          = "unsupported_media_type" // 415: a state-changing request not sent as application/json (always without authentication; from a browser with it)
	CodeNotFound         = "namespace_not_found"    // 404
	CodeRouteNotFound    = "route_not_found"        // 404: no such endpoint
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeExists           = "namespace_exists"       // 409
	CodeExhausted        = "id_space_exhausted"     // 409: no ID is left at or below the namespace's max_id
	CodeBodyTooLarge     = "body_too_large"         // 413: the body is over MaxBodyBytes
	CodeRateLimited      = "rate_limited"           // 429: too many requests for this token, or failed logins from this address; see Retry-After
	CodeInternal         = "internal"               // 500
	CodeMisconfigured    = "misconfigured"          // 500: a ticket server's settings could issue duplicates
	CodeUnavailable      = "unavailable"            // 503: no ticket server usable; see Retry-After
	CodeShuttingDown     = "shutting_down"          // 503: the server is stopping; try another replica
	CodeNotReady         = "not_ready"              // 503 from /readyz
)

// Limits of API v1.
const (
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 4 << 10
	// MaxIDsCount bounds GET /v1/namespaces/{ns}/ids?count=N.
	MaxIDsCount = 10_000
	// MinTokenLength is the shortest bearer token a server accepts: shorter ones are too easy to guess.
	MinTokenLength = 16
	// MinTokenDistinct is the fewest distinct characters a token may have: "aaaa…" or "abab…" is long
	// but guessable. (A random token of 16 hex digits has fewer about never.)
	MinTokenDistinct = 5
	// MinTokenBits is the least guesswork a token must hold, as TokenBits estimates it: 16 random hex
	// digits. A wrong token never locks out the right one, so the token itself is the defence against
	// guessing.
	MinTokenBits = 64
)

// CheckToken says what is wrong with a secret given as a bearer token: too short, too few distinct
// characters, a shorter string repeated, or a character that is not printable ASCII, a space or a comma. Its messages never contain
// the token.
func CheckToken(tok string) error {
	if len(tok) < MinTokenLength {
		return fmt.Errorf("a token must be at least %d characters", MinTokenLength)
	}
	var seen [128]bool
	distinct := 0
	for i := 0; i < len(tok); i++ {
		ch := tok[i]
		if ch <= ' ' || ch > '~' || ch == ',' {
			return errors.New("a token must be printable ASCII without spaces or commas")
		}
		if !seen[ch] {
			seen[ch], distinct = true, distinct+1
		}
	}
	if distinct < MinTokenDistinct {
		return fmt.Errorf("a token must have at least %d distinct characters; make one with: openssl rand -hex 32", MinTokenDistinct)
	}
	if p := period(tok); p > 0 {
		return fmt.Errorf("a token must not be a string of %d characters repeated; make one with: openssl rand -hex 32", p)
	}
	if bits := TokenBits(tok); bits < MinTokenBits {
		return fmt.Errorf("a token must be random: this one holds about %.0f bits of guesswork, under %d (words, runs like 1234 and common passwords count for little); make one with: openssl rand -hex 32", bits, MinTokenBits)
	}
	return nil
}

// period returns the length of the shortest string whose repetitions make s ("abcabcab": 3), or 0
// when s repeats none shorter than half of it.
func period(s string) int {
	for p := 1; p <= len(s)/2; p++ {
		if s[p:] == s[:len(s)-p] {
			return p
		}
	}
	return 0
}

// Health is the answer to GET /healthz: status "ok", and for the admin the running build too.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Dirty   *bool  `json:"dirty,omitempty"`
	Go      string `json:"go,omitempty"`
}

// Readiness is the answer to GET /readyz: 200 when at least one ticket server is usable, else 503
// with Error set.
type Readiness struct {
	Ready   bool           `json:"ready"`
	Servers []ServerStatus `json:"servers,omitempty"` // for the admin only
	Error   *ErrorBody     `json:"error,omitempty"`
}

// ServerStatus is one ticket server as /readyz shows it.
type ServerStatus struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	// Fenced means the server answers but its counter is below a peer's water mark (as after a restore
	// from an old backup): it serves nothing until `ticketd repair`.
	Fenced bool `json:"fenced,omitempty"`
	// Reason says why an unhealthy server is out.
	Reason string `json:"reason,omitempty"`
	// Marks says why this process's water marks do not reach the server, when they do not: it serves,
	// but the restored-state guard forgets what this process saw when it stops.
	Marks string `json:"marks,omitempty"`
}

// Bearer extracts the token of an "Authorization: Bearer TOKEN" header; the scheme's case does not
// matter (RFC 9110). ok is false for another scheme or an empty token.
func Bearer(header string) (token string, ok bool) {
	const prefix = "bearer "
	if len(header) <= len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", false
	}
	token = strings.TrimSpace(header[len(prefix):])
	return token, token != ""
}
