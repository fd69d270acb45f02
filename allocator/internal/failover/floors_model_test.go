package failover

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// modelFloors is Floors as it was written first, a Mark and a map of what each peer was given per
// namespace: the reference that the compact Floors must agree with.
type modelFloors struct {
	high        map[string]Mark
	leasedSince map[string]int64
	written     map[string]map[string]int64
}

func (f *modelFloors) observe(ns string, m Mark) {
	if f.high == nil {
		f.high = map[string]Mark{}
	}
	cur, ok := f.high[ns]
	switch {
	case !ok || m.Value > cur.Value:
		f.high[ns] = m
	case m.Value == cur.Value && cur.Identity == "" && m.Identity != "":
		cur.Identity = m.Identity
		f.high[ns] = cur
	}
}

func (f *modelFloors) pending(peer string) map[string]Mark {
	out := map[string]Mark{}
	for ns, m := range f.high {
		if f.written[peer][ns] < m.Value {
			out[ns] = m
		}
	}
	return out
}

func (f *modelFloors) wrote(peer, ns string, v int64) {
	if f.written == nil {
		f.written = map[string]map[string]int64{}
	}
	if f.written[peer] == nil {
		f.written[peer] = map[string]int64{}
	}
	f.written[peer][ns] = max(f.written[peer][ns], v)
}

// TestFloorsAgreeWithTheirModel: random observations, leases, writes to peers (the first written to
// kept in the floors, the others beside them), peers that went back, in any order: every floor, every
// peer's pending marks and the pace are what the plain model says. A floor is never lowered or lost.
func TestFloorsAgreeWithTheirModel(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var f Floors
		var m modelFloors
		pick := func(list ...string) string { return list[rng.IntN(len(list))] }
		for step := range 400 {
			ns := fmt.Sprintf("ns%d", rng.IntN(12))
			v := rng.Int64N(50)
			switch op := rng.IntN(6); op {
			case 0, 1:
				mk := Mark{Value: v, Holder: pick("a", "b", ThisProcess, "its row's copy on b"), Identity: pick("", "", "server_id 1", "server_id 2")}
				f.Observe(ns, mk)
				m.observe(ns, mk)
			case 2:
				id := pick("", "server_id 1")
				f.Leased(ns, v, 3, id)
				m.observe(ns, Mark{Value: v, Holder: ThisProcess, Identity: id})
				if m.leasedSince == nil {
					m.leasedSince = map[string]int64{}
				}
				m.leasedSince[ns] += 3
			case 3, 4:
				peer := pick("b", "b", "c")
				if p := m.pending(peer); len(p) > 0 {
					for name, mk := range p { // as writeTo does: the pending marks, then Wrote
						f.Wrote(peer, name, mk.Value)
						m.wrote(peer, name, mk.Value)
					}
				} else {
					f.Wrote(peer, ns, v) // also for a namespace without a floor
					m.wrote(peer, ns, v)
				}
			case 5:
				if rng.IntN(4) == 0 {
					peer := pick("b", "c")
					f.Unwrite(peer)
					delete(m.written, peer)
				}
			}
			if got, want := f.Snapshot(), m.high; !maps.Equal(got, want) {
				t.Fatalf("seed %d step %d: floors %v, want %v", seed, step, got, want)
			}
			if got, want := f.Get(ns), m.high[ns]; got != want {
				t.Fatalf("seed %d step %d: Get(%s) %v, want %v", seed, step, ns, got, want)
			}
			for _, peer := range []string{"b", "c", "d"} {
				if got, want := f.Pending(peer), m.pending(peer); !maps.Equal(got, want) {
					t.Fatalf("seed %d step %d: pending for %s %v, want %v", seed, step, peer, got, want)
				}
			}
		}
		pace := f.TakePace(time.Unix(100, 0))
		if len(pace) != len(m.leasedSince) {
			t.Fatalf("seed %d: pace of %d namespaces, want %d", seed, len(pace), len(m.leasedSince))
		}
		for ns, n := range m.leasedSince {
			if pace[ns].Span != n {
				t.Fatalf("seed %d: pace of %s %v, want %d", seed, ns, pace[ns], n)
			}
		}
	}
}

// TestFloorBytes: a namespace's floor on a server, its holder and identity shared with every other's
// and the value its one peer was given beside it, takes a few dozen bytes with the map's room: a
// process keeps one per namespace and server for good.
func TestFloorBytes(t *testing.T) {
	const n = 20000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ns%06d", i)
	}
	heap := allocatortest.LiveHeap
	base := heap()
	var f Floors
	for i, ns := range names {
		identity := fmt.Sprintf("server_id %d", 1+i%2) // a string of its own each time, as a row's scan gives
		f.Leased(ns, int64(1000+i), 10, identity)
		f.Observe(ns, Mark{Value: int64(2000 + i), Holder: "its row's copy on b", Identity: identity})
		f.Wrote("b", ns, int64(2000+i))
	}
	f.TakePace(time.Now())
	per := (heap() - base) / n
	runtime.KeepAlive(&f)
	runtime.KeepAlive(names)
	t.Logf("%d bytes a floor", per)
	if per > 96 { // 162 with a Mark and a map of what the peer was given
		t.Errorf("a floor takes %d bytes, want at most 96", per)
	}
}
