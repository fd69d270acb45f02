package allocatortest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// pairServers are the names of newPair's servers.
var pairServers = []string{"a:1", "b:2"}

// newPair is an in-memory Flickr pair: server a:1 issues odd IDs, b:2 even ones, round-robin, in the
// namespaces the tests lease from. cfg may spoil it.
func newPair(cfg allocatortest.Config) *allocatortest.Memory {
	if cfg.Servers == nil {
		cfg.Servers = pairServers
	}
	for _, ns := range []string{"parity", "loop", "ns"} {
		cfg.Namespaces = append(cfg.Namespaces, allocator.Namespace{Name: ns})
	}
	return allocatortest.NewMemory(cfg)
}

// setDown takes both servers of a pair down, or brings them back.
func setDown(m *allocatortest.Memory, down bool) {
	for _, s := range pairServers {
		if down {
			m.SetDown(s, "connection refused")
		} else {
			m.SetUp(s)
		}
	}
}

func TestParity(t *testing.T) {
	f := newPair(allocatortest.Config{})
	blocks, err := allocatortest.LeaseConcurrently(f, "parity", 8, 1000)
	if err != nil {
		t.Fatal(err)
	}
	per, err := allocatortest.CheckParity(blocks, pairServers)
	if err != nil || per["a:1"]+per["b:2"] != 1000 || per["a:1"] == 0 || per["b:2"] == 0 {
		t.Fatalf("a sound pair: %v, %v", per, err)
	}
	for _, tc := range []struct {
		name   string
		spoil  allocatortest.Config
		blocks func([]allocator.Block) []allocator.Block
		says   string
	}{
		{"an odd ID from the even server", allocatortest.Config{Offsets: []int64{1, 3}}, nil, "breaks parity"},
		{"one server serves all", allocatortest.Config{Step: 2, Servers: pairServers[:1]}, nil, "never reached b:2"},
		{"an ID issued twice", allocatortest.Config{}, func(b []allocator.Block) []allocator.Block { return append(b, b[0]) }, "overlap"},
		{"a server not listed", allocatortest.Config{}, func(b []allocator.Block) []allocator.Block {
			b[0].Server = "c:3"
			return b
		}, "none of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPair(tc.spoil)
			blocks, err := allocatortest.LeaseConcurrently(f, "parity", 4, 100)
			if err != nil {
				t.Fatal(err)
			}
			if tc.blocks != nil {
				blocks = tc.blocks(blocks)
			}
			if _, err := allocatortest.CheckParity(blocks, pairServers); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("CheckParity: %v, want an error saying %q", err, tc.says)
			}
		})
	}
	setDown(f, true)
	if _, err := allocatortest.LeaseConcurrently(f, "parity", 4, 100); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("LeaseConcurrently with the pair down: %v", err)
	}
}

func TestLeaseLoop(t *testing.T) {
	f := newPair(allocatortest.Config{})
	l := allocatortest.StartLeasing(f, "loop", 10, 4)
	defer l.Stop()
	l.WaitFor(t, 200)
	setDown(f, true)
	l.WaitFor(t, 50)
	if len(l.Errs()) == 0 {
		t.Fatal("no error recorded while the pair was down")
	}
	back := time.Now()
	setDown(f, false)
	fromB := l.WaitForServer(t, "b:2", back)
	if fromB[0].Server != "b:2" {
		t.Fatalf("WaitForServer returned %v", fromB)
	}
	if before := l.EndedBefore(back); len(before) == 0 || len(before) >= len(l.Blocks()) {
		t.Fatalf("%d blocks ended before the pair came back, of %d", len(before), len(l.Blocks()))
	}
	l.Stop()
	l.Stop()
	blocks := l.Blocks()
	if int64(len(blocks)+len(l.Errs())) != l.Count() || l.Count() < 250 {
		t.Fatalf("%d blocks and %d errors for %d leases", len(blocks), len(l.Errs()), l.Count())
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, b := range blocks {
		if last, _ := b.Last(); b.Server == "a:1" && last > want {
			want = last
		}
	}
	if h := allocatortest.Highest(blocks, "a:1"); h != want || h%2 != 1 {
		t.Fatalf("Highest = %d, want %d", h, want)
	}
}

func TestWaitingForServers(t *testing.T) {
	f := newPair(allocatortest.Config{})
	setDown(f, true)
	allocatortest.CheckUnavailable(t, f, "ns", 10, time.Second)
	go func() {
		time.Sleep(100 * time.Millisecond)
		setDown(f, false)
	}()
	if b := allocatortest.LeaseWithin(t, f, "ns", 10, 10*time.Second); b.Size != 10 {
		t.Fatalf("LeaseWithin: %v", b)
	}
	got := allocatortest.LeaseUntil(t, "b:2", func() (allocator.Block, error) { return f.Lease(context.Background(), "ns", 5) })
	if last := got[len(got)-1]; last.Server != "b:2" || len(got) > 2 {
		t.Fatalf("LeaseUntil b:2 returned %v", got)
	}
}

func TestRunConcurrent(t *testing.T) {
	deadlock := errors.New("deadlock")
	var mu sync.Mutex
	calls := 0
	res := testing.Benchmark(func(b *testing.B) {
		calls = 0 // each round counts its own calls
		allocatortest.RunConcurrent(b, allocatortest.Concurrent{Goroutines: 4, Unit: "ok/s", Tolerated: "deadlocks",
			Tolerate: func(err error) bool { return errors.Is(err, deadlock) },
			Call: func() error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if calls%4 == 0 {
					return deadlock
				}
				return nil
			}})
	})
	if res.N == 0 || res.Extra["ok/s"] <= 0 {
		t.Fatalf("result %+v: want a rate of successful calls", res)
	}
	if d := res.Extra["deadlocks"]; d != float64(res.N/4) {
		t.Fatalf("%v deadlocks reported for %d calls, want %d", d, res.N, res.N/4)
	}
}

// serverB kills and restarts b:2 of a pair; restore makes it come back with its counter reset, as
// from an old backup.
type serverB struct {
	f       *allocatortest.Memory
	restore bool
}

func (s serverB) Kill() error {
	s.f.SetDown("b:2", "killed")
	return nil
}

func (s serverB) Start(context.Context) error {
	if s.restore {
		s.f.Rewind("b:2")
	}
	s.f.SetUp("b:2")
	return nil
}

// fatalRecorder stands in for t in a check that must fail: it records the failure and ends the
// goroutine, as t.Fatal does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatal(args ...any) { r.msg = fmt.Sprint(args...); runtime.Goexit() }
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestCheckKilledMidRun(t *testing.T) {
	f := newPair(allocatortest.Config{})
	after := allocatortest.CheckKilledMidRun(t, f, "ns", "b:2", serverB{f: f}, 200)
	if len(after) == 0 || after[0].Server != "b:2" {
		t.Fatalf("blocks after the restart: %v", after)
	}
	// A server that comes back below what it issued is caught.
	f = newPair(allocatortest.Config{})
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		allocatortest.CheckKilledMidRun(r, f, "ns", "b:2", serverB{f: f, restore: true}, 200)
	}()
	<-done
	if !strings.Contains(r.msg, "not above its highest earlier ID") {
		t.Fatalf("a server restored from an old backup passed: %q", r.msg)
	}
}
