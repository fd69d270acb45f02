package allocatortest_test

import (
	"testing"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

func TestCheckDisjoint(t *testing.T) {
	odd := allocator.Block{Start: 1, Step: 2, Size: 10}   // 1..19
	even := allocator.Block{Start: 2, Step: 2, Size: 10}  // 2..20
	odd2 := allocator.Block{Start: 21, Step: 2, Size: 10} // 21..39
	if err := allocatortest.CheckDisjoint([]allocator.Block{odd, even, odd2}); err != nil {
		t.Fatalf("odd and even interleave without sharing: %v", err)
	}
	overlap := allocator.Block{Start: 19, Step: 2, Size: 2}
	if err := allocatortest.CheckDisjoint([]allocator.Block{odd, even, odd2, overlap}); err == nil {
		t.Fatal("19 is in two blocks, want an error")
	}
	stride1 := allocator.Block{Start: 40, Step: 1, Size: 5} // 40..44
	if err := allocatortest.CheckDisjoint([]allocator.Block{odd, odd2, stride1}); err != nil {
		t.Fatal(err)
	}
	if err := allocatortest.CheckDisjoint([]allocator.Block{odd, allocator.Block{Start: 5, Step: 1, Size: 1}}); err == nil {
		t.Fatal("5 is in a step-2 and a step-1 block, want an error")
	}
}

func TestIDSet(t *testing.T) {
	s := allocatortest.NewIDSet(4)
	for _, id := range []int64{1, 2, 3, 2} {
		s.Add(id)
	}
	if s.Len() != 3 || len(s.Duplicates) != 1 || s.Duplicates[0] != 2 {
		t.Fatalf("set: len %d dups %v", s.Len(), s.Duplicates)
	}
}
