package links

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func codecs() map[string]*Codec {
	return map[string]*Codec{"plain": PlainCodec(), "scrambled": NewCodec(knownKey), "other-key": NewCodec("another key")}
}

// edgeIDs are the IDs around every boundary the code path has: base-62 lengths, the Feistel halves, the
// top of the domain.
func edgeIDs() []int64 {
	ids := []int64{1, 2, 3, math.MaxInt64, math.MaxInt64 - 1, 1 << 62, 1<<62 - 1, 1 << 32, 1<<32 - 1, 1<<32 + 1, 1 << 31}
	p := int64(1)
	for range MaxCodeLen - 1 {
		p *= 62
		ids = append(ids, p-1, p, p+1)
	}
	return ids
}

func TestPlainCodes(t *testing.T) {
	c := PlainCodec()
	for _, tc := range []struct {
		id   int64
		code string
	}{
		{1, "1"}, {9, "9"}, {10, "A"}, {35, "Z"}, {36, "a"}, {61, "z"}, {62, "10"}, {3843, "zz"}, {3844, "100"},
		{math.MaxInt64, "AzL8n0Y58m7"},
	} {
		code, err := c.Encode(tc.id)
		if err != nil || code != tc.code {
			t.Errorf("Encode(%d) = %q, %v; want %q", tc.id, code, err, tc.code)
		}
		id, err := c.Decode(tc.code)
		if err != nil || id != tc.id {
			t.Errorf("Decode(%q) = %d, %v; want %d", tc.code, id, err, tc.id)
		}
	}
}

// knownKey is the key of the pinned codes below (the key once built in, and public).
const knownKey = "ticketd-shortener-default-key"

// TestKnownCodes pins the scramble: a change to it would let new links take the codes of old ones
// (which the store refuses, at the cost of extra IDs), so it must not change by accident.
func TestKnownCodes(t *testing.T) {
	for _, tc := range []struct {
		key  string
		id   int64
		code string
	}{
		{knownKey, 1, "8bBmvhxGmaH"},
		{knownKey, 2, "8vo0gf5JDIa"},
		{knownKey, 1000, "3mKo1wYPQ34"},
		{knownKey, math.MaxInt64, "AkWmm608V6N"},
		{"example-key", 1, "2BAXIPPh8tx"},
	} {
		if code, err := NewCodec(tc.key).Encode(tc.id); err != nil || code != tc.code {
			t.Errorf("key %q: Encode(%d) = %q, %v; want %q", tc.key, tc.id, code, err, tc.code)
		}
	}
}

func TestDecodeRefusesWhatEncodeNeverWrites(t *testing.T) {
	for name, code := range map[string]string{
		"empty":             "",
		"zero":              "0",
		"leading zero":      "0abc",
		"too long":          "123456789012",
		"dash":              "ab-c",
		"slash":             "ab/c",
		"dot":               "favicon.ico",
		"space":             "ab c",
		"percent":           "%41",
		"non-ASCII":         "abé",
		"NUL":               "a\x00",
		"just above 2^63-1": "AzL8n0Y58m8",
		"above 2^64":        "zzzzzzzzzzz",
	} {
		for cname, c := range codecs() {
			if id, err := c.Decode(code); !errors.Is(err, ErrInvalidCode) {
				t.Errorf("%s: %s: Decode(%q) = %d, %v; want ErrInvalidCode", cname, name, code, id, err)
			}
		}
	}
}

