package failover

import (
	"errors"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator"
)

// TestFence: Set.Fence fences a server for the namespaces named, logs it, kicks the guard and returns
// ErrFenced with the repair command; the fence shows in the health of a server out of rotation, and
// Clear lifts it.
func TestFence(t *testing.T) {
	fx := newFixture(t, 2, nil)
	s := fx.servers[0]
	var f Fence
	kicked := 0
	err := fx.set.Fence(s, &f, []string{"orders", "links"}, []string{"b", "a"}, func() { kicked++ })
	if !errors.Is(err, allocator.ErrFenced) || !strings.Contains(err.Error(), "ticketd repair links --server s1") || !strings.Contains(err.Error(), "(a; b)") {
		t.Fatalf("Fence: %v", err)
	}
	if !f.Fenced() || kicked != 1 || !strings.Contains(fx.logs.String(), "ticket server fenced") {
		t.Fatalf("fenced %v, kicked %d, logs %s", f.Fenced(), kicked, fx.logs.String())
	}
	// Met again for the same reason (every check and lease meets it), it is not logged again.
	if again := fx.set.Fence(s, &f, []string{"orders", "links"}, []string{"b", "a"}, func() { kicked++ }); again.Error() != err.Error() || kicked != 2 ||
		strings.Count(fx.logs.String(), `msg="ticket server fenced"`) != 1 {
		t.Fatalf("fenced again: %v, kicked %d, logs %s", again, kicked, fx.logs.String())
	}
	h := allocator.ServerHealth{Name: "s1", Healthy: true}
	f.Report(&h)
	if !h.Fenced || h.Error != "" {
		t.Fatalf("health of a usable fenced server %+v", h)
	}
	h = allocator.ServerHealth{Name: "s1", Error: "down"}
	f.Report(&h)
	if !h.Fenced || h.Error != err.Error() {
		t.Fatalf("health of a fenced server out of rotation %+v", h)
	}
	_ = fx.set.Fence(s, &f, []string{"orders"}, []string{"x"}, nil) // no guard to kick yet
	f.Clear()
	h = allocator.ServerHealth{Name: "s1", Error: "down"}
	f.Report(&h)
	if f.Fenced() || h.Fenced || h.Error != "down" {
		t.Fatalf("after Clear: fenced %v, health %+v", f.Fenced(), h)
	}
}
