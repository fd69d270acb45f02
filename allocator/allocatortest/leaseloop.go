package allocatortest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// LeaseLoop leases from a backend on several goroutines, one lease after another, until Stop, and
// keeps every block, with when its lease began and ended, and every error: a fault test runs one while
// it kills and restarts servers. Goroutines record their blocks in whatever order they get to it, so a
// test that asks what came before or after an event goes by those times, never by the record order.
// Safe for concurrent use.
type LeaseLoop struct {
	mu     sync.Mutex
	blocks []allocator.Block
	times  []leaseTimes // times[i] is when the lease of blocks[i] began and ended
	errs   []error
	count  atomic.Int64

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// StartLeasing starts goroutines that lease size IDs of namespace from b until Stop.
func StartLeasing(b allocator.Backend, namespace string, size int64, goroutines int) *LeaseLoop {
	l := &LeaseLoop{stop: make(chan struct{})}
	for range goroutines {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				began := time.Now()
				blk, err := b.Lease(context.Background(), namespace, size)
				ended := time.Now()
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.blocks = append(l.blocks, blk)
					l.times = append(l.times, leaseTimes{began, ended})
				}
				l.mu.Unlock()
				l.count.Add(1)
			}
		}()
	}
	return l
}

type leaseTimes struct{ began, ended time.Time }

// Stop stops the goroutines and waits for their last leases. Safe to call twice.
func (l *LeaseLoop) Stop() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// Count is the number of leases finished so far, failed ones included.
func (l *LeaseLoop) Count() int64 { return l.count.Load() }

// Blocks returns the blocks leased so far, in the order they were recorded.
func (l *LeaseLoop) Blocks() []allocator.Block {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]allocator.Block(nil), l.blocks...)
}

// Errs returns the errors of the leases that failed so far.
func (l *LeaseLoop) Errs() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// WaitFor waits until n more leases have finished, and fails t when they take over 30 seconds.
func (l *LeaseLoop) WaitFor(t testing.TB, n int64) {
	t.Helper()
	target := l.count.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for l.count.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("leases stalled at %d", l.count.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// EndedBefore returns the blocks whose leases ended before t.
func (l *LeaseLoop) EndedBefore(t time.Time) []allocator.Block {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []allocator.Block
	for i, b := range l.blocks {
		if l.times[i].ended.Before(t) {
			out = append(out, b)
		}
	}
	return out
}

// WaitForServer waits until some lease that began after since returned a block from server, and
// returns every such block; it fails t when there is none after 20 seconds. A test that restarts a
// server passes the time the server was started again.
func (l *LeaseLoop) WaitForServer(t testing.TB, server string, since time.Time) []allocator.Block {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var found []allocator.Block
		l.mu.Lock()
		for i, b := range l.blocks {
			if b.Server == server && l.times[i].began.After(since) {
				found = append(found, b)
			}
		}
		l.mu.Unlock()
		if len(found) > 0 {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s leased nothing within 20s (in leases begun after %s)", server, since.Format(time.StampMicro))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restartable is a ticket server that a test can kill and start again, as internal/testservers runs
// them.
type Restartable interface {
	Kill() error
	Start(ctx context.Context) error
}

// CheckKilledMidRun leases size-10 blocks of namespace from b on 16 goroutines, SIGKILLs victim (the
// server b calls server) after 500 leases, lets duringKill more leases pass, starts it again and waits
// until it serves. No lease may fail, no ID may be issued twice, and every block the victim leases in a
// lease begun after its restart must start above every ID it issued in leases that ended before the
// restart began. It returns those blocks, for the backend's own checks.
func CheckKilledMidRun(t testing.TB, b allocator.Backend, namespace, server string, victim Restartable, duringKill int64) []allocator.Block {
	t.Helper()
	l := StartLeasing(b, namespace, 10, 16)
	defer l.Stop()
	l.WaitFor(t, 500)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := l.Count()
	l.WaitFor(t, duringKill)
	restarting := time.Now()
	if err := victim.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	afterRestart := l.WaitForServer(t, server, restarted)
	l.Stop()
	if errs := l.Errs(); len(errs) > 0 {
		t.Fatalf("%d of %d leases failed while %s was down; first: %v", len(errs), l.Count(), server, errs[0])
	}
	highest := Highest(l.EndedBefore(restarting), server)
	if highest == 0 {
		t.Fatalf("%s issued nothing before the kill", server)
	}
	for _, blk := range afterRestart {
		if blk.Start <= highest {
			t.Fatalf("after SIGKILL and restart, %s leased %v, not above its highest earlier ID %d", server, blk, highest)
		}
	}
	if err := CheckDisjoint(l.Blocks()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leases (%d after the kill), none failed; %s's highest ID before the kill %d, first block after restart %v",
		l.Count(), l.Count()-killedAt, server, highest, afterRestart[0])
	return afterRestart
}

// LeaseUntil calls lease until it returns a block from server, and returns every block it leased,
// that one last: for a test that waits for a server to serve again. It fails t on a lease error, or
// when server has served nothing after 20 seconds.
func LeaseUntil(t testing.TB, server string, lease func() (allocator.Block, error)) []allocator.Block {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var blocks []allocator.Block
	for {
		blk, err := lease()
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, blk)
		if blk.Server == server {
			return blocks
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never served within 20s", server)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Highest returns the last ID of the highest block that server issued among blocks, or 0.
func Highest(blocks []allocator.Block, server string) int64 {
	var h int64
	for _, b := range blocks {
		if last, _ := b.Last(); b.Server == server && last > h {
			h = last
		}
	}
	return h
}

// CheckUnavailable leases from b three times with every ticket server down: each lease must fail with
// ErrUnavailable within timeout, the backend's own bound (plus 2 seconds of slack: what is tested is
// the bound, not the machine's speed), and, when b reports health, no server may be healthy or lack a
// reason.
func CheckUnavailable(t testing.TB, b allocator.Backend, namespace string, size int64, timeout time.Duration) {
	t.Helper()
	for range 3 {
		start := time.Now()
		_, err := b.Lease(context.Background(), namespace, size)
		took := time.Since(start)
		if !errors.Is(err, allocator.ErrUnavailable) {
			t.Fatalf("with every server down: %v, want ErrUnavailable", err)
		}
		if took > timeout+2*time.Second {
			t.Fatalf("ErrUnavailable after %v, configured timeout %v", took, timeout)
		}
	}
	if hr, ok := b.(allocator.HealthReporter); ok {
		for _, h := range hr.Health() {
			if h.Healthy || h.Error == "" {
				t.Fatalf("health %+v, want unhealthy with a reason", h)
			}
		}
	}
}

// LeaseWithin leases from b until a lease succeeds, and fails t when none has after d: for a test
// that waits for a server to come back.
func LeaseWithin(t testing.TB, b allocator.Backend, namespace string, size int64, d time.Duration) allocator.Block {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		blk, err := b.Lease(context.Background(), namespace, size)
		if err == nil {
			return blk
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease within %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LogBuffer is a log destination that goroutines may write while a test reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
