package backoff

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestFullDoublesUpToMax(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{
		0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		4: 800 * time.Millisecond, 5: time.Second, 50: time.Second, 1 << 30: time.Second,
	} {
		if got := p.Full(n); got != want {
			t.Errorf("Full(%d) = %s, want %s", n, got, want)
		}
	}
	if got := (Policy{Max: time.Second}).Full(3); got != time.Second {
		t.Errorf("no Min: Full = %s, want Max", got)
	}
	huge := Policy{Min: time.Hour, Max: 1<<63 - 1}
	if got := huge.Full(100); got != huge.Max {
		t.Errorf("doubling past the largest duration: Full = %s, want Max", got)
	}
}

func TestWaitJittersBetweenHalfAndAll(t *testing.T) {
	for _, tc := range []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{1, 0, 50 * time.Millisecond}, {1, 0.5, 75 * time.Millisecond}, {2, 0, 100 * time.Millisecond},
		{4, 0.25, 500 * time.Millisecond}, {9, 0, 500 * time.Millisecond},
	} {
		p := Policy{Min: 100 * time.Millisecond, Max: time.Second, Jitter: func() float64 { return tc.jitter }}
		if got := p.Wait(tc.n); got != tc.want {
			t.Errorf("Wait(%d) with jitter %v = %s, want %s", tc.n, tc.jitter, got, tc.want)
		}
	}
	// The default source stays within the bounds.
	p := Policy{Min: 20 * time.Millisecond, Max: time.Second}
	for n := 1; n < 12; n++ {
		full := p.Full(n)
		for range 100 {
			if w := p.Wait(n); w < full/2 || w > full {
				t.Fatalf("Wait(%d) = %s, outside [%s, %s]", n, w, full/2, full)
			}
		}
	}
}

func TestStreak(t *testing.T) {
	now := time.Unix(1000, 0)
	var s Streak
	if !s.Due(now) || s.Failures != 0 {
		t.Fatalf("zero streak %+v must be due", s)
	}
	s.Fail(now, time.Second)
	s.Fail(now, 2*time.Second)
	if s.Failures != 2 || s.Due(now.Add(2*time.Second-1)) || !s.Due(now.Add(2*time.Second)) {
		t.Fatalf("after two failures: %+v", s)
	}
	s.Reset()
	if s != (Streak{}) {
		t.Fatalf("after reset: %+v", s)
	}
}

func TestRotateStartsOnSuccessiveItems(t *testing.T) {
	var cursor atomic.Uint64
	items := []string{"a", "b", "c"}
	var firsts []string
	for range 4 {
		got := Rotate(items, &cursor)
		if len(got) != 3 {
			t.Fatalf("Rotate = %v", got)
		}
		firsts = append(firsts, got[0]+got[1]+got[2])
	}
	if want := []string{"bca", "cab", "abc", "bca"}; !slices.Equal(firsts, want) {
		t.Fatalf("orders %v, want %v", firsts, want)
	}
	if got := Rotate([]string(nil), &cursor); len(got) != 0 {
		t.Fatalf("Rotate of nothing = %v", got)
	}
	// RotateAt starts at the position given; the cursor is not its business.
	if got := RotateAt(items, 4); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Fatalf("RotateAt(4) = %v, want b c a", got)
	}
	if got := RotateAt([]string(nil), 7); len(got) != 0 {
		t.Fatalf("RotateAt of nothing = %v", got)
	}
}

func TestHealthyFirst(t *testing.T) {
	now := time.Unix(1000, 0)
	retryAt := map[string]time.Time{
		"a": now.Add(3 * time.Second), "b": {}, "c": now.Add(time.Second), "d": now, "e": now.Add(3 * time.Second),
	}
	got := HealthyFirst([]string{"a", "b", "c", "d", "e"}, now, func(s string) time.Time { return retryAt[s] })
	if want := []string{"b", "d", "c", "a", "e"}; !slices.Equal(got, want) {
		t.Fatalf("HealthyFirst = %v, want %v", got, want)
	}
}
