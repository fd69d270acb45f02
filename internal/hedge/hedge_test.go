package hedge

import (
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
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
				d.Observe(time.Time{}, took)
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
// TestRecovery: the answers to requests begun within Recovery of a failure are not observed, so that
// the slow answers of an outage's end do not raise the delay after it.
func TestRecovery(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d Delay
	for i := range Window {
		d.Observe(t0.Add(time.Duration(i)*time.Millisecond), ms(10))
	}
	d.Fail(t0.Add(time.Second))
	for i := range Window { // the outage's late answers
		d.Observe(t0.Add(time.Second+time.Duration(i)*Recovery/Window), ms(900))
	}
	if got := d.Get(ms(1), time.Second, ms(250)); got != ms(10) {
		t.Fatalf("after answers begun within Recovery of a failure: %s, want the 10ms of before", got)
	}
	for range 4 { // begun once Recovery has passed: observed, and the 61st of 64 is one of them
		d.Observe(t0.Add(time.Second+Recovery), ms(900))
	}
	if got := d.Get(ms(1), time.Second, ms(250)); got != ms(900) {
		t.Fatalf("with 4 answers of 900ms of 64 once Recovery has passed: %s, want 900ms", got)
	}
}

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
		d.Observe(time.Time{}, time.Duration(rand.IntN(1000)+i)*time.Microsecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		d.Get(time.Millisecond, time.Second, time.Second)
	}
}

// TestDelayHoldsWhatItWasGiven: a Delay costs the latencies it holds, not Window of them: a process
// keeps one per namespace it serves, and most see a few answers (one, for a namespace leased from
// once). Past Window it keeps the last Window, in place.
func TestDelayHoldsWhatItWasGiven(t *testing.T) {
	var d Delay
	if size := unsafe.Sizeof(d); size > 64 {
		t.Fatalf("an empty Delay is %d bytes", size)
	}
	d.Observe(time.Time{}, time.Millisecond)
	if c := cap(d.recent); c != 1 {
		t.Fatalf("one answer holds room for %d", c)
	}
	for i := range 3 * Window {
		d.Observe(time.Time{}, time.Duration(i))
	}
	if n, c := len(d.recent), cap(d.recent); n != Window || c != Window {
		t.Fatalf("after %d answers: %d held, room for %d; want %d", 3*Window+1, n, c, Window)
	}
	if n := testing.AllocsPerRun(100, func() { d.Observe(time.Time{}, time.Millisecond) }); n != 0 {
		t.Fatalf("an answer past Window allocates %v times", n)
	}
}
