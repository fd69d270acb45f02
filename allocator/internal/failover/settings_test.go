package failover

import (
	"context"
	"errors"
	"testing"

	"github.com/ticketd/ticketd/allocator"
)

// TestReadSettingsServesLeases: ReadSettings returns the settings without any server's state and
// keeps them as the copy leases use, so that a lease right after it asks no server for settings.
func TestReadSettingsServesLeases(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	ns, err := fx.set.ReadSettings(ctx, "orders")
	if err != nil || ns.Name != "orders" || ns.BlockSize != 10 || ns.Servers != nil {
		t.Fatalf("ReadSettings: %+v, %v", ns, err)
	}
	if _, err := fx.set.ReadSettings(ctx, "Orders"); !errors.Is(err, allocator.ErrInvalidNamespace) {
		t.Fatalf("a bad name: %v", err)
	}
	if _, err := fx.set.ReadSettings(ctx, "links"); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("an unknown namespace: %v", err)
	}
	boom := errors.New("no reads now")
	for _, s := range fx.servers {
		s.set(boom, nil)
	}
	blk, err := fx.set.Lease(ctx, "orders", 0, "", issue(nil))
	if err != nil || blk.Size != 10 {
		t.Fatalf("lease with the settings read before: %+v, %v", blk, err)
	}
}

// TestLeaseRefusesABadRequestFirst: a bad name or a size out of range is refused before any server
// is asked.
func TestLeaseRefusesABadRequestFirst(t *testing.T) {
	fx := newFixture(t, 2, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size int64
		want error
	}{
		{"Orders", 1, allocator.ErrInvalidNamespace},
		{"orders", -1, allocator.ErrInvalidSize},
		{"orders", allocator.MaxBlockSizeLimit + 1, allocator.ErrInvalidSize},
	} {
		if _, err := fx.set.Lease(ctx, tc.name, tc.size, "", issue(nil)); !errors.Is(err, tc.want) {
			t.Errorf("Lease(%q, %d): %v, want %v", tc.name, tc.size, err, tc.want)
		}
	}
	fx.obs.mu.Lock()
	defer fx.obs.mu.Unlock()
	if len(fx.obs.leases) != 0 {
		t.Fatalf("attempts %v, want none", fx.obs.leases)
	}
}
