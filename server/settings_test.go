package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/testenv"
)

// settingsCounter counts how a cache reads namespace settings from the backend it wraps.
type settingsCounter struct {
	allocator.Backend
	settings, namespace atomic.Int64
}

func (s *settingsCounter) Namespace(ctx context.Context, name string) (allocator.Namespace, error) {
	s.namespace.Add(1)
	return s.Backend.Namespace(ctx, name)
}

func (s *settingsCounter) Settings(ctx context.Context, name string) (allocator.Namespace, error) {
	s.settings.Add(1)
	ns, err := s.Backend.Namespace(ctx, name)
	ns.Servers = nil
	return ns, err
}

// TestCacheReadsOnlySettings: a backend that reads settings apart from its counters
// (allocator.SettingsReader) is asked only for the settings, at the first lease and at each refresh.
func TestCacheReadsOnlySettings(t *testing.T) {
	store := testenv.Embedded(t, allocator.Namespace{Name: "orders", BlockSize: 5})
	ctx := context.Background()
	b := &settingsCounter{Backend: store}
	var now atomic.Int64
	now.Store(time.Unix(1000, 0).UnixNano())
	c := newSegmentCache(CacheConfig{MinSegment: 500, SettingsTTL: time.Second}, b, NewMetrics(), quiet,
		func() time.Time { return time.Unix(0, now.Load()) })
	defer c.close()
	if _, _, err := c.lease(ctx, "orders", 0, ""); err != nil {
		t.Fatal(err)
	}
	if got := b.settings.Load(); got != 1 {
		t.Fatalf("%d settings reads for the first lease, want 1", got)
	}
	now.Add(int64(2 * time.Second))
	deadline := time.Now().Add(5 * time.Second)
	for b.settings.Load() < 2 && time.Now().Before(deadline) {
		if _, _, err := c.lease(ctx, "orders", 0, ""); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if got := b.settings.Load(); got < 2 {
		t.Fatalf("%d settings reads after the settings grew old, want a refresh", got)
	}
	if got := b.namespace.Load(); got != 0 {
		t.Fatalf("%d Namespace calls, want none: the counters are not needed", got)
	}
}
