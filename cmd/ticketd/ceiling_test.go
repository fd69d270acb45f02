package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/api"
)

// TestNamespaceMaxID: namespace create and update take --max-id; a lease cut short at the ceiling, then
// exhausted; a lower max-id refused naming the highest ID issued; an update keeps what it does not name.
func TestNamespaceMaxID(t *testing.T) {
	dir := t.TempDir()
	nsOf := func(out string) api.Namespace {
		t.Helper()
		var ns api.Namespace
		if err := json.Unmarshal([]byte(out), &ns); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		return ns
	}
	out, errOut, code := run(t, nil, "namespace", "create", "--data-dir", dir, "--max-id", "100", "orders")
	if ns := nsOf(out); code != 0 || ns.MaxID != "100" || ns.IDsRemaining == nil || *ns.IDsRemaining != "100" {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	for _, want := range []int64{60, 40} {
		out, errOut, code := run(t, nil, "lease", "--data-dir", dir, "-n", "60", "orders")
		if b := decodeBlock(t, out); code != 0 || b.Size != want {
			t.Fatalf("lease: %d %s %s, want %d IDs", code, out, errOut, want)
		}
	}
	if _, errOut, code := run(t, nil, "lease", "--data-dir", dir, "-n", "1", "orders"); code != 1 || !strings.Contains(errOut, "exhausted") {
		t.Fatalf("lease past max-id: exit %d, %s", code, errOut)
	}
	if _, errOut, code := run(t, nil, "namespace", "update", "--data-dir", dir, "--max-id", "99", "orders"); code != 1 || !strings.Contains(errOut, "100") {
		t.Fatalf("max-id below the highest issued: exit %d, %s", code, errOut)
	}
	out, errOut, code = run(t, nil, "namespace", "update", "--data-dir", dir, "--max-id", "200", "orders")
	if ns := nsOf(out); code != 0 || ns.MaxID != "200" || *ns.IDsRemaining != "100" {
		t.Fatalf("raise: %d %s %s", code, out, errOut)
	}
	out, errOut, code = run(t, nil, "namespace", "update", "--data-dir", dir, "--block-size", "7", "orders")
	if ns := nsOf(out); code != 0 || ns.MaxID != "200" || ns.BlockSize != 7 {
		t.Fatalf("an update without --max-id: %d %s %s", code, out, errOut)
	}
}
