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
)

// MinTokenLength is the shortest token accepted: shorter ones are too easy to guess.
const MinTokenLength = api.MinTokenLength

// NamespaceToken lets its bearer lease from, and read, one namespace.
type NamespaceToken struct {
	Namespace string
	Token     string
}

// Auth says who may call the API. The admin token works on every route; a namespace token only on its
// namespace's lease and read routes. Tokens are compared in constant time and never logged.
type Auth struct {
	// Admin is the admin token; empty means none.
	Admin string
	// Tokens are per-namespace tokens. A namespace may have several (to rotate them).
	Tokens []NamespaceToken
	// Disabled turns authentication off: every caller is admin. For local development only.
	Disabled bool
}

func validToken(tok string) error {
	if len(tok) < MinTokenLength {
		return fmt.Errorf("a token must be at least %d characters", MinTokenLength)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] > '~' || tok[i] == ',' {
			return errors.New("a token must be printable ASCII without spaces or commas")
		}
	}
	return nil
}

// Validate checks the tokens; its messages never contain a token.
func (a Auth) Validate() error {
	if a.Disabled {
		if a.Admin != "" || len(a.Tokens) > 0 {
			return errors.New("authentication is disabled but tokens are configured; give one or the other")
		}
		return nil
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
	if who == "the admin" {
		return "the admin's"
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
	if err := allocator.ValidateName(t.Namespace); err != nil {
		return NamespaceToken{}, err
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

// bearer extracts the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(prefix):])
	return tok, tok != ""
}

// identify authenticates the caller of a /v1 route: 401 without a (known) token.
func (s *Server) identify(c echo.Context) (identity, error) {
	if s.auth.disabled {
		return identity{admin: true, key: "ip:" + c.RealIP()}, nil
	}
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if h == "" {
		return identity{}, errorf(http.StatusUnauthorized, api.CodeMissingToken, `send "Authorization: Bearer TOKEN" with a namespace or admin token`)
	}
	tok, ok := bearer(h)
	if !ok {
		return identity{}, errorf(http.StatusUnauthorized, api.CodeMissingToken, `the Authorization header must be "Bearer TOKEN"`)
	}
	id, ok := s.auth.lookup(tok)
	if !ok {
		return identity{}, errorf(http.StatusUnauthorized, api.CodeInvalidToken, "the token is not one this server accepts")
	}
	return id, nil
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
