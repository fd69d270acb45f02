package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
)

// A lease that finds no ticket server in rotation is answered 503 at once, with Retry-After: a client
// that backs off may then sleep past the moment a server is back, and its callers wait with it. A client
// that asks with "Prefer: wait=N" (RFC 7240) is held instead: its lease is tried again the moment a
// server is back in rotation, and answered 503 only once N seconds passed with none, without
// Retry-After (it has waited) and with "Preference-Applied: wait=N". The Go SDK asks so.

// maxHold bounds the wait a lease may ask for.
const maxHold = 10 * time.Second

// recoveryPoll is how often the health of the ticket servers is read while a lease is held.
const recoveryPoll = 5 * time.Millisecond

// preferredWait reads the wait a request prefers from its Prefer headers: zero when it asks none. The
// wait is whole seconds; a longer one than the server allows (see holdLimit) is shortened to that.
func (s *Server) preferredWait(r *http.Request) (time.Duration, error) {
	var secs int64 = -1
	for _, line := range r.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(line, ",") {
			token, _, _ := strings.Cut(pref, ";") // parameters of a preference: none for wait
			name, value, ok := strings.Cut(strings.TrimSpace(token), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue // another preference: not ours to judge
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || len(value) > 10 {
				return 0, errorf(http.StatusBadRequest, api.CodeInvalidPrefer,
					"Prefer: wait=%q is not a number of whole seconds; send, for example, Prefer: wait=2 (at most %d is used), or no wait",
					clipReason(value), int(s.holdLimit().Seconds()))
			}
			secs = max(secs, n)
		}
	}
	if secs <= 0 {
		return 0, nil
	}
	return min(time.Duration(min(secs, int64(maxHold/time.Second)))*time.Second, s.holdLimit()), nil
}

// holdLimit is the longest a lease is held: maxHold, and half the write timeout (the other half is
// for the lease once a server is back), in whole seconds.
func (s *Server) holdLimit() time.Duration {
	return max(min(maxHold, (s.cfg.WriteTimeout/2).Truncate(time.Second)), 0)
}

// heldError is a lease that found no ticket server in rotation for the whole wait its client asked.
type heldError struct {
	err  error
	wait time.Duration
}

func (e *heldError) Error() string {
	return fmt.Sprintf("%v (held %s, the wait asked for, with no ticket server in rotation)", e.err, e.wait)
}
func (e *heldError) Unwrap() error { return e.err }

// holdLease tries a lease again each time a ticket server comes back in rotation, until it succeeds,
// fails for another reason than none being in rotation, or wait passes.
func (s *Server) holdLease(ctx context.Context, wait time.Duration, lease func() (allocator.Block, bool, error)) (allocator.Block, bool, error) {
	blk, cached, err := lease()
	if wait <= 0 || s.recovery == nil || !errors.Is(err, allocator.ErrUnavailable) {
		return blk, cached, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for errors.Is(err, allocator.ErrUnavailable) && !s.closing() && !s.recovery.usable() {
		back, done := s.recovery.await()
		select {
		case <-back:
		case <-deadline.C:
			done()
			return blk, cached, &heldError{err: err, wait: wait}
		case <-ctx.Done():
			done()
			return blk, cached, err
		}
		done()
		blk, cached, err = lease()
	}
	return blk, cached, err
}

// recovery wakes the leases held while no ticket server is in rotation once one is back. One goroutine
// reads the servers' health while any lease is held.
type recovery struct {
	health allocator.HealthReporter
	forget func() // called when a server is back, before the held leases wake: the cache's backoff ends
	stop   <-chan struct{}

	mu      sync.Mutex
	waiters int
	back    chan struct{} // closed by the watcher when a server is back; nil while none watches
}

// usable reports whether any ticket server is in rotation.
func (r *recovery) usable() bool {
	for _, h := range r.health.Health() {
		if h.Healthy {
			return true
		}
	}
	return false
}

// await returns a channel closed once a server is in rotation, and the call to make when no longer
// waiting on it.
func (r *recovery) await() (<-chan struct{}, func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiters++
	if r.back == nil {
		r.back = make(chan struct{})
		go r.watch(r.back)
	}
	return r.back, func() {
		r.mu.Lock()
		r.waiters--
		r.mu.Unlock()
	}
}

// watch reads the servers' health until one is usable or the server closes (then it closes back), or
// nobody waits any more.
func (r *recovery) watch(back chan struct{}) {
	t := time.NewTicker(recoveryPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.stop:
			r.retire(back)
			return
		}
		r.mu.Lock()
		if r.waiters == 0 { // under the lock: a wait that begins now starts a watch of its own
			r.back = nil
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if r.usable() {
			r.forget()
			r.retire(back)
			return
		}
	}
}

// retire ends back's watch and wakes whoever waits on it; a later wait starts a new watch.
func (r *recovery) retire(back chan struct{}) {
	r.mu.Lock()
	if r.back == back {
		r.back = nil
	}
	r.mu.Unlock()
	close(back)
}
