package bench

import (
	"strings"
	"testing"
	"time"
)

// TestProgressLineSaysStageAndTimeLeft: a line a step off a terminal, naming the stage and the step;
// the time left is the plan's, stretched by how slow the run has been so far.
func TestProgressLineSaysStageAndTimeLeft(t *testing.T) {
	var out strings.Builder
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var elapsed time.Duration
	p := newProgressLine(&out, false, func() time.Time { return t0.Add(elapsed) },
		[]stagePlan{{"gen", 2, 2 * time.Second}, {"load", 3, 4 * time.Second}}) // 16 s planned

	p.begin("gen", "scheme a")
	p.update("50%", 0.5) // off a terminal: no line
	elapsed = 4 * time.Second
	p.end()
	p.begin("gen", "scheme b") // 2 s of plan done in 4 s: twice as slow, 14 s of plan left
	elapsed = 8 * time.Second
	p.end()
	p.begin("load", "case x, 1 clients") // 4 s done in 8 s, 12 s left
	p.skip("load", 1)                    // a case that could not start: 8 s left
	elapsed = 14 * time.Second
	p.end()
	p.finish(false)
	want := []string{
		"bench: gen 1/2, scheme a (stage 1 of 2; about 16s left)",
		"bench: gen 2/2, scheme b (stage 1 of 2; about 28s left)",
		"bench: load 1/3, case x, 1 clients (stage 2 of 2; about 24s left)",
		"bench: done in 14s",
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLiveProgressLineIsRewrittenInPlace: on a terminal one line is rewritten, its end blanked when a
// shorter one replaces it, and ended when the run stops.
func TestLiveProgressLineIsRewrittenInPlace(t *testing.T) {
	var out strings.Builder
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var elapsed time.Duration
	p := newProgressLine(&out, true, func() time.Time { return t0.Add(elapsed) }, []stagePlan{{"btree", 2, time.Minute}})
	p.begin("btree", "a long table name")
	elapsed = 30 * time.Second
	p.update("50% inserted", 0.5)
	elapsed = time.Minute
	p.end()
	p.begin("btree", "short")
	elapsed = 70 * time.Second
	p.finish(true)
	lines := strings.Split(out.String(), "\r")[1:]
	want := []string{
		"bench: btree 1/2, a long table name (stage 1 of 1; about 2m left)",
		"bench: btree 1/2, a long table name 50% inserted (stage 1 of 1; about 1m30s left)",
		"bench: btree 2/2, short (stage 1 of 1; about 1m left)",
		"bench: stopped after 1m10s",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d writes, want %d: %q", len(lines), len(want), out.String())
	}
	for i, l := range lines {
		if strings.TrimRight(l, " \n") != want[i] {
			t.Errorf("write %d: %q, want %q", i, l, want[i])
		}
		if i > 0 && len(strings.TrimRight(l, "\n")) < len(strings.TrimRight(lines[i-1], " \n")) {
			t.Errorf("write %d does not cover the text it replaces: its end is left on the screen", i)
		}
	}
	if !strings.HasSuffix(out.String(), "\n") {
		t.Error("the line is not ended")
	}
	var none *progressLine // a run without a progress writer
	none.begin("btree", "x")
	none.update("", 0)
	none.end()
	none.finish(false)
}

func TestRoughly(t *testing.T) {
	for d, want := range map[time.Duration]string{
		300 * time.Millisecond: "under a second", 1400 * time.Millisecond: "about 1s", 59 * time.Second: "about 59s",
		64 * time.Second: "about 1m", 3*time.Minute + 8*time.Second: "about 3m10s", 75 * time.Minute: "about 75m",
	} {
		if got := roughly(d); got != want {
			t.Errorf("roughly(%s) = %q, want %q", d, got, want)
		}
	}
}
