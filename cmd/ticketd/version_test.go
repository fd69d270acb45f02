package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/internal/version"
)

// TestVersion: `ticketd version` and `ticketd --version` print the build, as one line or as JSON.
func TestVersion(t *testing.T) {
	want := version.Get()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		out, errOut, code := run(t, nil, args...)
		if code != 0 || out != want.String()+"\n" || errOut != "" || !strings.HasPrefix(out, "ticketd ") {
			t.Fatalf("%v: exit %d, %q %q; want %q", args, code, out, errOut, want.String())
		}
	}
	out, _, code := run(t, nil, "version", "--json")
	var got version.Info
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got != want || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("version --json: exit %d, %q (%v); want %+v", code, out, err, want)
	}
	if _, _, code := run(t, nil, "version", "extra"); code != 2 {
		t.Fatalf("version with an argument: exit %d, want 2", code)
	}
}
