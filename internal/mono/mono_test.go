package mono

import (
	"testing"
	"time"
)

func TestNanos(t *testing.T) {
	now := time.Now()
	later := now.Add(1500 * time.Millisecond)
	if d := Nanos(later) - Nanos(now); d != int64(1500*time.Millisecond) {
		t.Fatalf("Nanos apart by %d, want 1.5 s", d)
	}
	wall := time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC) // no monotonic reading: by the wall clock
	if got := Time(Nanos(wall)); !got.Equal(wall) {
		t.Fatalf("Time(Nanos(%v)) = %v", wall, got)
	}
	if Nanos(base) == 0 {
		t.Fatal("Nanos of the base is 0, which means unset")
	}
}
