package api_test

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
)

func TestBlockRoundTrip(t *testing.T) {
	exp := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	in := allocator.Block{Namespace: "orders", Server: "a", Start: 1001, Step: 2, Size: 1000, ExpiresAt: exp}
	b, err := json.Marshal(api.FromBlock(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"namespace":"orders","start":"1001","step":2,"size":1000,"last":"2999","expires_at":"2026-11-29T12:00:00Z","server":"a"}`
	if string(b) != want {
		t.Fatalf("JSON\n%s\nwant\n%s", b, want)
	}
	var wire api.Block
	if err := json.Unmarshal(b, &wire); err != nil {
		t.Fatal(err)
	}
	out, err := wire.ToBlock()
	if err != nil || out.Start != in.Start || out.Size != in.Size || !out.ExpiresAt.Equal(exp) {
		t.Fatalf("round trip %+v, %v", out, err)
	}
	never, _ := json.Marshal(api.FromBlock(allocator.Block{Namespace: "n", Server: "s", Start: 1, Step: 1, Size: 1}))
	if string(never) != `{"namespace":"n","start":"1","step":1,"size":1,"last":"1","expires_at":null,"server":"s"}` {
		t.Fatalf("a block that never expires: %s", never)
	}
}

func TestToBlockRefusesInconsistentBlocks(t *testing.T) {
	for name, b := range map[string]api.Block{
		"last does not match": {Start: "1", Step: 2, Size: 10, Last: "20"},
		"negative start":      {Start: "-1", Step: 1, Size: 1},
		"start with sign":     {Start: "+1", Step: 1, Size: 1},
		"start too big":       {Start: "9223372036854775808", Step: 1, Size: 1},
		"zero step":           {Start: "1", Step: 0, Size: 1},
		"zero size":           {Start: "1", Step: 1, Size: 0},
		"passes MaxInt64":     {Start: strconv.FormatInt(math.MaxInt64-1, 10), Step: 1, Size: 3},
		"empty start":         {Start: "", Step: 1, Size: 1},
	} {
		if _, err := b.ToBlock(); err == nil {
			t.Errorf("%s: %+v accepted", name, b)
		}
	}
}

// FuzzDecodeBlock feeds arbitrary JSON to the block decoding a client relies on: it never panics, and
// a block it accepts is valid, with every ID inside [Start, MaxInt64].
func FuzzDecodeBlock(f *testing.F) {
	f.Add([]byte(`{"namespace":"orders","start":"1001","step":2,"size":1000,"last":"2999","expires_at":null,"server":"a"}`))
	f.Add([]byte(`{"start":"9223372036854775806","step":1,"size":2,"last":"9223372036854775807"}`))
	f.Add([]byte(`{"start":"1","step":9223372036854775807,"size":2}`))
	f.Add([]byte(`{"start":"01","step":1,"size":1,"expires_at":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var wire api.Block
		if json.Unmarshal(data, &wire) != nil {
			return
		}
		b, err := wire.ToBlock()
		if err != nil {
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("accepted an invalid block %+v: %v", b, err)
		}
		last, err := b.Last()
		if err != nil || last < b.Start {
			t.Fatalf("accepted block %+v wraps: last %d, %v", b, last, err)
		}
	})
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"1", "9223372036854775807", "9223372036854775808", "-1", "+1", " 1", "1e3", "", "00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := api.ParseID(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("ParseID(%q) = %d, negative", s, v)
		}
		if back, _ := strconv.ParseInt(s, 10, 64); back != v {
			t.Fatalf("ParseID(%q) = %d, strconv says %d", s, v, back)
		}
	})
}

// TestIDInARequest: max_id and the like are decimal strings, or JSON numbers only where they are exact.
func TestIDInARequest(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`"9223372036854775807"`, 9223372036854775807, true},
		{`"9007199254740993"`, 9007199254740993, true},
		{`9007199254740991`, 9007199254740991, true},
		{`2147483647`, 2147483647, true},
		{`9007199254740992`, 0, false},
		{`"9223372036854775808"`, 0, false},
		{`1.5`, 0, false},
		{`1e3`, 0, false},
		{`-1`, 0, false},
		{`"-1"`, 0, false},
		{`true`, 0, false},
	} {
		var s api.NamespaceSettings
		err := json.Unmarshal([]byte(`{"max_id":`+tc.in+`}`), &s)
		if tc.ok != (err == nil) || (tc.ok && int64(*s.MaxID) != tc.want) {
			t.Errorf("max_id %s: %v, %v; want %d (ok %v)", tc.in, s.MaxID, err, tc.want, tc.ok)
		}
	}
	b, err := json.Marshal(api.NamespaceSettings{MaxID: new(api.ID(9007199254740993))})
	if err != nil || string(b) != `{"max_id":"9007199254740993"}` {
		t.Fatalf("written as %s, %v", b, err)
	}
}