func TestEncodeRefusesIDsBelowOne(t *testing.T) {
	for _, id := range []int64{0, -1, math.MinInt64} {
		for cname, c := range codecs() {
			if code, err := c.Encode(id); !errors.Is(err, ErrInvalidID) {
				t.Errorf("%s: Encode(%d) = %q, %v; want ErrInvalidID", cname, id, code, err)
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ids := edgeIDs()
	for range 20_000 {
		ids = append(ids, 1+r.Int64N(math.MaxInt64))
	}
	for cname, c := range codecs() {
		for _, id := range ids {
			code, err := c.Encode(id)
			if err != nil {
				t.Fatalf("%s: Encode(%d): %v", cname, id, err)
			}
			if len(code) < 1 || len(code) > MaxCodeLen || strings.Trim(code, alphabet) != "" || code[0] == '0' {
				t.Fatalf("%s: Encode(%d) = %q, not a well-formed code", cname, id, code)
			}
			back, err := c.Decode(code)
			if err != nil || back != id {
				t.Fatalf("%s: Decode(Encode(%d) = %q) = %d, %v", cname, id, code, back, err)
			}
		}
	}
}

// TestConsecutiveIDsGetUnrelatedCodes: runs of consecutive IDs, as ticketd leases them (from 1, and
// from the middle and top of the space), give distinct codes, no two neighbours close in value, and no
// order.
func TestConsecutiveIDsGetUnrelatedCodes(t *testing.T) {
	c := NewCodec(knownKey)
	seen := map[string]int64{}
	for _, start := range []int64{1, 1 << 40, math.MaxInt64 - 50_000} {
		increasing, prev := 0, uint64(0)
		const n = 50_000
		for i := range int64(n) {
			id := start + i
			code, err := c.Encode(id)
			if err != nil {
				t.Fatal(err)
			}
			if other, dup := seen[code]; dup {
				t.Fatalf("IDs %d and %d share the code %q", other, id, code)
			}
			seen[code] = id
			v := c.scramble(uint64(id))
			if i > 0 {
				if diff := max(v, prev) - min(v, prev); diff < 1<<32 {
					t.Errorf("IDs %d and %d scramble to values only %d apart", id-1, id, diff)
				}
				if v > prev {
					increasing++
				}
			}
			prev = v
		}
		// An order-preserving map would give n-1; a random one about half that.
		if increasing < n*45/100 || increasing > n*55/100 {
			t.Errorf("from %d: %d of %d neighbours in increasing order, want about half", start, increasing, n-1)
		}
	}
}

func TestKeysGiveDifferentCodes(t *testing.T) {
	a, b := NewCodec("key one"), NewCodec("key two")
	same := 0
	for id := int64(1); id <= 1000; id++ {
		ca, _ := a.Encode(id)
		cb, _ := b.Encode(id)
		if ca == cb {
			same++
		}
	}
	if same > 0 {
		t.Errorf("%d of 1000 IDs have the same code under two keys", same)
	}
	if !a.Scrambled() || PlainCodec().Scrambled() {
		t.Error("Scrambled() is wrong")
	}
}

// FuzzDecode: whatever the input, Decode either refuses it with ErrInvalidCode or returns the one ID
// whose code it is.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "0", "1", "z", "10", "8bBmvhxGmaH", "AzL8n0Y58m7", "AzL8n0Y58m8", "zzzzzzzzzzz", "abé", "a-b"} {
		f.Add(s)
	}
	cs := codecs()
	f.Fuzz(func(t *testing.T, code string) {
		for cname, c := range cs {
			id, err := c.Decode(code)
			if err != nil {
				if !errors.Is(err, ErrInvalidCode) {
					t.Fatalf("%s: Decode(%q): %v, want ErrInvalidCode", cname, code, err)
				}
				continue
			}
			if id < 1 {
				t.Fatalf("%s: Decode(%q) = %d, below 1", cname, code, id)
			}
			back, err := c.Encode(id)
			if err != nil || back != code {
				t.Fatalf("%s: Encode(Decode(%q) = %d) = %q, %v", cname, code, id, back, err)
			}
		}
	})
}

// FuzzEncode: every ID from 1 up has a code that decodes back to it; the others are refused.
func FuzzEncode(f *testing.F) {
	for _, id := range append(edgeIDs(), 0, -1, math.MinInt64) {
		f.Add(id)
	}
	cs := codecs()
	f.Fuzz(func(t *testing.T, id int64) {
		for cname, c := range cs {
			code, err := c.Encode(id)
			if id < 1 {
				if !errors.Is(err, ErrInvalidID) {
					t.Fatalf("%s: Encode(%d) = %q, %v; want ErrInvalidID", cname, id, code, err)
				}
				continue
			}
			back, err := c.Decode(code)
			if err != nil || back != id {
				t.Fatalf("%s: Decode(Encode(%d) = %q) = %d, %v", cname, id, code, back, err)
			}
		}
	})
}

func ExampleCodec() {
	plain := PlainCodec()
	scrambled := NewCodec("example-key")
	for id := int64(1); id <= 3; id++ {
		p, _ := plain.Encode(id)
		s, _ := scrambled.Encode(id)
		back, _ := scrambled.Decode(s)
		fmt.Println(id, p, s, back)
	}
	// Output:
	// 1 1 2BAXIPPh8tx 1
	// 2 2 8rIXIxvzLBo 2
	// 3 3 AaJFttIKxxO 3
}

func BenchmarkCodec(b *testing.B) {
	for name, c := range map[string]*Codec{"plain": PlainCodec(), "scrambled": NewCodec(knownKey)} {
		b.Run(name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := c.Encode(int64(i) + 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		code, _ := c.Encode(123456789)
		b.Run(name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := c.Decode(code); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestShortCodesAreABijection checks every ID of small code spaces (codes of 1 to 3 characters, built
// the way WithLength builds 4 to 10): each code fits the length, decodes back to its ID, and no two
// IDs share one, so the codes are exactly a permutation of [1, 62^n-1].
func TestShortCodesAreABijection(t *testing.T) {
	for _, base := range []*Codec{NewCodec(knownKey), PlainCodec()} {
		for n := 1; n <= 3; n++ {
			c := newCodec(base.block, n)
			seen := make(map[string]int64, c.MaxID())
			for id := int64(1); id <= c.MaxID(); id++ {
				code, err := c.Encode(id)
				if err != nil || len(code) > n {
					t.Fatalf("length %d, scrambled %v: Encode(%d) = %q, %v", n, c.Scrambled(), id, code, err)
				}
				if other, dup := seen[code]; dup {
					t.Fatalf("length %d: IDs %d and %d share the code %q", n, other, id, code)
				}
				seen[code] = id
				if back, err := c.Decode(code); err != nil || back != id {
					t.Fatalf("length %d: Decode(%q) = %d, %v; want %d", n, code, back, err, id)
				}
			}
			if want := int(pow62(n) - 1); len(seen) != want {
				t.Fatalf("length %d: %d codes, want %d", n, len(seen), want)
			}
			if _, err := c.Encode(c.MaxID() + 1); !errors.Is(err, ErrCodesExhausted) {
				t.Fatalf("length %d: Encode(%d) = %v, want ErrCodesExhausted", n, c.MaxID()+1, err)
			}
		}
	}
}

func TestWithLength(t *testing.T) {
	full := NewCodec(knownKey)
	for _, n := range []int{0, MinCodeLen - 1, MaxCodeLen + 1} {
		if _, err := full.WithLength(n); err == nil {
			t.Errorf("WithLength(%d) accepted", n)
		}
	}
	if c, err := full.WithLength(MaxCodeLen); err != nil || c != full || c.MaxID() != math.MaxInt64 {
		t.Fatalf("WithLength(%d) = %v, %v; want the codec itself", MaxCodeLen, c, err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for n := MinCodeLen; n < MaxCodeLen; n++ {
		for name, base := range codecs() {
			c, err := base.WithLength(n)
			if err != nil || c.Length() != n || c.MaxID() != int64(pow62(n)-1) {
				t.Fatalf("%s: WithLength(%d) = %v, %v", name, n, c, err)
			}
			ids := []int64{1, 2, 61, 62, c.MaxID() - 1, c.MaxID()}
			for range 200 {
				ids = append(ids, 1+rng.Int64N(c.MaxID()))
			}
			for _, id := range ids {
				code, err := c.Encode(id)
				if err != nil || len(code) > n {
					t.Fatalf("%s, length %d: Encode(%d) = %q, %v", name, n, id, code, err)
				}
				if back, err := c.Decode(code); err != nil || back != id {
					t.Fatalf("%s, length %d: Decode(%q) = %d, %v; want %d", name, n, code, back, err, id)
				}
			}
			if _, err := c.Encode(c.MaxID() + 1); !errors.Is(err, ErrCodesExhausted) {
				t.Fatalf("%s, length %d: Encode(MaxID+1) = %v, want ErrCodesExhausted", name, n, err)
			}
			if _, err := c.Decode(strings.Repeat("1", n+1)); !errors.Is(err, ErrInvalidCode) {
				t.Fatalf("%s, length %d: a code of %d characters decoded: %v", name, n, n+1, err)
			}
		}
	}
}
