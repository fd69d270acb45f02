package allocator

import (
	"math"
	"testing"
)

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		first, step, size, maxID int64
		want                     int64
	}{
		{"all fit", 1, 1, 10, 100, 10},
		{"ends on the ceiling", 91, 1, 10, 100, 10},
		{"cut short", 95, 1, 10, 100, 6},
		{"cut short, step 2", 95, 2, 10, 100, 3},
		{"the ceiling itself", 100, 1, 10, 100, 1},
		{"above the ceiling", 101, 1, 10, 100, 0},
		{"near MaxInt64", math.MaxInt64 - 4, 2, 10, math.MaxInt64, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Fit(tc.first, tc.step, tc.size, tc.maxID); got != tc.want {
				t.Fatalf("Fit(%d, %d, %d, %d) = %d, want %d", tc.first, tc.step, tc.size, tc.maxID, got, tc.want)
			}
		})
	}
}

func TestIDsRemaining(t *testing.T) {
	pair := Namespace{MaxID: 1050, Servers: []ServerState{{Next: 1, Step: 2}, {Next: 2, Step: 2}}}
	if left, ok := pair.IDsRemaining(); !ok || left != 1050 {
		t.Fatalf("fresh pair: %d (%v), want 1050", left, ok)
	}
	pair.Servers[0].Next = 1051
	if left, _ := pair.IDsRemaining(); left != 525 || pair.HighestIssued() != 1049 {
		t.Fatalf("one side used up: %d left, highest %d, want 525 and 1049", left, pair.HighestIssued())
	}
	none := Namespace{Servers: []ServerState{{Server: "down"}}}
	if _, ok := none.IDsRemaining(); ok {
		t.Fatal("no counter known, yet a headroom")
	}
	full := Namespace{Servers: []ServerState{{Next: 1, Step: 1}}} // zero MaxID: the default
	if left, _ := full.IDsRemaining(); left != math.MaxInt64 {
		t.Fatalf("the whole space: %d", left)
	}
}
