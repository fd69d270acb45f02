package embedded_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/embedded"
)

func TestConformance(t *testing.T) {
	allocatortest.Run(t, func(t *testing.T) allocator.Backend {
		s, err := embedded.Open(embedded.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, allocatortest.Options{LeasesPerGoroutine: 20})
}

func TestReopenContinuesAboveEveryIssuedID(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateNamespace(ctx, allocator.Namespace{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	var blocks []allocator.Block
	for range 5 {
		b, err := s.Lease(ctx, "orders", 100)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.Lease(ctx, "orders", 100)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := blocks[4].Last(); b.Start <= last {
		t.Fatalf("after reopen leased %v, at or below the last issued ID %d", b, last)
	}
	if err := allocatortest.CheckDisjoint(append(blocks, b)); err != nil {
		t.Fatal(err)
	}
	if b.Step != 1 || b.Server != embedded.ServerName {
		t.Fatalf("block %+v: want stride 1 from %q", b, embedded.ServerName)
	}
}

func TestSecondOpenIsRefusedWithAClearError(t *testing.T) {
	dir := t.TempDir()
	s, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = embedded.Open(embedded.Config{Dir: dir, LockTimeout: 50_000_000})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second Open: %v, want a 'locked by another process' error", err)
	}
}
