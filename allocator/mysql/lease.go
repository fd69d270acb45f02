package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/internal/failover"
)

// errNotChecked means a lease reached a server whose checks have not passed yet.
var errNotChecked = errors.New("mysql: ticket server not checked yet")

// leaseSQL is the lease: one statement, one round trip. It moves the counter and LAST_INSERT_ID(expr)
// makes the OK packet carry its new value, the exclusive end of the range. The statement carries its
// own proof that the server is still the one that was checked: the row must have the step and offset
// the checks established (its residue too), and a counter no lower than the floor, the highest end
// this process has seen there or read in a peer's water marks. It also keeps the whole range at or
// below the row's own max_id, the namespace's ceiling. A row that fails any of these is left
// untouched, and the lease looks at why (whyNoLease). The counter first rises to the namespace's
// start, so a server that missed a start advanced while it was away never issues below it.
//
// The ceiling is the lower of the row's max_id and the newest this process knows (the settings it
// leases by, merged from every server's copy): a server that missed a lower ceiling — the change cut
// off on its way there, or a row written by a ticketd that ignores ceilings — never leases above it
// either, in any process that knows it.
//
// Parameters: first ID at or above start, total, step; name, step, offset, floor, step, offset mod
// step, largest size, first ID at or above start, total, step, first ID at or above start, known
// max_id, total, step.
const leaseSQL = `UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(GREATEST(next_id, ?) + ? * ?)
	WHERE name = ? AND step = ? AND id_offset = ? AND next_id >= ? AND MOD(next_id, ?) = ?
	AND ? <= max_block_size AND GREATEST(next_id, ?) <= 9223372036854775807 - ? * ?
	AND GREATEST(next_id, ?) <= LEAST(max_id, ?) - (? - 1) * ?`

// lastLeaseSQL takes the last IDs below the ceiling, fewer than asked for: the counter moves from the
// value whyNoLease read to the given end only if it is still that value, under the same proof as
// leaseSQL and the max_id the end was computed from.
//
// Parameters: end; name, step, offset, counter read, floor, max_id read, largest size.
const lastLeaseSQL = `UPDATE ticketd_namespaces SET next_id = LAST_INSERT_ID(?)
	WHERE name = ? AND step = ? AND id_offset = ? AND next_id = ? AND next_id >= ? AND max_id = ?
	AND ? <= max_block_size`

// fenceBelow fences the server for a namespace whose counter, read as next, is below its floor.
func (s *server) fenceBelow(ns string, next int64, floor failover.Mark) error {
	return s.pair.fence(s, []string{ns}, []string{fmt.Sprintf("namespace %q counter %d is below %d seen by %s", ns, next, floor.Value, floor.Holder)})
}

// ceilingHit says that a lease does not fit below the namespace's ceiling on a server: row is what
// whyNoLease read there.
type ceilingHit struct{ row rowSettings }

func (c *ceilingHit) Error() string {
	return fmt.Sprintf("mysql: namespace %q on a server at %d reaches its max_id %d", c.row.ns.Name, c.row.next, c.row.ns.MaxID)
}

// maxCeilingTries bounds the attempts at the last block before the ceiling while other processes move
// the counter between the read and the statement.
const maxCeilingTries = 16

// leaseUpdate takes total IDs with one UPDATE under the settings v and cuts the range into one block
// per size, in order (several callers' leases may share one UPDATE: see coalescer). Every block is
// built from v's step, the one the statement required and used. Near the namespace's ceiling the range
// is shorter than total: the blocks that fit come first, the one the ceiling falls in is cut short
// (its Size says so), and there are fewer blocks than sizes; ErrExhausted when not one ID is left.
func (s *server) leaseUpdate(ctx context.Context, v *serverVars, ns allocator.Namespace, sizes []int64) ([]allocator.Block, error) {
	var total, largest int64
	for _, n := range sizes {
		total += n
		largest = max(largest, n)
	}
	step, offset := v.increment, v.offset
	first, ok := failover.FirstAtLeast(ns.Start, step, offset)
	if !ok {
		return nil, fmt.Errorf("%w: namespace %q starts at %d, which leaves no ID for %s (offset %d of %d)",
			allocator.ErrExhausted, ns.Name, ns.Start, s.Name(), offset, step)
	}
	for try := 0; ; try++ {
		floor := s.marks.Get(ns.Name)
		res, err := s.db.ExecContext(ctx, leaseSQL, first, total, step,
			ns.Name, step, offset, floor.Value, step, offset%step, largest, first, total, step, first, ns.WithDefaults().MaxID, total, step)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		taken := total
		if n == 0 {
			err := s.whyNoLease(ctx, v, ns, floor, first, largest, total)
			var hit *ceilingHit
			if !errors.As(err, &hit) {
				return nil, err
			}
			if taken, res, err = s.leaseLast(ctx, v, ns, hit.row, floor, first, total, largest); err != nil {
				return nil, err
			}
			if res == nil {
				if try < maxCeilingTries && ctx.Err() == nil {
					continue // the counter moved since it was read: look again
				}
				return nil, fmt.Errorf("%w: the counter of %q on %s kept moving while its last IDs were leased", allocator.ErrUnavailable, ns.Name, s.Name())
			}
		}
		end, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		return s.cut(ns, end, v, taken, sizes)
	}
}

