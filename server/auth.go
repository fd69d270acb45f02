package server

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/clientip"
)

// MinTokenLength is the shortest token accepted: shorter ones are too easy to guess.
const MinTokenLength = api.MinTokenLength

// NamespaceToken lets its bearer lease from, and read, one namespace.
type NamespaceToken struct {
	Namespace string
	Token     string
}

// Auth says who may call the API. The admin token works on every route; a namespace token only on its
// namespace's lease and read routes; the metrics token only on /metrics. Tokens are compared in constant
// time and never logged.
type Auth struct {
	// Admin is the admin token; empty means none.
	Admin string
	// Tokens are per-namespace tokens. A namespace may have several (to rotate them).
	Tokens []NamespaceToken
	// Metrics is a token for /metrics alone, for a Prometheus scraper; empty means none.
	Metrics string
	// Disabled turns authentication off: every caller is admin. For local development only: the
	// server then answers only requests whose Host is a loopback name or address, and refuses
	// state-changing requests that a web page could send (not application/json, a foreign Origin), so
	// that a site the developer visits cannot drive it.
	Disabled bool
	// AnyHost, with Disabled, answers requests for any Host: the server is open beyond this machine on
	// purpose (ticketd serve --insecure-public-no-auth).
	AnyHost bool
}

func validToken(tok string) error { return api.CheckToken(tok) }

// Validate checks the tokens; its messages never contain a token.
func (a Auth) Validate() error {
	if a.Disabled {
		if a.Admin != "" || len(a.Tokens) > 0 || a.Metrics != "" {
			return errors.New("authentication is disabled but tokens are configured; give one or the other")
		}
		return nil
	}
	if a.AnyHost {
		return errors.New("AnyHost is for a server without authentication; with tokens every Host is answered")
	}
	if a.Admin == "" && len(a.Tokens) == 0 {
		return errors.New("no token configured: give an admin token or namespace tokens, or disable authentication for local development")
	}
	seen := map[[32]byte]string{}
	if a.Admin != "" {
		if err := validToken(a.Admin); err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
		seen[sha256.Sum256([]byte(a.Admin))] = "the admin"
	}
	if a.Metrics != "" {
		if err := validToken(a.Metrics); err != nil {
			return fmt.Errorf("metrics token: %w", err)
		}
		d := sha256.Sum256([]byte(a.Metrics))
		if _, dup := seen[d]; dup {
			return errors.New("the metrics token is also the admin token; give each its own")
		}
		seen[d] = "the metrics"
	}
	for _, t := range a.Tokens {
		if err := allocator.ValidateName(t.Namespace); err != nil {
			return fmt.Errorf("token for %w", err)
		}
		if err := validToken(t.Token); err != nil {
			return fmt.Errorf("token for namespace %q: %w", t.Namespace, err)
		}
		d := sha256.Sum256([]byte(t.Token))
		if other, dup := seen[d]; dup && other != t.Namespace {
			return fmt.Errorf("namespace %q's token is also %s token; give each its own", t.Namespace, possessive(other))
		}
		seen[d] = t.Namespace
	}
	return nil
}

func possessive(who string) string {
	if who == "the admin" || who == "the metrics" {
		return who + "'s"
	}
	return fmt.Sprintf("namespace %q's", who)
}

// ParseTokens parses "ns=token,ns2=token2" (the TICKETD_TOKENS form). Messages never contain a token.
func ParseTokens(list string) ([]NamespaceToken, error) {
	var out []NamespaceToken
	for i, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		t, err := parseToken(item)
		if err != nil {
			return nil, fmt.Errorf("token %d of the list: %w", i+1, err)
		}
		out = append(out, t)
	}
	return out, nil
}

func parseToken(s string) (NamespaceToken, error) {
	ns, tok, ok := strings.Cut(s, "=")
	if !ok {
		return NamespaceToken{}, errors.New("want NAMESPACE=TOKEN")
	}
	t := NamespaceToken{Namespace: strings.TrimSpace(ns), Token: strings.TrimSpace(tok)}
	if allocator.ValidateName(t.Namespace) != nil {
		// Not quoted: a token given without its "NS=" (one with an '=' of its own, as base64 has)
		// would be quoted here as the name.
		return NamespaceToken{}, fmt.Errorf("%w: what stands before '=' is no namespace name (names match ^[a-z0-9][a-z0-9_.-]{0,63}$); want NAMESPACE=TOKEN", allocator.ErrInvalidNamespace)
	}
	if err := validToken(t.Token); err != nil {
		return NamespaceToken{}, err
	}
	return t, nil
}

