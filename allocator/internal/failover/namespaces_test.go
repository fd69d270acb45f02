package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

func always(context.Context, *fakeServer) bool { return true }

// createOn makes a namespace on a fake server the way a backend would: new, already there, or err.
func createOn(errs map[string]error) func(context.Context, *fakeServer, Change[fakeRecord]) (bool, error) {
	return func(_ context.Context, s *fakeServer, c Change[fakeRecord]) (bool, error) {
		if err := errs[s.Name()]; err != nil {
			return false, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.records[c.Namespace.Name]; ok {
			return false, nil
		}
		s.records[c.Namespace.Name] = fakeRecord{c.Namespace, c.UpdatedUS}
		return true, nil
	}
}

func TestCreateNamespace(t *testing.T) {
	ctx := context.Background()
	refused := errors.New("connection refused")
	exhausted := fmt.Errorf("%w: start leaves no ID", allocator.ErrExhausted)
	for _, tc := range []struct {
		name    string
		ns      string
		errs    map[string]error
		reach   func(context.Context, *fakeServer) bool
		want    error
		downS1  bool
		created bool
	}{
		{name: "new", ns: "links", created: true},
		{name: "everywhere already", ns: "orders", want: allocator.ErrExists},
		{name: "new on one, the other down", ns: "links", errs: map[string]error{"s1": refused}, created: true, downS1: true},
		{name: "every server down", ns: "links", errs: map[string]error{"s1": refused, "s2": refused}, want: allocator.ErrUnavailable, downS1: true},
		{name: "a request error is returned", ns: "links", errs: map[string]error{"s1": refused, "s2": exhausted}, want: allocator.ErrExhausted, downS1: true},
		{name: "invalid settings", ns: "Links", want: allocator.ErrInvalidNamespace},
		{name: "only where reach lets through", ns: "links", created: true,
			reach: func(_ context.Context, s *fakeServer) bool { return s.Name() == "s2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 2, nil)
			reach := tc.reach
			if reach == nil {
				reach = always
			}
			got, err := fx.set.CreateNamespace(ctx, allocator.Namespace{Name: tc.ns, BlockSize: 7}, reach, createOn(tc.errs))
			if !errors.Is(err, tc.want) {
				t.Fatalf("CreateNamespace: %v, want %v", err, tc.want)
			}
			if tc.created && (got.Name != tc.ns || got.BlockSize != 7 || got.MaxBlockSize != allocator.DefaultMaxBlockSize || got.Start != 1) {
				t.Fatalf("created %+v, want the settings with defaults", got)
			}
			if fx.servers[0].Usable() == tc.downS1 {
				t.Fatalf("s1 usable %v, want %v", fx.servers[0].Usable(), !tc.downS1)
			}
			if tc.reach != nil {
				if _, ok, _ := fx.servers[0].ReadRecord(ctx, tc.ns); ok {
					t.Fatal("created on a server reach left out")
				}
			}
		})
	}
}

func TestUpdateNamespace(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, 2, nil)
	fx.servers[0].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 50}, 5}
	var seen []Change[fakeRecord]
	update := func(_ context.Context, s *fakeServer, c Change[fakeRecord]) error {
		seen = append(seen, c)
		return nil
	}
	if _, err := fx.set.Settings(ctx, "orders"); err != nil { // cached, and dropped by the change
		t.Fatal(err)
	}
	fx.clock.Advance(time.Second)
	got, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 20, Start: 1000}, counters(nil), update)
	if err != nil {
		t.Fatal(err)
	}
	if got.Start != 1000 || got.BlockSize != 20 || len(seen) != 2 {
		t.Fatalf("updated %+v with %d changes", got, len(seen))
	}
	if _, cached := fx.set.settings["orders"]; cached {
		t.Fatal("cached settings survive an update")
	}
	c := seen[0]
	if c.Namespace.Start != 50 || c.Advance != 1000 || c.Current.updated != 5 || c.UpdatedUS != fx.clock.Now().UnixMicro() {
		t.Fatalf("change %+v: want the namespace's own start 50, advance 1000, the latest copy and now", c)
	}
	// A Start below the namespace's own leaves it.
	if got, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", Start: 3}, counters(nil), update); err != nil || got.Start != 50 {
		t.Fatalf("update with a lower start: %+v, %v", got, err)
	}
	// A server that is down is left out; none taking the change is ErrUnavailable.
	seen = nil
	fx.servers[0].MarkDown(errors.New("gone"))
	refused := errors.New("connection refused")
	_, err = fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders"}, counters(nil), func(context.Context, *fakeServer, Change[fakeRecord]) error { return refused })
	if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), `updating "orders": s2: connection refused`) || fx.servers[1].Usable() {
		t.Fatalf("update with every server failing: %v (s2 usable %v)", err, fx.servers[1].Usable())
	}
	if _, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "nope"}, counters(nil), update); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("update with no server usable: %v", err)
	}
}

