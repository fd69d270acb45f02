package hedge

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestGet(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	floor, ceiling, first := ms(20), ms(500), ms(250)
	for _, tc := range []struct {
		name     string
		observed []time.Duration
		want     time.Duration
	}{
		{"nothing observed", nil, first},
		{"one answer", []time.Duration{ms(40)}, ms(40)},
		{"the floor", []time.Duration{ms(1), ms(2), ms(3)}, floor},
		{"the ceiling", []time.Duration{ms(900)}, ceiling},
		{"nearest rank of 20: the 19th", seq(20, ms(10)), ms(190)},
		{"nearest rank of 64: the 61st", seq(64, ms(1)), ms(61)},
		{"the last 64 only", append(seq(64, ms(100)), seq(64, ms(1))...), ms(61)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Delay
			for _, took := range tc.observed {
				d.Observe(took)
			}
			if got := d.Get(floor, ceiling, first); got != tc.want {
				t.Fatalf("Get = %s, want %s", got, tc.want)
			}
		})
	}
	var d Delay
	if got := d.Get(floor, ms(100), first); got != ms(100) {
		t.Fatalf("before any answer, with a ceiling below first: %s", got)
	}
}

// seq returns n latencies step, 2×step, … n×step, shuffled.
func seq(n int, step time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * step
	}
	rand.Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func BenchmarkGet(b *testing.B) {
	var d Delay
	for i := range Window {
		d.Observe(time.Duration(rand.IntN(1000)+i) * time.Microsecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.Get(time.Millisecond, time.Second, time.Second)
	}
}
