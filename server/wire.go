package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
)

func bodyTooLarge() error {
	return errorf(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, "the body must be at most %d bytes", api.MaxBodyBytes)
}

// readBody appends a request body of at most api.MaxBodyBytes to buf.
func readBody(r *http.Request, buf []byte) ([]byte, error) {
	if r.ContentLength > api.MaxBodyBytes {
		return buf, bodyTooLarge()
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):min(cap(buf), api.MaxBodyBytes+1)])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > api.MaxBodyBytes:
			return buf, bodyTooLarge()
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, errorf(http.StatusBadRequest, api.CodeInvalidJSON, "could not read the body: %v", err)
		}
	}
}

// readJSON decodes one JSON object into v, refusing unknown fields and trailing data. An empty body
// leaves v as it is.
func readJSON(r *http.Request, v any) error {
	body, err := readBody(r, nil)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return errorf(http.StatusBadRequest, api.CodeUnknownField, "unknown field %s; see GET /openapi.json", truncate(f, 80))
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return errorf(http.StatusBadRequest, api.CodeInvalidJSON, "field %q must be a JSON %s", te.Field, jsonKind(te.Type.String()))
		}
		return errorf(http.StatusBadRequest, api.CodeInvalidJSON, "the body is not valid JSON: %s", truncate(err.Error(), 120))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, api.CodeInvalidJSON, "the body must hold one JSON object and nothing after it")
	}
	return nil
}

func jsonKind(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "whole number"
	case strings.Contains(goType, "string"):
		return "string"
	}
	return "object"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// readBlockRequest parses the body of POST /v1/namespaces/{ns}/blocks: the size, 0 when left out.
func readBlockRequest(r *http.Request) (int64, error) {
	buf := bufPool.Get().(*[]byte)
	body, err := readBody(r, (*buf)[:0])
	defer func() {
		*buf = body[:0]
		bufPool.Put(buf)
	}()
	if err != nil {
		return 0, err
	}
	if size, ok := quickSize(body); ok {
		return size, checkSize(size)
	}
	var req api.BlockRequest
	if err := decodeJSON(body, &req); err != nil {
		return 0, err
	}
	if req.Size == nil {
		return 0, nil
	}
	return *req.Size, checkSize(*req.Size)
}