// counters is a States that gives every namespace the servers' states listed.
func counters(list []allocator.ServerState) States {
	return func(_ context.Context, names []string) map[string][]allocator.ServerState {
		out := map[string][]allocator.ServerState{}
		for _, n := range names {
			out[n] = list
		}
		return out
	}
}

// TestUpdateNamespaceLowersMaxID: a lower max_id needs every server's counter, is refused below the
// highest ID issued (named in the error), and is handed to each server as Lowered; a higher one is not.
func TestUpdateNamespaceLowersMaxID(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, 2, nil)
	fx.servers[0].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 1, MaxID: 10_000}, 5}
	var seen []Change[fakeRecord]
	update := func(_ context.Context, s *fakeServer, c Change[fakeRecord]) error {
		seen = append(seen, c)
		return nil
	}
	up := []allocator.ServerState{{Server: "s1", Next: 2001, Step: 2, Healthy: true}, {Server: "s2", Next: 4002, Step: 2, Healthy: true}}
	for _, tc := range []struct {
		name    string
		maxID   int64
		states  []allocator.ServerState
		want    error
		lowered int64
	}{
		{name: "below the highest issued", maxID: 3999, states: up, want: allocator.ErrInvalidSettings},
		{name: "at the highest issued", maxID: 4000, states: up, lowered: 4000},
		{name: "a server does not answer", maxID: 5000, states: []allocator.ServerState{up[0], {Server: "s2", Error: "gone"}}, want: allocator.ErrUnavailable},
		{name: "a server missing from the states", maxID: 5000, states: up[:1], want: allocator.ErrUnavailable},
		{name: "zero is the default, a raise", maxID: 0, states: nil},
		{name: "raised", maxID: 20_000, states: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen = nil
			_, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, MaxID: tc.maxID}, counters(tc.states), update)
			if !errors.Is(err, tc.want) {
				t.Fatalf("UpdateNamespace: %v, want %v", err, tc.want)
			}
			if tc.want == allocator.ErrInvalidSettings && !strings.Contains(err.Error(), "4000") {
				t.Fatalf("%v does not name the highest ID issued, 4000", err)
			}
			if tc.want != nil {
				if len(seen) != 0 {
					t.Fatalf("a refused change reached %d servers", len(seen))
				}
				return
			}
			if len(seen) != 2 || seen[0].Lowered != tc.lowered {
				t.Fatalf("%d changes, Lowered %+v, want 2 with %d", len(seen), seen, tc.lowered)
			}
			// Put the ceiling back for the next case.
			fx.servers[0].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 1, MaxID: 10_000}, seen[0].UpdatedUS + 1}
			fx.set.Forget("orders")
		})
	}
}

func TestNamespaces(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, 2, nil)
	fx.servers[0].records["links"] = fakeRecord{allocator.Namespace{Name: "links", BlockSize: 1}, 3}
	fx.servers[1].records["links"] = fakeRecord{allocator.Namespace{Name: "links", BlockSize: 2}, 4}
	fx.servers[1].records["alpha"] = fakeRecord{allocator.Namespace{Name: "alpha", BlockSize: 3}, 1}
	states := func(_ context.Context, names []string) map[string][]allocator.ServerState {
		out := map[string][]allocator.ServerState{}
		for _, n := range names {
			out[n] = []allocator.ServerState{{Server: "s1", Next: int64(len(n))}}
		}
		return out
	}
	list, err := fx.set.Namespaces(ctx, states)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0].Name != "alpha" || list[1].Name != "links" || list[2].Name != "orders" {
		t.Fatalf("Namespaces = %+v, want alpha, links, orders", list)
	}
	if list[1].BlockSize != 2 || len(list[1].Servers) != 1 || list[1].Servers[0].Next != 5 {
		t.Fatalf("links = %+v, want the copy updated last with its server states", list[1])
	}
	ns, err := fx.set.Namespace(ctx, "links", states)
	if err != nil || ns.BlockSize != 2 || ns.Servers[0].Next != 5 {
		t.Fatalf("Namespace = %+v, %v", ns, err)
	}
	if _, err := fx.set.Namespace(ctx, "Links", states); !errors.Is(err, allocator.ErrInvalidNamespace) {
		t.Fatalf("Namespace with a bad name: %v", err)
	}
	fx.servers[0].set(errors.New("timeout"), nil)
	fx.servers[1].set(errors.New("timeout"), nil)
	if _, err := fx.set.Namespaces(ctx, states); !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), "listing namespaces") {
		t.Fatalf("Namespaces with no server answering: %v", err)
	}
}
