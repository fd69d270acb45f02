package client

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// hookRecord counts what the hooks were told.
type hookRecord struct {
	mu                                 sync.Mutex
	refills, refillErrors, refilledIDs int64
	stalls, hedges, hedgesWon          int64
	discarded                          map[string]int64
}

func (r *hookRecord) hooks() Hooks {
	r.discarded = map[string]int64{}
	return Hooks{
		Refill: func(ids int64, took time.Duration, err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.refillErrors++
				return
			}
			r.refills++
			r.refilledIDs += ids
		},
		Stall: func() { r.mu.Lock(); r.stalls++; r.mu.Unlock() },
		Hedge: func(won bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if won {
				r.hedgesWon++
			} else {
				r.hedges++
			}
		},
		Discard: func(ids int64, reason string) { r.mu.Lock(); r.discarded[reason] += ids; r.mu.Unlock() },
	}
}

// matches reports whether the hooks were told what Stats counts.
func (r *hookRecord) matches(st Stats) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var discarded int64
	for _, n := range r.discarded {
		discarded += n
	}
	return r.refills == st.Refills && r.refillErrors == st.RefillErrors && r.stalls == st.Stalls &&
		r.hedges == st.Hedges && r.hedgesWon == st.HedgesWon && discarded == st.Discarded
}

// check fails unless the hooks were told what Stats counts.
func (r *hookRecord) check(t *testing.T, st Stats) {
	t.Helper()
	if !r.matches(st) {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("hooks saw %d refills, %d errors, %d stalls, %d hedges (%d won), %v discarded; Stats %+v",
			r.refills, r.refillErrors, r.stalls, r.hedges, r.hedgesWon, r.discarded, st)
	}
}

// TestHooksSeeRefillsStallsAndDiscards: a failed refill, refills, a stall and IDs dropped at their
// block's expiry reach the hooks as Stats counts them.
func TestHooksSeeRefillsStallsAndDiscards(t *testing.T) {
	clk := newClock()
	fake := newFakeWith(fakeConfig{Now: clk.Now,
		Namespaces: []testNS{{Name: "ttl", BlockSize: 100, MaxBlockSize: 100, LeaseTTL: time.Minute}}})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one shard: no run left on another processor
	var rec hookRecord
	c := newClient(t, FromBackend(fake), "ttl", withClock(clk), withProcs(1), WithHooks(rec.hooks()),
		WithBackoff(time.Millisecond, time.Millisecond))
	for range 30 {
		mustNext(t, c)
	}
	clk.Advance(time.Minute) // the block expires: 70 IDs dropped
	fake.SetLeaseErr(errors.New("down"))
	done := make(chan error, 1)
	go func() { _, err := c.Next(ctxTimeout(t, time.Minute)); done <- err }() // waits: a stall
	eventually(t, "a failed refill and a stall", func() bool { st := c.Stats(); return st.RefillErrors > 0 && st.Stalls > 0 })
	fake.SetLeaseErr(nil)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			st := c.Stats()
			if st.Refills < 2 || st.Stalls < 1 || st.RefillErrors < 1 || st.Discarded != 70 {
				t.Fatalf("stats %+v; want refills, a stall, a refill error and 70 IDs discarded", st)
			}
			rec.check(t, st)
			if rec.discarded[DiscardExpired] != 70 || rec.refilledIDs != 100*st.Refills {
				t.Fatalf("hooks saw %v discarded and %d IDs refilled", rec.discarded, rec.refilledIDs)
			}
			return
		case <-time.After(time.Millisecond):
			clk.Advance(10 * time.Millisecond) // the retry's backoff
		}
	}
}
