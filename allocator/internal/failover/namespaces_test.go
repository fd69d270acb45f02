package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
		s.records[c.Namespace.Name] = fakeRecord{c.Namespace, c.UpdatedUS, c.UpdatedUS}
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
	fx.servers[0].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 50}, 5, 5}
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
	if _, cached := fx.set.settings["orders"].cached(fx.clock.Now()); cached {
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
	ceiling := func(at int64) { // every server holds max_id 10,000, set at at
		for _, s := range fx.servers {
			s.records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 1, MaxID: 10_000}, at, at}
		}
	}
	ceiling(5)
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
			ceiling(seen[0].UpdatedUS + 1)
			fx.set.Forget("orders")
		})
	}
}

// TestChangeBetweenALeftLoweringAndTheOldCeilingIsALowering: a lowering to 10,000 failed and stayed
// on s1 (its undo cut off); s2 still holds the old ceiling, and issued up to 30,000. A change to 20,000
// is above the newest ceiling but below s2's: it is a lowering, with its checks (refused, as s2 issued
// above it), not a raise that s2 would refuse to take while the change returns success.
func TestChangeBetweenALeftLoweringAndTheOldCeilingIsALowering(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, 2, nil)
	fx.servers[0].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 1, MaxID: 10_000}, 5, 5}
	var seen []Change[fakeRecord]
	update := func(_ context.Context, s *fakeServer, c Change[fakeRecord]) error {
		seen = append(seen, c)
		return nil
	}
	issued := counters([]allocator.ServerState{{Server: "s1", Next: 2001, Step: 2, Healthy: true}, {Server: "s2", Next: 30_002, Step: 2, Healthy: true}})
	_, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, MaxID: 20_000}, issued, update)
	if !errors.Is(err, allocator.ErrInvalidSettings) || !strings.Contains(err.Error(), "30000") || len(seen) != 0 {
		t.Fatalf("UpdateNamespace to 20,000 while s2 issued up to 30,000 under its old ceiling: %v, %d servers changed; want ErrInvalidSettings naming 30000, none changed", err, len(seen))
	}
	if _, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, MaxID: 40_000}, issued, update); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Lowered != 40_000 {
		t.Fatalf("to 40,000: %d changes, Lowered %d; want 2, each a lowering of s2's ceiling to 40000", len(seen), seen[0].Lowered)
	}
}

// TestChangeWithACopyUnreadNeedsEveryCopy: a lowering to 3,000 failed and stayed on s1; s2, which may
// still hold the old ceiling of 11,000, does not answer (down, then out of rotation). A change to
// 3,200 is above every ceiling read but may lower s2's: it is refused, naming s2, and changes nothing.
// Before, it was taken for a raise of s1's 3,000 and returned success while s2 kept 11,000. A change
// that keeps no ceiling lowers none, and is taken.
func TestChangeWithACopyUnreadNeedsEveryCopy(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, 2, nil)
	fx.servers[0].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 1, MaxID: 3_000}, 5, 5}
	fx.servers[1].records["orders"] = fakeRecord{allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, Start: 1, MaxID: 11_000}, 3, 3}
	var seen []string
	update := func(_ context.Context, s *fakeServer, c Change[fakeRecord]) error {
		seen = append(seen, s.Name())
		return nil
	}
	issued := counters([]allocator.ServerState{{Server: "s1", Next: 2001, Step: 2, Healthy: true}})
	for _, tc := range []struct {
		name string
		off  func()
	}{
		{"down", func() { fx.servers[1].set(errors.New("timeout"), errors.New("timeout")) }},
		{"out of rotation", func() { fx.servers[1].MarkDown(errors.New("connection refused")) }},
	} {
		tc.off()
		_, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, MaxID: 3_200}, issued, update)
		if !errors.Is(err, allocator.ErrUnavailable) || !strings.Contains(err.Error(), "s2 did not") || len(seen) != 0 {
			t.Fatalf("%s: max_id 3,200 with s2's copy unread: %v, changed %v; want ErrUnavailable naming s2, nothing changed", tc.name, err, seen)
		}
	}
	if _, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100}, issued, update); err != nil || !slices.Equal(seen, []string{"s1"}) {
		t.Fatalf("no max_id with s2 out: %v, changed %v; want s1 changed", err, seen)
	}
}

