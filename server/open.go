package server

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/api"
)

// guardOpen keeps a server without authentication (on loopback, for development) out of reach of the
// web pages its user visits. A page can make the browser send requests to 127.0.0.1, and, by pointing a
// name of its own at 127.0.0.1 (DNS rebinding), read the answers. So, with authentication off:
//   - a request whose Host is not a loopback name or address is refused on every route: a rebound
//     name is not one;
//   - a request that changes state (any method but GET and HEAD, and GET /ids, which hands out IDs)
//     is refused when it carries a foreign Origin, when the browser says it is cross-site
//     (Sec-Fetch-Site; same-site is a page of this machine too), or, for a method with a body, when it is not application/json: a page can send
//     text/plain or a form without asking first, never application/json.
//
// Each refusal is 403 or 415 and reaches no handler, so it changes no counter.
func (s *Server) guardOpen(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !loopbackHost(r.Host) {
			return errorf(http.StatusForbidden, api.CodeForeignHost,
				"without authentication this server answers only requests for a loopback name or address (localhost, 127.0.0.1, [::1]), not %q; configure a token to serve other names", truncate(r.Host, 80))
		}
		if !changesState(c) {
			return next(c)
		}
		if o := r.Header.Get("Origin"); o != "" && !loopbackOrigin(o) {
			return errorf(http.StatusForbidden, api.CodeCrossSite, "without authentication this server refuses requests from web pages of other origins")
		}
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			return errorf(http.StatusForbidden, api.CodeCrossSite, "without authentication this server refuses cross-site requests from web pages")
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
				return errorf(http.StatusUnsupportedMediaType, api.CodeNotJSON, `without authentication, send "Content-Type: application/json" (curl -H 'Content-Type: application/json' …)`)
			}
		}
		return next(c)
	}
}

// changesState reports whether the request may change what the server holds.
func changesState(c echo.Context) bool {
	m := c.Request().Method
	return (m != http.MethodGet && m != http.MethodHead) || c.Path() == "/v1/namespaces/:ns/ids"
}

// loopbackHost reports whether a Host header (name or address, with or without a port) names this
// machine: localhost, a name under .localhost, or a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackOrigin reports whether an Origin header is a page served from this machine.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && loopbackHost(u.Host)
}
