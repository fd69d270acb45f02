package mysql

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/multi"
)

// errNotChecked means a lease reached a server whose checks have not passed yet.
var errNotChecked = errors.New("mysql: ticket server not checked yet")

// leaseSQL is the lease: one statement, one round trip. It moves the counter and LAST_INSERT_ID(expr)
// makes the OK packet carry its new value, the exclusive end of the range. The statement carries its
// own proof that the server is still the one that was checked: the row must have the step and offset
// the checks established (its residue too), and a counter no lower than the floor, the highest end
// this process has seen there or read in a peer's water marks. A row that fails any of these is left
// untouched, and the lease looks at why (whyNoLease). The counter first rises to the namespace's
// start, so a server that missed a start advanced while it was away never issues below it.
//
// Parameters: first ID at or above start, total, step; name, step, offset, floor, step, offset mod
// step, largest size, first ID at or above start, total, step.
const leaseSQL = `UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(GREATEST(next_id, ?) + ? * ?)
	WHERE name = ? AND step = ? AND id_offset = ? AND next_id >= ? AND MOD(next_id, ?) = ?
	AND ? <= max_block_size AND GREATEST(next_id, ?) <= 9223372036854775807 - ? * ?`

// leaseUpdate takes total IDs with one UPDATE under the settings v and cuts the range into one block
// per size, in order (several callers' leases may share one UPDATE: see coalescer). Every block is
// built from v's step, the one the statement required and used.
func (s *server) leaseUpdate(ctx context.Context, v *serverVars, ns allocator.Namespace, sizes []int64) ([]allocator.Block, error) {
	var total, largest int64
	for _, n := range sizes {
		total += n
		largest = max(largest, n)
	}
	step, offset := v.increment, v.offset
	first, ok := multi.FirstAtLeast(ns.Start, step, offset)
	if !ok {
		return nil, fmt.Errorf("%w: namespace %q starts at %d, which leaves no ID for %s (offset %d of %d)",
			allocator.ErrExhausted, ns.Name, ns.Start, s.Name(), offset, step)
	}
	floor := s.marks.Get(ns.Name)
	res, err := s.db.ExecContext(ctx, leaseSQL, first, total, step,
		ns.Name, step, offset, floor.Value, step, offset%step, largest, first, total, step)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, s.whyNoLease(ctx, v, ns, floor, first, largest, total)
	}
	end, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	whole, err := allocator.BlockEnding(ns.Name, s.Name(), end, step, total, allocator.ExpiryFor(s.pair.cfg.now(), ns.LeaseTTL))
	if err != nil {
		return nil, err
	}
	s.marks.Leased(ns.Name, end, total*step)
	blocks := make([]allocator.Block, len(sizes))
	var from int64
	for i, n := range sizes {
		if blocks[i], err = whole.Slice(from, n); err != nil {
			return nil, err
		}
		from += n
	}
	return blocks, nil
}

// whyNoLease explains an UPDATE that matched no row: the row is gone or was changed behind ticketd
// (the server is not the one that was checked), its counter went below the floor (restored or
// rolled back: the server is fenced), or the request does not fit (size, or the end of the ID space).
func (s *server) whyNoLease(ctx context.Context, v *serverVars, ns allocator.Namespace, floor multi.Mark, first, largest, total int64) error {
	r, err := s.readRow(ctx, ns.Name, v.offset)
	switch {
	case errors.Is(err, errRowMissing) && floor.Value > 0:
		return s.pair.fence(s, []string{ns.Name}, []string{fmt.Sprintf("namespace %q has no row but %s saw its counter at %d", ns.Name, floor.Holder, floor.Value)})
	case err != nil:
		return err
	case r.step != v.increment || r.offset != v.offset:
		return fmt.Errorf("%w: namespace %q on %s now has step %d offset %d, not the step %d offset %d it was checked with; it was changed outside ticketd",
			allocator.ErrMisconfigured, ns.Name, s.Name(), r.step, r.offset, v.increment, v.offset)
	case r.next < floor.Value:
		return s.pair.fence(s, []string{ns.Name}, []string{fmt.Sprintf("namespace %q counter %d is below %d seen by %s", ns.Name, r.next, floor.Value, floor.Holder)})
	case r.next%r.step != v.offset%v.increment:
		return fmt.Errorf("%w: %s's counter for %q is %d, not ≡ offset %d (mod %d); the row was changed outside ticketd",
			allocator.ErrMisconfigured, s.Name(), ns.Name, r.next, v.offset, v.increment)
	case largest > r.ns.MaxBlockSize:
		return fmt.Errorf("%w: %d is above namespace %q's max_block_size %d", allocator.ErrInvalidSize, largest, ns.Name, r.ns.MaxBlockSize)
	}
	return fmt.Errorf("%w: %s's counter for %q is %d; %d more IDs of step %d would pass %d",
		allocator.ErrExhausted, s.Name(), ns.Name, max(r.next, first), total, r.step, int64(math.MaxInt64))
}