// leaseLast takes the IDs left below the ceiling on a server whose row was read as r, fewer than
// total: the result is nil when the counter moved since, and ErrExhausted when none is left.
func (s *server) leaseLast(ctx context.Context, v *serverVars, ns allocator.Namespace, r rowSettings, floor failover.Mark, first, total, largest int64) (int64, sql.Result, error) {
	step := v.increment
	base := max(r.next, first)
	maxID := min(r.ns.MaxID, ns.WithDefaults().MaxID)
	ceiling := min(maxID, math.MaxInt64-step) // the counter, one step past the last ID, stays an int64
	taken := allocator.Fit(base, step, total, ceiling)
	if taken == 0 {
		return 0, nil, fmt.Errorf("%w: namespace %q reached its max_id %d on %s (counter %d, step %d)",
			allocator.ErrExhausted, ns.Name, maxID, s.Name(), r.next, step)
	}
	res, err := s.db.ExecContext(ctx, lastLeaseSQL, base+taken*step,
		ns.Name, step, v.offset, r.next, floor.Value, r.ns.MaxID, largest)
	if err != nil {
		return 0, nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, nil, err
	}
	return taken, res, nil
}

// cut records a range of taken IDs ending at end, leased under the settings v, and cuts it into the
// blocks of sizes, in order, as far as it reaches.
func (s *server) cut(ns allocator.Namespace, end int64, v *serverVars, taken int64, sizes []int64) ([]allocator.Block, error) {
	step, identity := v.increment, v.identity
	whole, err := allocator.BlockEnding(ns.Name, s.Name(), end, step, taken, allocator.ExpiryFor(s.pair.cfg.now(), ns.LeaseTTL))
	if err != nil {
		return nil, err
	}
	s.marks.Leased(ns.Name, end, taken*step, identity)
	blocks := make([]allocator.Block, 0, len(sizes))
	var from int64
	for _, n := range sizes {
		if from >= taken {
			break
		}
		b, err := whole.Slice(from, min(n, taken-from))
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, b)
		from += n
	}
	return blocks, nil
}

// whyNoLease explains an UPDATE that matched no row: the row is gone or was changed behind ticketd
// (the server is not the one that was checked), its counter went below the floor (restored or
// rolled back: the server is fenced), or the request does not fit (size, or the end of the ID space).
func (s *server) whyNoLease(ctx context.Context, v *serverVars, ns allocator.Namespace, floor failover.Mark, first, largest, total int64) error {
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
		return s.fenceBelow(ns.Name, r.next, floor)
	case r.next%r.step != v.offset%v.increment:
		return fmt.Errorf("%w: %s's counter for %q is %d, not ≡ offset %d (mod %d); the row was changed outside ticketd",
			allocator.ErrMisconfigured, s.Name(), ns.Name, r.next, v.offset, v.increment)
	case largest > r.ns.MaxBlockSize:
		return fmt.Errorf("%w: %d is above namespace %q's max_block_size %d", allocator.ErrInvalidSize, largest, ns.Name, r.ns.MaxBlockSize)
	case allocator.Fit(max(r.next, first), r.step, total, min(r.ns.MaxID, ns.WithDefaults().MaxID, math.MaxInt64-r.step)) < total:
		return &ceilingHit{row: r}
	}
	return fmt.Errorf("%w: %s's counter for %q is %d; %d more IDs of step %d would pass %d",
		allocator.ErrExhausted, s.Name(), ns.Name, max(r.next, first), total, r.step, int64(math.MaxInt64))
}
