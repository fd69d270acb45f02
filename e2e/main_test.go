// Package e2e tests the Go SDK against ticketd as it runs: `ticketd serve` and its server package on
// the MariaDB pair or the embedded store, and the in-process source on the pair.
package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.RunWithTicketd(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func newClient(t testing.TB, src client.Source, ns string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(src, ns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// eventually polls cond every millisecond for up to 10s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// idSet records IDs from many goroutines at once and counts the ones seen twice: a sparse bitmap in
// chunks of 2^20 IDs, set with atomic OR.
type idSet struct {
	mu     sync.RWMutex
	chunks map[int64]*idChunk
	n      atomic.Int64
	dups   atomic.Int64
	first  atomic.Int64 // the first duplicate seen
}

type idChunk [1 << 14]atomic.Uint64

func newIDSet() *idSet { return &idSet{chunks: map[int64]*idChunk{}} }

func (s *idSet) chunk(key int64) *idChunk {
	s.mu.RLock()
	c := s.chunks[key]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.chunks[key]; c == nil {
		c = new(idChunk)
		s.chunks[key] = c
	}
	return c
}

// idAdder adds to an idSet from one goroutine, remembering the last chunk.
type idAdder struct {
	s   *idSet
	key int64
	c   *idChunk
}

func (s *idSet) adder() *idAdder { return &idAdder{s: s, key: -1} }

// add records id and reports whether it was new.
func (a *idAdder) add(id int64) bool {
	if id < 1 {
		a.s.dups.Add(1)
		a.s.first.CompareAndSwap(0, id)
		return false
	}
	if key := id >> 20; key != a.key {
		a.c, a.key = a.s.chunk(key), key
	}
	bit := uint64(id) & (1<<20 - 1)
	mask := uint64(1) << (bit & 63)
	if a.c[bit>>6].Or(mask)&mask != 0 {
		a.s.dups.Add(1)
		a.s.first.CompareAndSwap(0, id)
		return false
	}
	a.s.n.Add(1)
	return true
}

// check fails the test if any ID was seen twice or the count is not want.
func (s *idSet) check(t testing.TB, want int64) {
	t.Helper()
	if d := s.dups.Load(); d != 0 {
		t.Fatalf("%d duplicate (or non-positive) IDs, the first %d", d, s.first.Load())
	}
	if got := s.n.Load(); got != want {
		t.Fatalf("%d distinct IDs, want %d", got, want)
	}
}

// drain takes IDs from c into set until Next fails, each call waiting at most wait; it returns how
// many it took and the error.
func drain(c *client.Client, set *idSet, wait time.Duration) (int64, error) {
	add := set.adder()
	for n := int64(0); ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		id, err := c.Next(ctx)
		cancel()
		if err != nil {
			return n, err
		}
		add.add(id)
	}
}
