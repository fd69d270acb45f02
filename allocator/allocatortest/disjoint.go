// Package allocatortest holds the conformance suite every allocator.Backend runs, checks for
// uniqueness of leased blocks, the load, fault and benchmark helpers the backends' tests share, and
// what the server's and the SDK's tests run on instead of ticket servers: an in-memory backend
// (Memory), a programmable fake (Fake) and a manual clock (Clock). It is imported by tests only.
package allocatortest

import (
	"fmt"
	"sort"

	"github.com/ticketd/ticketd/allocator"
)

// CheckDisjoint returns an error naming the first two blocks that share an ID, or nil.
// Blocks with the same step are compared per residue class (start mod step) by interval merge, so a
// million blocks are checked in O(n log n); blocks of different steps are compared ID by ID when their
// ranges overlap.
func CheckDisjoint(blocks []allocator.Block) error {
	type key struct{ step, residue int64 }
	groups := map[key][]allocator.Block{}
	for _, b := range blocks {
		if err := b.Validate(); err != nil {
			return fmt.Errorf("invalid block %v: %w", b, err)
		}
		k := key{b.Step, b.Start % b.Step}
		groups[k] = append(groups[k], b)
	}
	for _, g := range groups {
		sort.Slice(g, func(i, j int) bool { return g[i].Start < g[j].Start })
		for i := 1; i < len(g); i++ {
			prevLast, _ := g[i-1].Last()
			if g[i].Start <= prevLast {
				return fmt.Errorf("blocks overlap: %v and %v", g[i-1], g[i])
			}
		}
	}
	if len(groups) < 2 {
		return nil
	}
	// Different residues of one step never meet; different steps might.
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[i].step == keys[j].step {
				continue
			}
			for _, a := range groups[keys[i]] {
				for _, b := range groups[keys[j]] {
					if id, ok := firstCommon(a, b); ok {
						return fmt.Errorf("blocks %v and %v share ID %d", a, b, id)
					}
				}
			}
		}
	}
	return nil
}

// firstCommon finds an ID in both blocks by walking the smaller one.
func firstCommon(a, b allocator.Block) (int64, bool) {
	if a.Size > b.Size {
		a, b = b, a
	}
	for k := int64(0); k < a.Size; k++ {
		id, _ := a.ID(k)
		if b.Contains(id) {
			return id, true
		}
	}
	return 0, false
}

// IDSet records IDs and counts the ones seen twice. It is not safe for concurrent use.
type IDSet struct {
	seen       map[int64]struct{}
	Duplicates []int64
}

// NewIDSet returns an empty set sized for n IDs.
func NewIDSet(n int) *IDSet { return &IDSet{seen: make(map[int64]struct{}, n)} }

// Add records id and reports whether it was new.
func (s *IDSet) Add(id int64) bool {
	if _, dup := s.seen[id]; dup {
		s.Duplicates = append(s.Duplicates, id)
		return false
	}
	s.seen[id] = struct{}{}
	return true
}

// Len is the number of distinct IDs.
func (s *IDSet) Len() int { return len(s.seen) }
