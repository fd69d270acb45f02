package client

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzServerAnswer feeds arbitrary answers to the two parsers of what a server sends: a lease's 200
// body and an error answer. Neither may panic; a block that passes is valid and of the namespace; an
// error answer always maps to one sentinel error, with a bounded, printable message and Retry-After.
func FuzzServerAnswer(f *testing.F) {
	f.Add(200, "", []byte(`{"namespace":"ns","start":"1001","step":2,"size":1000,"last":"2999","expires_at":null,"server":"a"}`))
	f.Add(200, "", []byte(`{"namespace":"ns","start":"9223372036854775807","step":1,"size":2,"last":"1","expires_at":"2026-01-01T00:00:00Z"}`))
	f.Add(200, "", []byte(`{"namespace":"other","start":"1","step":1,"size":1,"last":"1"}`))
	f.Add(503, "1", []byte(`{"error":{"code":"unavailable","message":"no ticket server usable"}}`))
	f.Add(429, "Wed, 21 Oct 2015 07:28:00 GMT", []byte(`{"error":{"code":"rate_limited","message":"slow down"}}`))
	f.Add(404, "", []byte("<html>not found\x00\x1b[31m</html>"))
	f.Add(400, "-1", []byte(`{"error":{"code":"invalid_size","message":"`+strings.Repeat("é", 400)+`"}}`))
	sentinels := []error{ErrInvalidNamespace, ErrInvalidSize, ErrNotFound,
		ErrExhausted, ErrMisconfigured, ErrServerUnavailable, ErrBadRequest, ErrUnauthorized,
		ErrForbidden, ErrRateLimited, ErrBadResponse}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, status int, retry string, body []byte) {
		if blk, err := parseBlock("http://x", "ns", body); err == nil {
			if blk.validate() != nil || blk.Namespace != "ns" {
				t.Fatalf("accepted %+v", blk)
			}
		} else if !errors.Is(err, ErrBadResponse) {
			t.Fatalf("refused with %v, not ErrBadResponse", err)
		}
		resp := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {retry}}}
		se := statusError("http://x", resp, body, now)
		if se.RetryAfter < 0 || se.RetryAfter > time.Minute {
			t.Fatalf("Retry-After %q gave %s", retry, se.RetryAfter)
		}
		if len(se.Message) > 300+len("…") || len(se.Code) > 64+len("…") || strings.ContainsFunc(se.Message+se.Code, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("message %q, code %q", se.Message, se.Code)
		}
		matched := 0
		for _, s := range sentinels {
			if errors.Is(se, s) {
				matched++
			}
		}
		if matched != 1 {
			t.Fatalf("status %d code %q matches %d sentinel errors", status, se.Code, matched)
		}
		_ = se.Error()
	})
}
