package failover

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

func testConfig(c *allocatortest.Clock, logs *allocatortest.LogBuffer) *Config {
	return &Config{Noun: "ticket server", Every: "every server", Failover: allocator.Failover{MinBackoff: 100 * time.Millisecond,
		MaxBackoff: time.Second, AttemptTimeout: time.Second, Timeout: 2 * time.Second, SettingsTTL: time.Minute}, IsFault: IsServerFault,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Now: c.Now}
}

// TestBackoffDoublesWithJitterUpToMax checks each failure's wait against its bounds: MinBackoff
// doubled per failure, capped at MaxBackoff, and jittered to between half of it and all of it.
func TestBackoffDoublesWithJitterUpToMax(t *testing.T) {
	c := allocatortest.NewClockAt(time.Unix(1000, 0))
	var logs allocatortest.LogBuffer
	m := NewMember("a:1", testConfig(c, &logs))
	if m.Usable() || !m.Due(c.Now()) {
		t.Fatal("an unchecked member must be down and due")
	}
	if h := m.Health(); h.Healthy || h.Error != "not checked yet" || h.Name != "a:1" {
		t.Fatalf("unchecked health %+v", h)
	}
	m.MarkUsable()
	boom := errors.New("connection refused")
	for i, ms := range []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} {
		full := ms * time.Millisecond
		m.MarkDown(boom)
		if m.Usable() {
			t.Fatalf("failure %d: still usable", i+1)
		}
		if m.Due(c.Now().Add(full/2 - time.Nanosecond)) {
			t.Fatalf("failure %d: due before half of %v", i+1, full)
		}
		if !m.Due(c.Now().Add(full)) {
			t.Fatalf("failure %d: not due after %v", i+1, full)
		}
	}
	if h := m.Health(); h.Healthy || h.Error != "connection refused" {
		t.Fatalf("health after failures %+v", h)
	}
	// Only the first failure of a usable member is logged.
	if n := strings.Count(logs.String(), "ticket server down; leasing from the others"); n != 1 {
		t.Fatalf("%d down warnings, want 1: %s", n, logs.String())
	}
	// A success does not bring a down member back, and a usable one starts its backoff afresh.
	m.MarkUp()
	if m.Usable() {
		t.Fatal("MarkUp brought a down member back")
	}
	m.MarkUsable()
	m.MarkUp()
	m.MarkDown(boom)
	if !m.Due(c.Now().Add(100 * time.Millisecond)) {
		t.Fatal("backoff did not start afresh after a usable member succeeded")
	}
}

// TestReviveWith checks that a revival runs the check once at a time, keeps a member that fails it
// down, and puts one that passes back in rotation, logging how long it was down.
func TestReviveWith(t *testing.T) {
	c := allocatortest.NewClockAt(time.Unix(1000, 0))
	var logs allocatortest.LogBuffer
	m := NewMember("b:2", testConfig(c, &logs))
	m.MarkUsable()
	m.MarkDown(errors.New("gone"))
	c.Advance(3 * time.Second)

	refused := errors.New("still misconfigured")
	if err := m.ReviveWith(context.Background(), func(context.Context) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("ReviveWith: %v, want the check's error", err)
	}
	if m.Usable() || m.Health().Error != refused.Error() {
		t.Fatalf("after a failed check: usable %v, health %+v", m.Usable(), m.Health())
	}

	var mu sync.Mutex
	running, most, calls := 0, 0, 0
	check := func(context.Context) error {
		mu.Lock()
		running++
		calls++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.ReviveWith(context.Background(), check); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if most != 1 || calls != 1 {
		t.Fatalf("%d checks, at most %d at once; want 1 (the others find the member usable)", calls, most)
	}
	if h := m.Health(); !h.Healthy || h.Error != "" {
		t.Fatalf("after revival %+v", h)
	}
	if out := logs.String(); !strings.Contains(out, "ticket server back in rotation") || !strings.Contains(out, "down_for=3s") {
		t.Fatalf("log %q does not say the server is back after 3s", out)
	}
}

// TestReviveOfAServerNeverInRotation: a server whose first check failed (fenced, refused, down when
// the process started) is logged back in rotation after the time since the process first knew it.
func TestReviveOfAServerNeverInRotation(t *testing.T) {
	c := allocatortest.NewClockAt(time.Unix(1000, 0))
	var logs allocatortest.LogBuffer
	m := NewMember("c:3", testConfig(c, &logs))
	m.MarkDown(errors.New("fenced"))
	c.Advance(2 * time.Second)
	if err := m.ReviveWith(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "ticket server back in rotation") || !strings.Contains(out, "down_for=2s") {
		t.Fatalf("log %q does not say the server is back after 2s", out)
	}
}

func TestFirstAtLeast(t *testing.T) {
	for _, c := range []struct{ start, step, offset, want int64 }{
		{1, 2, 1, 1}, {1, 2, 2, 2}, {2, 2, 1, 3}, {1000, 2, 1, 1001}, {1000, 2, 2, 1000},
		{7, 3, 3, 9}, {7, 3, 1, 7}, {0, 2, 2, 2}, {1, 1, 1, 1}, {math.MaxInt64, 1, 1, math.MaxInt64},
	} {
		got, ok := FirstAtLeast(c.start, c.step, c.offset)
		if !ok || got != c.want {
			t.Errorf("FirstAtLeast(%d, %d, %d) = %d, %v; want %d", c.start, c.step, c.offset, got, ok, c.want)
		}
	}
	if _, ok := FirstAtLeast(math.MaxInt64, 2, 2); ok {
		t.Error("no even ID at MaxInt64")
	}
}
