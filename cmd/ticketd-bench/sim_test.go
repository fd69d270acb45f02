package main

import (
	"strings"
	"testing"
)

// TestSimExploresAndSaysWhat: the sim command explores the schedules asked for and prints how many,
// the events by kind and the violations; a mechanism switched off makes it fail with the seed.
func TestSimExploresAndSaysWhat(t *testing.T) {
	out, errOut, code := run(t, "sim", "--schedules", "20", "--seed", "7")
	for _, want := range []string{"20 schedules in", "0 violations", "  lease ", `"schedules":20`} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("exit %d, want 0 and %q in:\n%s%s", code, want, out, errOut)
		}
	}
	out, errOut, code = run(t, "sim", "--schedules", "2000", "--off", "floors")
	if code != 1 || !strings.Contains(out, "replay: ticketd-bench sim --seed ") || !strings.Contains(out, "--off floors") ||
		!strings.Contains(errOut, "broke an invariant; first seed") {
		t.Fatalf("with the floors off: exit %d, want 1, a seed to replay and the error:\n%s%s", code, out, errOut)
	}
}