// quickSize parses the commonest body, {"size":N} with N of 1 to 10 digits and no spaces, without
// the reflection of encoding/json; anything else is left to the decoder.
func quickSize(b []byte) (int64, bool) {
	const pre = `{"size":`
	if len(b) < len(pre)+2 || len(b) > len(pre)+11 || string(b[:len(pre)]) != pre || b[len(b)-1] != '}' {
		return 0, false
	}
	digits := b[len(pre) : len(b)-1]
	if digits[0] == '0' {
		return 0, false
	}
	var n int64
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

func checkSize(size int64) error {
	if size < 1 || size > allocator.MaxBlockSizeLimit {
		return errorf(http.StatusBadRequest, api.CodeInvalidSize, "size %d must be between 1 and the namespace's max_block_size (at most %d); leave it out for the namespace's block size",
			size, int64(allocator.MaxBlockSizeLimit))
	}
	return nil
}

// readCount parses the query of GET /v1/namespaces/{ns}/ids: count, 1 to api.MaxIDsCount, default 1.
func readCount(q url.Values) (int64, error) {
	for k := range q {
		if k != "count" {
			return 0, errorf(http.StatusBadRequest, api.CodeUnknownParameter, "unknown query parameter %q; only count is taken", truncate(k, 40))
		}
	}
	vs, ok := q["count"]
	if !ok {
		return 1, nil
	}
	bad := errorf(http.StatusBadRequest, api.CodeInvalidCount, "count must be one whole number from 1 to %d", api.MaxIDsCount)
	if len(vs) != 1 || len(vs[0]) == 0 || len(vs[0]) > 5 {
		return 0, bad
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	if err != nil || vs[0][0] == '+' || n < 1 || n > api.MaxIDsCount {
		return 0, bad
	}
	return n, nil
}

// settings are the fields a PUT gave.
type settings struct {
	blockSize, maxBlockSize *int64
	ttl                     *time.Duration
	start                   int64 // 0: not given
	maxID                   *int64
}

func parseSettings(b api.NamespaceSettings) (settings, error) {
	s := settings{blockSize: b.BlockSize, maxBlockSize: b.MaxBlockSize}
	if b.LeaseTTL != nil {
		d, err := time.ParseDuration(*b.LeaseTTL)
		if err != nil {
			return settings{}, errorf(http.StatusBadRequest, api.CodeInvalidSettings, `lease_ttl %q must be a duration such as "10m" or "0s" (never expires)`, truncate(*b.LeaseTTL, 40))
		}
		s.ttl = &d
	}
	if b.Start != nil {
		v, err := api.ParseID(*b.Start)
		if err != nil {
			return settings{}, errorf(http.StatusBadRequest, api.CodeInvalidSettings, "start: %v", err)
		}
		s.start = v
	}
	if b.MaxID != nil {
		v := int64(*b.MaxID)
		if v < 1 {
			return settings{}, errorf(http.StatusBadRequest, api.CodeInvalidSettings, "max_id must be 1 or more")
		}
		s.maxID = &v
	}
	return s, nil
}

// apply overlays the given fields on ns. Start is the value at create and the value counters are
// advanced to at update.
func (s settings) apply(ns allocator.Namespace) allocator.Namespace {
	if s.blockSize != nil {
		ns.BlockSize = *s.blockSize
	}
	if s.maxBlockSize != nil {
		ns.MaxBlockSize = *s.maxBlockSize
	}
	if s.ttl != nil {
		ns.LeaseTTL = *s.ttl
	}
	if s.maxID != nil {
		ns.MaxID = *s.maxID
	}
	ns.Start = s.start
	return ns
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeJSON answers 200 with the JSON that appendTo writes, and a newline as every JSON answer ends
// with, in a pooled buffer.
func writeJSON(c echo.Context, appendTo func([]byte) []byte) error {
	buf := bufPool.Get().(*[]byte)
	*buf = append(appendTo((*buf)[:0]), '\n')
	err := c.JSONBlob(http.StatusOK, *buf)
	if cap(*buf) <= 64<<10 { // a large ID list is not kept
		bufPool.Put(buf)
	}
	return err
}

// appendBlock writes b as api.Block's JSON, byte for byte what encoding/json writes for
// api.FromBlock(b), without reflection (a test holds them equal).
func appendBlock(buf []byte, b allocator.Block) []byte {
	last, _ := b.Last()
	buf = append(buf, `{"namespace":`...)
	buf = appendString(buf, b.Namespace)
	buf = append(buf, `,"start":"`...)
	buf = strconv.AppendInt(buf, b.Start, 10)
	buf = append(buf, `","step":`...)
	buf = strconv.AppendInt(buf, b.Step, 10)
	buf = append(buf, `,"size":`...)
	buf = strconv.AppendInt(buf, b.Size, 10)
	buf = append(buf, `,"last":"`...)
	buf = strconv.AppendInt(buf, last, 10)
	buf = append(buf, `","expires_at":`...)
	if b.ExpiresAt.IsZero() {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '"')
		buf = b.ExpiresAt.UTC().AppendFormat(buf, time.RFC3339Nano)
		buf = append(buf, '"')
	}
	buf = append(buf, `,"server":`...)
	buf = appendString(buf, b.Server)
	return append(buf, '}')
}

// appendIDs writes the block's IDs as api.IDs' JSON.
func appendIDs(buf []byte, b allocator.Block) []byte {
	buf = append(buf, `{"namespace":`...)
	buf = appendString(buf, b.Namespace)
	buf = append(buf, `,"ids":[`...)
	for k := int64(0); k < b.Size; k++ {
		if k > 0 {
			buf = append(buf, ',')
		}
		id, _ := b.ID(k)
		buf = append(buf, '"')
		buf = strconv.AppendInt(buf, id, 10)
		buf = append(buf, '"')
	}
	return append(buf, "]}"...)
}

// appendString writes s as a JSON string; plain ASCII directly, anything else through encoding/json
// so the escaping stays exactly its own.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
