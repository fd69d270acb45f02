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
// name of its own at 127.0.0.1 (DNS rebinding), read the answers. So, with authentication off, a
// request whose Host is not a loopback name or address is refused on every route: a rebound name is
// not one. guardCrossSite then applies, as in every mode.
func (s *Server) guardOpen(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !loopbackHost(r.Host) {
			return errorf(http.StatusForbidden, api.CodeForeignHost,
				"without authentication this server answers only requests for a loopback name or address (localhost, 127.0.0.1, [::1]), not %q; configure a token to serve other names", truncate(r.Host, 80))
		}
		return next(c)
	}
}

// guardCrossSite refuses, in every mode, a request that changes state (any method but GET and HEAD,
// and GET /ids, which hands out IDs) when a web page may have sent it: ticketd serves no page that
// changes anything, and answers no CORS preflight. Refused are a request
//   - with an Origin that is not this server's own (with authentication off: not a loopback page);
//   - that the browser marks cross-site (Sec-Fetch-Site; with authentication on, same-site too: a
//     sibling name may be anyone's; with it off, same-site is a page of this machine);
//   - with a body that is not application/json, which a page can send without asking first (a form,
//     text/plain): always with authentication off; with it on, when a browser sent it (an Origin or
//     a Sec-Fetch-Site header), so that curl -d with a token keeps working.
//
// Each refusal is 403 or 415 and reaches no handler, so it changes no counter.
func (s *Server) guardCrossSite(next echo.HandlerFunc) echo.HandlerFunc {
	open := s.auth.disabled
	return func(c echo.Context) error {
		if !changesState(c) {
			return next(c)
		}
		r := c.Request()
		origin, site := r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site")
		if origin != "" && !(open && loopbackOrigin(origin)) && !sameOrigin(origin, r) {
			return errorf(http.StatusForbidden, api.CodeCrossSite, "this server refuses state-changing requests from web pages of other origins")
		}
		if site == "cross-site" || (!open && site == "same-site") {
			return errorf(http.StatusForbidden, api.CodeCrossSite, "this server refuses state-changing requests that the browser marks %s", site)
		}
		browser := origin != "" || site != ""
		if r.Method != http.MethodGet && r.Method != http.MethodHead && (open || browser) {
			if mt, _, err := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); err != nil || mt != echo.MIMEApplicationJSON {
				return errorf(http.StatusUnsupportedMediaType, api.CodeNotJSON, `send "Content-Type: application/json" (curl -H 'Content-Type: application/json' …)`)
			}
		}
		return next(c)
	}
}

// sameOrigin reports whether origin is a page of the host the request was sent to.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(withPort(u.Host, u.Scheme), withPort(r.Host, u.Scheme))
}

// withPort adds the scheme's default port to a host that has none.
func withPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "https" {
		return net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
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