func TestNamespaces(t *testing.T) {
	ctx := context.Background()
	fx := newFixture(t, 2, nil)
	fx.servers[0].records["links"] = fakeRecord{allocator.Namespace{Name: "links", BlockSize: 1}, 3, 3}
	fx.servers[1].records["links"] = fakeRecord{allocator.Namespace{Name: "links", BlockSize: 2}, 4, 4}
	fx.servers[1].records["alpha"] = fakeRecord{allocator.Namespace{Name: "alpha", BlockSize: 3}, 1, 1}
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

// TestMerge: two copies of a namespace's settings combine into the settings of the one updated last,
// the ceiling set last (the lower one when both were set at once or at unknown times) and the higher
// start.
func TestMerge(t *testing.T) {
	ns := func(block, maxID, start int64) allocator.Namespace {
		return allocator.Namespace{Name: "orders", BlockSize: block, MaxID: maxID, Start: start}
	}
	for _, tc := range []struct {
		name                       string
		a, b                       fakeRecord
		block, maxID, ceiling, str int64
	}{
		{"the newer copy wins when it set the ceiling too", fakeRecord{ns(10, 1000, 1), 5, 5}, fakeRecord{ns(20, 2000, 1), 7, 7}, 20, 2000, 7, 1},
		{"a ceiling set later outlives newer other settings", fakeRecord{ns(10, 1000, 1), 5, 9}, fakeRecord{ns(20, 2000, 1), 7, 7}, 20, 1000, 9, 1},
		{"at the same time the lower ceiling wins", fakeRecord{ns(10, 3000, 1), 5, 5}, fakeRecord{ns(20, 2000, 1), 7, 5}, 20, 2000, 5, 1},
		{"a ceiling of unknown time never overrides a known one", fakeRecord{ns(10, 3000, 1), 5, 5}, fakeRecord{ns(20, 0, 1), 9, 0}, 20, 3000, 5, 1},
		{"two of unknown time: the lower", fakeRecord{ns(10, 3000, 1), 5, 0}, fakeRecord{ns(20, 0, 1), 9, 0}, 20, 3000, 0, 1},
		{"the higher start, whichever copy holds it", fakeRecord{ns(10, 0, 500), 5, 5}, fakeRecord{ns(20, 0, 1), 9, 9}, 20, allocator.DefaultMaxID, 9, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, got := range []fakeRecord{Merge(tc.a, tc.b), Merge(tc.b, tc.a)} {
				n := got.Namespace().WithDefaults()
				if n.BlockSize != tc.block || n.MaxID != tc.maxID || got.CeilingUS() != tc.ceiling || n.Start != tc.str {
					t.Fatalf("Merge: block %d, max_id %d set at %d, start %d; want %d, %d at %d, %d",
						n.BlockSize, n.MaxID, got.CeilingUS(), n.Start, tc.block, tc.maxID, tc.ceiling, tc.str)
				}
			}
		})
	}
}

// TestLoweringIsTakenByEveryServerOrNone: a lower max_id that a server refuses (it issued above it
// meanwhile) or does not take (it cannot be reached) is put back on the servers that took it, with the
// settings before and a newer time; the error names the server and says what to do. When putting back
// fails too, the error says which servers keep the lower ceiling.
func TestLoweringIsTakenByEveryServerOrNone(t *testing.T) {
	ctx := context.Background()
	up := []allocator.ServerState{{Server: "s1", Next: 11, Step: 2, Healthy: true}, {Server: "s2", Next: 12, Step: 2, Healthy: true}}
	passed := fmt.Errorf("s2: %w", allocator.CheckLowering("orders", 5000, 6000))
	gone := errors.New("connection refused")
	for _, tc := range []struct {
		name      string
		s2, undo  error
		want      error
		words     []string
		putBackOn int
	}{
		{"a server issued above it meanwhile", passed, nil, allocator.ErrInvalidSettings, []string{"s2 did not take it", "s1, which took it, were put back", "choose a max_id at or above"}, 1},
		{"a server cannot be reached", gone, nil, allocator.ErrUnavailable, []string{"s2 did not take it", "put back", "once every ticket server answers"}, 1},
		{"putting back fails too", gone, gone, allocator.ErrUnavailable, []string{"s2 did not take it", "s1 still hold max_id 5000"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, 2, nil)
			var seen []Change[fakeRecord]
			update := func(_ context.Context, s *fakeServer, c Change[fakeRecord]) error {
				seen = append(seen, c)
				switch {
				case s.Name() == "s2":
					return tc.s2
				case c.Lowered == 0 && tc.undo != nil:
					return tc.undo
				}
				s.mu.Lock()
				s.records["orders"] = fakeRecord{c.Namespace, c.UpdatedUS, c.UpdatedUS}
				s.mu.Unlock()
				return nil
			}
			_, err := fx.set.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 10, MaxBlockSize: 100, MaxID: 5000}, counters(up), update)
			if !errors.Is(err, tc.want) {
				t.Fatalf("UpdateNamespace: %v, want %v", err, tc.want)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%v does not say %q", err, w)
				}
			}
			if len(seen) != 3 || seen[2].Lowered != 0 || seen[2].UpdatedUS <= seen[0].UpdatedUS || seen[2].Namespace.WithDefaults().MaxID != allocator.DefaultMaxID {
				t.Fatalf("changes %+v: want the lowering on s1 and s2, then s1 put back to the ceiling before, later", seen)
			}
			ns, rerr := fx.set.ReadSettings(ctx, "orders")
			if rerr != nil {
				t.Fatal(rerr)
			}
			if want := []int64{5000, allocator.DefaultMaxID}[tc.putBackOn]; ns.WithDefaults().MaxID != want {
				t.Fatalf("max_id in force %d, want %d", ns.WithDefaults().MaxID, want)
			}
		})
	}
}
