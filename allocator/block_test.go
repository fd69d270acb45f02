package allocator_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

func TestBlockEnding(t *testing.T) {
	tests := []struct {
		name            string
		end, step, size int64
		wantStart       int64
		wantLast        int64
		wantErr         error
	}{
		{name: "odd server", end: 3001, step: 2, size: 1000, wantStart: 1001, wantLast: 2999},
		{name: "even server", end: 2002, step: 2, size: 1000, wantStart: 2, wantLast: 2000},
		{name: "stride one", end: 11, step: 1, size: 10, wantStart: 1, wantLast: 10},
		{name: "single", end: 8, step: 3, size: 1, wantStart: 5, wantLast: 5},
		{name: "top of space", end: math.MaxInt64, step: 1, size: 10, wantStart: math.MaxInt64 - 10, wantLast: math.MaxInt64 - 1},
		{name: "start zero", end: 10, step: 1, size: 10, wantErr: allocator.ErrInvalidSize},
		{name: "negative start", end: 5, step: 2, size: 10, wantErr: allocator.ErrInvalidSize},
		{name: "zero size", end: 10, step: 1, size: 0, wantErr: allocator.ErrInvalidSize},
		{name: "zero step", end: 10, step: 0, size: 1, wantErr: allocator.ErrInvalidSize},
		{name: "span overflows", end: math.MaxInt64, step: 1 << 32, size: 1 << 32, wantErr: allocator.ErrExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := allocator.BlockEnding("orders", "a", tt.end, tt.step, tt.size, time.Time{})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			last, err := b.Last()
			if err != nil {
				t.Fatal(err)
			}
			if b.Start != tt.wantStart || last != tt.wantLast {
				t.Fatalf("start %d last %d, want %d %d", b.Start, last, tt.wantStart, tt.wantLast)
			}
		})
	}
}

func TestBlockIDAndContains(t *testing.T) {
	b := allocator.Block{Namespace: "n", Server: "a", Start: 1001, Step: 2, Size: 1000}
	for k, want := range map[int64]int64{0: 1001, 1: 1003, 999: 2999} {
		got, err := b.ID(k)
		if err != nil || got != want {
			t.Errorf("ID(%d) = %d, %v; want %d", k, got, err, want)
		}
	}
	for _, k := range []int64{-1, 1000, math.MaxInt64, math.MinInt64} {
		if _, err := b.ID(k); !errors.Is(err, allocator.ErrOutOfRange) {
			t.Errorf("ID(%d): %v, want ErrOutOfRange", k, err)
		}
	}
	for id, want := range map[int64]bool{1001: true, 1002: false, 2999: true, 3001: false, 999: false, -1: false, math.MaxInt64: false} {
		if got := b.Contains(id); got != want {
			t.Errorf("Contains(%d) = %v, want %v", id, got, want)
		}
	}
	top := allocator.Block{Start: math.MaxInt64 - 4, Step: 2, Size: 3}
	if last, err := top.Last(); err != nil || last != math.MaxInt64 {
		t.Fatalf("Last at the top = %d, %v", last, err)
	}
	over := allocator.Block{Start: math.MaxInt64 - 4, Step: 2, Size: 4}
	if _, err := over.Last(); !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("overflowing Last: %v", err)
	}
	if err := over.Validate(); !errors.Is(err, allocator.ErrExhausted) {
		t.Fatalf("Validate of overflowing block: %v", err)
	}
	if over.Contains(math.MaxInt64 - 4) {
		t.Fatal("an invalid block contains nothing")
	}
}

func TestBlockSlice(t *testing.T) {
	b := allocator.Block{Namespace: "n", Server: "b", Start: 2, Step: 2, Size: 100, ExpiresAt: time.Unix(100, 0)}
	s, err := b.Slice(10, 5)
	if err != nil {
		t.Fatal(err)
	}
	if s.Start != 22 || s.Size != 5 || s.Step != 2 || s.Server != "b" || !s.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("Slice = %+v", s)
	}
	for _, c := range [][2]int64{{-1, 1}, {0, 0}, {96, 5}, {100, 1}, {0, 101}, {math.MaxInt64, 1}, {1, math.MaxInt64}} {
		if _, err := b.Slice(c[0], c[1]); !errors.Is(err, allocator.ErrOutOfRange) {
			t.Errorf("Slice(%d, %d): %v", c[0], c[1], err)
		}
	}
}

func TestBlockExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	if (allocator.Block{}).Expired(now) {
		t.Fatal("zero ExpiresAt means never")
	}
	b := allocator.Block{ExpiresAt: now}
	if !b.Expired(now) || b.Expired(now.Add(-time.Nanosecond)) {
		t.Fatal("a block expires at ExpiresAt")
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"orders": true, "a": true, "0": true, "links.v2": true, "a_b-c": true, string(make([]byte, 0)): false,
		"Orders": false, "-a": false, "a b": false, "a;b": false, "ä": false,
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":  true,
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": false,
		"a\n": false,
	} {
		err := allocator.ValidateName(name)
		if (err == nil) != ok || (err != nil && !errors.Is(err, allocator.ErrInvalidNamespace)) {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestNamespaceValidate(t *testing.T) {
	tests := []struct {
		name string
		ns   allocator.Namespace
		want error
	}{
		{"defaults", allocator.Namespace{Name: "x"}, nil},
		{"bad name", allocator.Namespace{Name: "X"}, allocator.ErrInvalidNamespace},
		{"block above max", allocator.Namespace{Name: "x", BlockSize: 11, MaxBlockSize: 10}, allocator.ErrInvalidSettings},
		{"max above limit", allocator.Namespace{Name: "x", MaxBlockSize: allocator.MaxBlockSizeLimit + 1}, allocator.ErrInvalidSettings},
		{"negative ttl", allocator.Namespace{Name: "x", LeaseTTL: -1}, allocator.ErrInvalidSettings},
		{"tiny ttl", allocator.Namespace{Name: "x", LeaseTTL: time.Millisecond}, allocator.ErrInvalidSettings},
		{"negative start", allocator.Namespace{Name: "x", Start: -1}, allocator.ErrInvalidSettings},
		{"big block default max", allocator.Namespace{Name: "x", BlockSize: 2_000_000}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.ns.WithDefaults().Validate(); !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
}

// FuzzBlockArithmetic checks that block arithmetic near math.MaxInt64 never wraps: every ID a valid
// block yields lies in [Start, MaxInt64] and belongs to the block.
func FuzzBlockArithmetic(f *testing.F) {
	f.Add(int64(math.MaxInt64), int64(2), int64(1000), int64(999))
	f.Add(int64(math.MaxInt64-1), int64(1<<31), int64(1<<33), int64(0))
	f.Add(int64(3001), int64(2), int64(1000), int64(5))
	f.Fuzz(func(t *testing.T, end, step, size, k int64) {
		b, err := allocator.BlockEnding("f", "a", end, step, size, time.Time{})
		if err != nil {
			if !errors.Is(err, allocator.ErrInvalidSize) && !errors.Is(err, allocator.ErrExhausted) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		last, err := b.Last()
		if err != nil || last < b.Start || last != end-step {
			t.Fatalf("block %+v: last %d (%v), end %d", b, last, err, end)
		}
		id, err := b.ID(k)
		if err != nil {
			if !errors.Is(err, allocator.ErrOutOfRange) {
				t.Fatalf("ID(%d): %v", k, err)
			}
			return
		}
		if id < b.Start || id > last || !b.Contains(id) {
			t.Fatalf("ID(%d) = %d outside %v", k, id, b)
		}
	})
}

// FuzzValidateName checks that a name is accepted exactly when it matches the documented pattern, so
// nothing else ever reaches a query.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"orders", "a", "Orders", "x'; DROP TABLE t; --", "a\x00b", "ä", "links.v2", "-x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := allocator.ValidateName(name)
		ok := len(name) >= 1 && len(name) <= 64
		for i := 0; ok && i < len(name); i++ {
			c := name[i]
			alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
			ok = alnum || (i > 0 && (c == '_' || c == '.' || c == '-'))
		}
		if (err == nil) != ok {
			t.Fatalf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !errors.Is(err, allocator.ErrInvalidNamespace) {
			t.Fatalf("error %v is not ErrInvalidNamespace", err)
		}
	})
}
