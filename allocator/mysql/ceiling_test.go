package mysql

import (
	"context"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/schema"
)

// TestMaxIDMigrateInPlace takes a database at the schema before namespaces had a ceiling, with rows in
// it, and migrates it (twice): every row gets the largest BIGINT as its max_id, its counter is kept,
// leases continue above it, and a ceiling set afterwards holds.
func TestMaxIDMigrateInPlace(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	db := schemaAt(t, dsns[0], 4)
	testenv.Exec(t, dsns[0], `INSERT INTO ticketd_namespaces (name, next_id, step, id_offset, start_id, block_size, max_block_size, lease_ttl_ms, created_us, updated_us)
		VALUES ('orders', 5001, 2, 1, 1, 100, 1000, 0, 1, 1)`)
	for range 2 {
		if _, err := schema.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	// A migration interrupted after its ADD COLUMN, before it was recorded, runs again without harm.
	testenv.Exec(t, dsns[0], "DELETE FROM ticketd_schema_migrations WHERE version = 5")
	if applied, err := schema.Migrate(ctx, db); err != nil || len(applied) != 1 {
		t.Fatalf("migrating again after an interrupted migration: %v, %v", applied, err)
	}
	var maxID int64
	if err := db.QueryRow("SELECT max_id FROM ticketd_namespaces WHERE name = 'orders'").Scan(&maxID); err != nil || maxID != allocator.DefaultMaxID {
		t.Fatalf("max_id %d (%v) after the migration, want %d", maxID, err, int64(allocator.DefaultMaxID))
	}
	if got := counterOf(t, dsns[0], "orders"); got != 5001 {
		t.Fatalf("counter %d after the migration, want 5001", got)
	}
	p := openStore(t, dsns[:1], nil)
	ns, err := p.Namespace(ctx, "orders")
	if err != nil || ns.MaxID != allocator.DefaultMaxID {
		t.Fatalf("namespace after the migration: %+v, %v", ns, err)
	}
	b, err := p.Lease(ctx, "orders", 10)
	if err != nil || b.Start != 5001 {
		t.Fatalf("lease after the migration: %v, %v", b, err)
	}
	if _, err := p.UpdateNamespace(ctx, allocator.Namespace{Name: "orders", BlockSize: 100, MaxBlockSize: 1000, MaxID: 5100}); err != nil {
		t.Fatal(err)
	}
	b, err = p.Lease(ctx, "orders", 100)
	if last, _ := b.Last(); err != nil || b.Size != 40 || last != 5099 {
		t.Fatalf("the last lease below max_id 5100: %v, %v, want 40 IDs up to 5099", b, err)
	}
}
