package failover

import (
	"math"
	"testing"
)

func TestRepairTarget(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		base, margin, step, offset, max int64
		want                            int64
		clamped                         bool
	}{
		{"below the ceiling", 8, 100, 2, 2, 1_000_000, 108, false},
		{"rounded to the offset", 8, 101, 2, 2, 1_000_000, 110, false},
		{"margin past the ceiling", 8, 20_000_000, 2, 2, 1_000_000, 1_000_002, true},
		{"odd server past the ceiling", 7, 20_000_000, 2, 1, 1_000_000, 1_000_001, true},
		{"already past the ceiling", 1_000_004, 10, 2, 2, 1_000_000, 1_000_006, true},
		{"at the ceiling's first counter", 1_000_002, 10, 2, 2, 1_000_000, 1_000_004, true},
		{"at the end of the space", math.MaxInt64 - 1, 10, 2, 2, math.MaxInt64, math.MaxInt64 - 1, true},
		{"the default ceiling", math.MaxInt64 - 10, math.MaxInt64 / 4, 2, 2, math.MaxInt64, math.MaxInt64 - 1, true},
		{"exactly to the ceiling", 0, 1000, 1, 1, 1000, 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, clamped := RepairTarget(tc.base, tc.margin, tc.step, tc.offset, tc.max)
			if got != tc.want || clamped != tc.clamped {
				t.Fatalf("RepairTarget(%d, %d, %d, %d, %d) = %d, %v; want %d, %v", tc.base, tc.margin, tc.step, tc.offset, tc.max, got, clamped, tc.want, tc.clamped)
			}
		})
	}
}

// TestShiftedPeak: a repair's margin assumes that one server took what the fleet leased from every
// server, since the others may have been cut off from the fleet; a server whose rates were lost (kept
// on the server that lost its data) counts at the highest of the others.
func TestShiftedPeak(t *testing.T) {
	for _, tc := range []struct {
		fleet   map[int64]int64
		servers int
		want    int64
	}{
		{map[int64]int64{1: 500, 2: 520}, 2, 1020},
		{map[int64]int64{1: 500}, 2, 1000}, // the pair's other rates went with its data
		{map[int64]int64{1: 100, 2: 300}, 3, 700},
		{map[int64]int64{}, 2, 0},
	} {
		if got := ShiftedPeak(tc.fleet, tc.servers); got != tc.want {
			t.Errorf("ShiftedPeak(%v, %d) = %d, want %d", tc.fleet, tc.servers, got, tc.want)
		}
	}
}
