package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// laboratory are the packages that serve no ID: the comparisons, the chaos run and what they link.
// They belong to cmd/ticketd-bench; in the server binary they would be code an operator must audit and
// patch for nothing.
var laboratory = []string{
	"gonum.org/v1/plot", "github.com/Shopify/toxiproxy", "github.com/rs/zerolog", "github.com/sony/sonyflake",
	"github.com/oklog/ulid", "github.com/google/uuid", "github.com/segmentio/ksuid", "github.com/rs/xid",
	"github.com/bwmarrin/snowflake", "github.com/HdrHistogram/hdrhistogram-go",
	"github.com/ticketd/ticketd/bench", "github.com/ticketd/ticketd/chaos",
	"github.com/ticketd/ticketd/internal/testservers", "github.com/ticketd/ticketd/examples",
}

// TestLinksOnlyWhatServesIDs: `go list -deps ./cmd/ticketd` names no package of the laboratory.
func TestLinksOnlyWhatServesIDs(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	// What the list must hold, so that an empty or foreign list cannot pass.
	for _, want := range []string{"github.com/ticketd/ticketd/allocator/mysql", "github.com/ticketd/ticketd/server"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps names no %s: %q", want, deps)
		}
	}
	for _, d := range deps {
		for _, lab := range laboratory {
			if d == lab || strings.HasPrefix(d, lab+"/") {
				t.Errorf("ticketd links %s (%s): move what needs it to cmd/ticketd-bench", d, lab)
			}
		}
	}
}
