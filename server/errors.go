package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
)

// errorRow pairs an allocator sentinel error with its HTTP status, code and advice.
type errorRow struct {
	err    error
	status int
	code   string
	advice string
}

// errorTable is the one place where allocator errors become HTTP statuses. Order matters, because
// errors.Is sees through errors.Join and %w: the pair wraps every server's error into ErrUnavailable,
// so an unavailable error may also match ErrExhausted (one server exhausted, the other down) or
// ErrMisconfigured. Such a request may succeed later, so ErrUnavailable comes first and wins: 503, not
// 409. ErrExhausted alone (every server exhausted) is final: 409.
var errorTable = []errorRow{
	{allocator.ErrUnavailable, http.StatusServiceUnavailable, api.CodeUnavailable,
		"no ticket server is usable right now; retry after the Retry-After delay"},
	{allocator.ErrClosed, http.StatusServiceUnavailable, api.CodeShuttingDown,
		"this ticketd is shutting down; retry, another replica will answer"},
	{allocator.ErrInvalidNamespace, http.StatusBadRequest, api.CodeInvalidNamespace, ""}, // its message says what to do
	{allocator.ErrInvalidSize, http.StatusBadRequest, api.CodeInvalidSize,
		"ask for a size between 1 and the namespace's max_block_size (see GET /v1/namespaces/{ns})"},
	{allocator.ErrInvalidSettings, http.StatusBadRequest, api.CodeInvalidSettings,
		"fix the setting named above"},
	{allocator.ErrNotFound, http.StatusNotFound, api.CodeNotFound,
		"create it with PUT /v1/namespaces/{ns} (admin token)"},
	{allocator.ErrExists, http.StatusConflict, api.CodeExists,
		"the namespace exists; change its settings with PUT /v1/namespaces/{ns}"},
	{allocator.ErrExhausted, http.StatusConflict, api.CodeExhausted,
		"the namespace's IDs would pass 2^63-1; use another namespace"},
	{allocator.ErrMisconfigured, http.StatusInternalServerError, api.CodeMisconfigured,
		"a ticket server's settings could issue duplicate IDs and it was refused; the operator must fix it (see the server log)"},
}

// httpError is an error of the HTTP layer (auth, parsing, limits) that carries its own answer.
type httpError struct {
	status  int
	code    string
	message string
	// retryAfter, when positive, is sent as Retry-After (whole seconds, rounded up).
	retryAfterSec int
}

func (e *httpError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, a ...any) *httpError {
	return &httpError{status: status, code: code, message: fmt.Sprintf(format, a...)}
}

// answer is what an error becomes on the wire.
type answer struct {
	status        int
	code          string
	message       string
	retryAfterSec int
	// internal marks a server-side failure: the detail is logged, not sent.
	internal bool
}

// classify turns any error into its answer.
func classify(err error) answer {
	var he *httpError
	if errors.As(err, &he) {
		return answer{status: he.status, code: he.code, message: he.message, retryAfterSec: he.retryAfterSec}
	}
	var ee *echo.HTTPError
	if errors.As(err, &ee) {
		switch ee.Code {
		case http.StatusNotFound:
			return answer{status: ee.Code, code: api.CodeRouteNotFound, message: "no such endpoint; see GET /openapi.json"}
		case http.StatusMethodNotAllowed:
			return answer{status: ee.Code, code: api.CodeMethodNotAllowed, message: "method not allowed on this endpoint; see GET /openapi.json"}
		case http.StatusRequestEntityTooLarge:
			return answer{status: ee.Code, code: api.CodeBodyTooLarge, message: fmt.Sprintf("the body must be at most %d bytes", api.MaxBodyBytes)}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller went away or the backend took too long: nothing for the operator to fix here.
		return answer{status: http.StatusServiceUnavailable, code: api.CodeUnavailable, retryAfterSec: 1,
			message: "the request was cancelled or timed out before a ticket server answered; retry"}
	}
	for _, row := range errorTable {
		if !errors.Is(err, row.err) {
			continue
		}
		a := answer{status: row.status, code: row.code}
		if row.status >= 500 {
			a.message, a.internal = row.advice, true
			if row.status == http.StatusServiceUnavailable {
				a.retryAfterSec = 1
			}
		} else {
			a.message = strings.TrimPrefix(err.Error(), "allocator: ")
			if row.advice != "" {
				a.message += "; " + row.advice
			}
		}
		return a
	}
	return answer{status: http.StatusInternalServerError, code: api.CodeInternal,
		message: "internal error; the server log has the detail under this request's ID", internal: true}
}

// handleError is echo's HTTPErrorHandler: every error answer is {"error":{"code","message"}}.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	a := classify(err)
	id := requestID(c)
	if a.internal {
		s.logger.Error("request failed", "request_id", id, "method", c.Request().Method, "route", routeOf(c),
			"status", a.status, "err", err)
		if id != "" {
			a.message += " (request id " + id + ")"
		}
	}
	h := c.Response().Header()
	var held *heldError
	if errors.As(err, &held) {
		// The client asked to wait and has: it may ask again at once.
		a.retryAfterSec = 0
		h.Set("Preference-Applied", "wait="+strconv.Itoa(int(held.wait/time.Second)))
	}
	if a.retryAfterSec > 0 {
		h.Set("Retry-After", strconv.Itoa(a.retryAfterSec))
	}
	if a.status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="ticketd"`)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(a.status)
		return
	}
	_ = c.JSON(a.status, api.Error{Error: api.ErrorBody{Code: a.code, Message: a.message}})
}
