package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// newClock is a manual clock for the buckets.
func newClock() *allocatortest.Clock {
	return allocatortest.NewClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

func TestTakeAndWait(t *testing.T) {
	clk := newClock()
	l := New(0.5, 2, 10, clk.Now)
	for i := int64(1); i <= 2; i++ {
		if ok, _, taken := l.Take("a"); !ok || taken != i {
			t.Fatalf("take %d within the burst: %v, taken %d", i, ok, taken)
		}
	}
	ok, wait, taken := l.Take("a")
	if ok || wait != 2*time.Second || taken != 2 {
		t.Fatalf("past the burst: %v, wait %v, taken %d; want a refusal, 2s, 2", ok, wait, taken)
	}
	if empty, wait := l.Empty("a"); !empty || wait != 2*time.Second {
		t.Fatalf("Empty: %v %v", empty, wait)
	}
	if empty, _ := l.Empty("b"); empty || l.Len() != 1 {
		t.Fatalf("an unknown key is empty (%v) or was added by Empty (%d keys)", empty, l.Len())
	}
	clk.Advance(2 * time.Second)
	if ok, _, _ := l.Take("a"); !ok {
		t.Fatal("no token after the wait")
	}
}

// TestKeysAreBounded: however many keys arrive, and however fast (the clock stands still, so no
// bucket is idle), the limiter tracks no more than its limit.
func TestKeysAreBounded(t *testing.T) {
	const keys = 100
	l := New(1, 1, keys, newClock().Now)
	for i := range 3 * keys {
		l.Take(fmt.Sprint("ip:192.0.2.", i))
		if l.Len() > keys {
			t.Fatalf("%d keys tracked after %d new ones; the limit is %d", l.Len(), i+1, keys)
		}
	}
	if l.Len() != keys {
		t.Fatalf("%d keys tracked, want the limit %d", l.Len(), keys)
	}
}

// TestNewKeyForgetsOnlyTheLeastRecentlyUsed: a new key past the limit forgets exactly one key, the one
// used longest ago, and nothing else: no request sweeps the idle keys (that would cost it time in
// proportion to the keys tracked). A key in use keeps its (empty) bucket.
func TestNewKeyForgetsOnlyTheLeastRecentlyUsed(t *testing.T) {
	const keys = 50
	clk := newClock()
	l := New(0.001, 1, keys, clk.Now)
	for i := range keys {
		l.Take(fmt.Sprint("k", i))
	}
	clk.Advance(time.Hour) // every bucket idle and full again: a sweep would forget them all
	l.Take("k0")           // k0 is now the most recently used; k1 the least
	l.Take("new")
	if l.Len() != keys {
		t.Fatalf("%d keys after one new key at the limit; want %d (one forgotten, none swept)", l.Len(), keys)
	}
	if _, ok := l.keys.Peek("k1"); ok {
		t.Fatal("the least recently used key was kept")
	}
	for i := 2; i < keys; i++ {
		if _, ok := l.keys.Peek(fmt.Sprint("k", i)); !ok {
			t.Fatalf("k%d was forgotten, but only the least recently used key should be", i)
		}
	}
	if empty, _ := l.Empty("k0"); !empty {
		t.Fatal("k0 took its token an hour after the rest; its bucket should still be empty")
	}
}
