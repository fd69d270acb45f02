package allocator

import (
	"fmt"
	"math"
	"math/bits"
)

// Fit is how many IDs of a lease of size IDs of step, starting at first, lie at or below the ceiling
// maxID: size when all of them do, fewer for the last block before the ceiling, 0 when first is above
// it.
func Fit(first, step, size, maxID int64) int64 {
	if first > maxID || step < 1 || size < 1 {
		return 0
	}
	return min(size, (maxID-first)/step+1)
}

// Remaining is how many IDs a server whose next ID is next, of the given step, may still issue at or
// below maxID.
func Remaining(next, step, maxID int64) uint64 {
	if next < 1 || step < 1 || next > maxID {
		return 0
	}
	return uint64((maxID-next)/step) + 1
}

// IDsRemaining is how many IDs the namespace's ticket servers may still issue below its ceiling, the
// sum over the servers whose counter is known (a server that has not answered counts for nothing).
// ok is false when no server's counter is known.
func (n Namespace) IDsRemaining() (left uint64, ok bool) {
	maxID := n.MaxID
	if maxID == 0 {
		maxID = DefaultMaxID
	}
	for _, s := range n.Servers {
		if s.Next < 1 || s.Step < 1 {
			continue
		}
		sum, carry := bits.Add64(left, Remaining(s.Next, s.Step, maxID), 0)
		if carry != 0 {
			sum = math.MaxUint64
		}
		left, ok = sum, true
	}
	return left, ok
}

// HighestIssued is the highest ID the namespace's servers may have issued: below each known counter by
// one step (a counter an advanced start raised counts as issued up to it). Zero when none may have.
func (n Namespace) HighestIssued() int64 {
	var high int64
	for _, s := range n.Servers {
		if s.Next > s.Step && s.Step >= 1 {
			high = max(high, s.Next-s.Step)
		}
	}
	return high
}

// CheckLowering refuses a ceiling below an ID already issued: ErrInvalidSettings naming the highest.
func CheckLowering(name string, maxID, highest int64) error {
	if highest > maxID {
		return fmt.Errorf("%w: max_id %d of namespace %q is below %d, the highest ID already issued (or reserved by an advanced start)",
			ErrInvalidSettings, maxID, name, highest)
	}
	return nil
}
