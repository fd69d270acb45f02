// Package api defines ticketd's wire format (HTTP API v1, and the CLI's JSON output): the JSON shapes
// of blocks, ID lists, namespace settings and errors. IDs travel as decimal strings, because they pass
// 2^53 and JSON numbers do not hold them in every language.
package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Block is a leased block: IDs start + k*step for k in [0, size).
type Block struct {
	Namespace string     `json:"namespace"`
	Start     string     `json:"start"`
	Step      int64      `json:"step"`
	Size      int64      `json:"size"`
	Last      string     `json:"last"`
	ExpiresAt *time.Time `json:"expires_at"`
	Server    string     `json:"server"`
}

// FromBlock converts a block to its wire form.
func FromBlock(b allocator.Block) Block {
	last, _ := b.Last()
	out := Block{Namespace: b.Namespace, Start: strconv.FormatInt(b.Start, 10), Step: b.Step, Size: b.Size,
		Last: strconv.FormatInt(last, 10), Server: b.Server}
	if !b.ExpiresAt.IsZero() {
		t := b.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	return out
}

// ToBlock parses and checks a wire block: start, step and size must be positive, the last ID must fit in
// an int64 and equal start + (size-1)*step.
func (b Block) ToBlock() (allocator.Block, error) {
	start, err := ParseID(b.Start)
	if err != nil {
		return allocator.Block{}, fmt.Errorf("block start: %w", err)
	}
	out := allocator.Block{Namespace: b.Namespace, Server: b.Server, Start: start, Step: b.Step, Size: b.Size}
	if b.ExpiresAt != nil {
		out.ExpiresAt = *b.ExpiresAt
	}
	if err := out.Validate(); err != nil {
		return allocator.Block{}, err
	}
	last, _ := out.Last()
	if b.Last != "" && b.Last != strconv.FormatInt(last, 10) {
		return allocator.Block{}, fmt.Errorf("block last %q does not match start %s + (%d-1)×%d = %d", b.Last, b.Start, b.Size, b.Step, last)
	}
	return out, nil
}

// ParseID parses a decimal ID string: 1 to 19 digits, no sign, no spaces, at most MaxInt64.
func ParseID(s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, fmt.Errorf("ID %q must be 1 to 19 decimal digits", truncate(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("ID %q must be decimal digits only", truncate(s))
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ID %q is above 9223372036854775807", truncate(s))
	}
	return v, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// IDs is the answer to GET /v1/namespaces/{ns}/ids.
type IDs struct {
	Namespace string   `json:"namespace"`
	IDs       []string `json:"ids"`
}

// BlockRequest is the body of POST /v1/namespaces/{ns}/blocks. A missing size means the namespace's
// block size.
type BlockRequest struct {
	Size *int64 `json:"size,omitempty"`
}

// NamespaceSettings is the body of PUT /v1/namespaces/{ns}. Missing fields keep their current value on
// update and take their default on create.
type NamespaceSettings struct {
	BlockSize    *int64  `json:"block_size,omitempty"`
	MaxBlockSize *int64  `json:"max_block_size,omitempty"`
	LeaseTTL     *string `json:"lease_ttl,omitempty"` // a Go duration, e.g. "10m"; "0s" means never
	Start        *string `json:"start,omitempty"`     // decimal ID
	MaxID        *ID     `json:"max_id,omitempty"`    // the ceiling, inclusive
}

// ID is an ID in a request body: a decimal string like every ID of the API, or a JSON number below 2^53
// (beyond it a JSON number is not exact in every language, and is refused). It is written as a string.
type ID int64

// MaxJSONNumber is the largest ID taken as a JSON number: 2^53-1.
const MaxJSONNumber = 1<<53 - 1

// UnmarshalJSON reads a decimal string or a whole JSON number from 0 to MaxJSONNumber.
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := ParseID(s)
		if err != nil {
			return err
		}
		*id = ID(v)
		return nil
	}
	v, err := ParseID(string(b))
	if err != nil || v > MaxJSONNumber {
		return fmt.Errorf("ID %s must be a decimal string, or a whole JSON number up to %d", truncate(string(b)), int64(MaxJSONNumber))
	}
	*id = ID(v)
	return nil
}

// MarshalJSON writes the ID as a decimal string.
func (id ID) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, strconv.FormatInt(int64(id), 10)), nil
}

// Namespace is a namespace as GET /v1/namespaces/{ns} shows it.
type Namespace struct {
	Name         string `json:"name"`
	BlockSize    int64  `json:"block_size"`
	MaxBlockSize int64  `json:"max_block_size"`
	LeaseTTL     string `json:"lease_ttl"`
	Start        string `json:"start"`
	MaxID        string `json:"max_id"`
	// IDsRemaining is how many IDs the servers may still issue at or below max_id (a decimal string:
	// it passes 2^53), summed over the servers whose counter was read; null when none was.
	IDsRemaining *string `json:"ids_remaining"`
	// ExhaustsAt is when the namespace reaches max_id at the last hour's issue rate; null when that rate
	// is zero (or not known yet) or the date is past the year 9999.
	ExhaustsAt *time.Time `json:"exhausts_at"`
	// StaleCounters are the servers that could not be read: ids_remaining counts each at the counter it
	// was last read at, when. Left out when every server was read.
	StaleCounters []StaleCounter          `json:"stale_counters,omitempty"`
	Servers       []allocator.ServerState `json:"servers"`
}

// StaleCounter is a ticket server whose counter could not be read, counted at the one last read.
type StaleCounter struct {
	Server string    `json:"server"`
	SeenAt time.Time `json:"seen_at"`
}

// FromNamespace converts a namespace to its wire form; ExhaustsAt is left for the caller, who knows
// the issue rate.
func FromNamespace(ns allocator.Namespace) Namespace {
	servers := ns.Servers
	if servers == nil {
		servers = []allocator.ServerState{}
	}
	out := Namespace{Name: ns.Name, BlockSize: ns.BlockSize, MaxBlockSize: ns.MaxBlockSize,
		LeaseTTL: ns.LeaseTTL.String(), Start: strconv.FormatInt(ns.Start, 10),
		MaxID: strconv.FormatInt(ns.WithDefaults().MaxID, 10), Servers: servers}
	if left, ok := ns.IDsRemaining(); ok {
		s := strconv.FormatUint(left, 10)
		out.IDsRemaining = &s
	}
	return out
}

// Namespaces is the answer to GET /v1/namespaces.
type Namespaces struct {
	Namespaces []Namespace `json:"namespaces"`
}

// Error is every error answer: {"error":{"code":"…","message":"…"}}.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody holds a snake_case code and a message that says what to do.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