// ParseTokenFile reads one "namespace=token" a line; blank lines and lines starting with # are skipped.
// Messages never contain a token.
func ParseTokenFile(r io.Reader) ([]NamespaceToken, error) {
	var out []NamespaceToken
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := parseToken(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, t)
	}
	return out, sc.Err()
}

// identity is who a request comes from.
type identity struct {
	admin     bool
	metrics   bool   // the metrics token
	namespace string // for a namespace token
	// key names the caller for rate limiting: "admin", "ns:NAME#i", or "ip:ADDR" without auth.
	key string
}

type credential struct {
	digest [sha256.Size]byte
	id     identity
}

// authenticator checks bearer tokens against SHA-256 digests of the configured ones. Comparing digests
// of fixed length, always against every credential, keeps the time independent of the token given.
type authenticator struct {
	disabled bool
	creds    []credential
}

func newAuthenticator(a Auth) *authenticator {
	out := &authenticator{disabled: a.Disabled}
	if a.Admin != "" {
		out.creds = append(out.creds, credential{digest: sha256.Sum256([]byte(a.Admin)), id: identity{admin: true, key: "admin"}})
	}
	if a.Metrics != "" {
		out.creds = append(out.creds, credential{digest: sha256.Sum256([]byte(a.Metrics)), id: identity{metrics: true, key: "metrics"}})
	}
	for i, t := range a.Tokens {
		out.creds = append(out.creds, credential{digest: sha256.Sum256([]byte(t.Token)),
			id: identity{namespace: t.Namespace, key: fmt.Sprintf("ns:%s#%d", t.Namespace, i)}})
	}
	return out
}

// lookup returns the identity of a token, looking at every credential whatever it finds.
func (a *authenticator) lookup(token string) (identity, bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range a.creds {
		if subtle.ConstantTimeCompare(d[:], a.creds[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return identity{}, false
	}
	return a.creds[found].id, true
}

// identify authenticates the caller of a route that takes a token: 401 without a (known) token. A
// valid token is always let through: a client address that sent too many wrong or malformed tokens
// has its wrong ones answered 429, never its right ones, since a proxy, a NAT or a published port may
// put a guesser and the real client behind one address. Tokens are random enough (CheckToken) that
// guessing them is hopeless; the limit keeps a guesser's noise out of the logs and the ticket servers'
// way.
func (s *Server) identify(c echo.Context) (identity, error) {
	if s.auth.disabled {
		return identity{admin: true, key: "ip:" + clientip.Key(c.RealIP())}, nil
	}
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if h == "" {
		return identity{}, errorf(http.StatusUnauthorized, api.CodeMissingToken, `send "Authorization: Bearer TOKEN" with a namespace or admin token`)
	}
	tok, ok := api.Bearer(h)
	if ok {
		if id, known := s.auth.lookup(tok); known {
			return id, nil
		}
	}
	source := clientip.Key(c.RealIP())
	if blocked, wait := s.failures.Empty(source); blocked {
		s.metrics.observeAuthFailure(true)
		return identity{}, tooMany(wait, "too many requests with a wrong token from this client address; retry after the Retry-After delay")
	}
	if !ok {
		s.failedLogin(c, source, "malformed")
		return identity{}, errorf(http.StatusUnauthorized, api.CodeMissingToken, `the Authorization header must be "Bearer TOKEN"`)
	}
	s.failedLogin(c, source, "unknown token")
	return identity{}, errorf(http.StatusUnauthorized, api.CodeInvalidToken, "the token is not one this server accepts")
}

// failedLogin counts a wrong or malformed token from source, and logs it at the 1st, 2nd, 4th, 8th, …
// failure from that address: enough to see a guesser, never a line per guess. The token is not logged.
func (s *Server) failedLogin(c echo.Context, source, what string) {
	_, _, n := s.failures.Take(source)
	s.metrics.observeAuthFailure(false)
	if n&(n-1) == 0 {
		s.logger.Warn("failed login: "+what, "remote", source, "failures", n, "method", c.Request().Method,
			"route", routeOf(c), "request_id", requestID(c))
	}
}

// authorize allows the admin and the namespace's own tokens.
func authorize(id identity, namespace string) error {
	if id.admin || id.namespace == namespace {
		return nil
	}
	return errorf(http.StatusForbidden, api.CodeForbidden, "this token is not allowed on namespace %q", namespace)
}

// requireAdmin allows the admin only.
func requireAdmin(id identity) error {
	if id.admin {
		return nil
	}
	return errorf(http.StatusForbidden, api.CodeForbidden, "this route needs the admin token")
}
