package allocator

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Block is a leased arithmetic progression of IDs: Start, Start+Step, …, Start+(Size-1)*Step.
// A Block is a value; it is safe to copy and to share between goroutines.
type Block struct {
	Namespace string
	// Server names the ticket server that issued the block.
	Server string
	Start  int64
	Step   int64
	Size   int64
	// ExpiresAt is when the block must no longer be used; zero means never.
	ExpiresAt time.Time
}

// mulAdd returns a + k*step, or ok=false if any step of the computation leaves [0, MaxInt64].
func mulAdd(a, k, step int64) (int64, bool) {
	if a < 0 || k < 0 || step < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(k), uint64(step))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	sum := uint64(a) + lo
	if sum > math.MaxInt64 {
		return 0, false
	}
	return int64(sum), true
}

// BlockEnding builds the block of size IDs with the given step whose exclusive end is end, i.e. the
// counter value after the lease (what LAST_INSERT_ID or INCRBY returns). The block's last ID is end-step.
func BlockEnding(namespace, server string, end, step, size int64, expiresAt time.Time) (Block, error) {
	if step < 1 || size < 1 {
		return Block{}, fmt.Errorf("%w: step %d and size %d must be positive", ErrInvalidSize, step, size)
	}
	span, ok := mulAdd(0, size, step)
	if !ok {
		return Block{}, fmt.Errorf("%w: size %d × step %d overflows", ErrExhausted, size, step)
	}
	b := Block{Namespace: namespace, Server: server, Start: end - span, Step: step, Size: size, ExpiresAt: expiresAt}
	return b, b.Validate()
}

// Validate reports whether the block is well formed: positive start, step and size, and a last ID that
// fits in an int64.
func (b Block) Validate() error {
	if b.Start < 1 || b.Step < 1 || b.Size < 1 {
		return fmt.Errorf("%w: start %d, step %d and size %d must be positive", ErrInvalidSize, b.Start, b.Step, b.Size)
	}
	if _, ok := mulAdd(b.Start, b.Size-1, b.Step); !ok {
		return fmt.Errorf("%w: block from %d of %d×%d passes %d", ErrExhausted, b.Start, b.Size, b.Step, int64(math.MaxInt64))
	}
	return nil
}

// ID returns the k-th ID of the block (k from 0). It fails with ErrOutOfRange outside [0, Size) and
// with ErrExhausted if the arithmetic would overflow.
func (b Block) ID(k int64) (int64, error) {
	if k < 0 || k >= b.Size {
		return 0, fmt.Errorf("%w: index %d not in [0, %d)", ErrOutOfRange, k, b.Size)
	}
	id, ok := mulAdd(b.Start, k, b.Step)
	if !ok || b.Start < 1 {
		return 0, fmt.Errorf("%w: index %d of block from %d step %d", ErrExhausted, k, b.Start, b.Step)
	}
	return id, nil
}

// Last returns the block's last ID.
func (b Block) Last() (int64, error) {
	if b.Size < 1 {
		return 0, fmt.Errorf("%w: empty block", ErrOutOfRange)
	}
	return b.ID(b.Size - 1)
}

// Contains reports whether id is one of the block's IDs.
func (b Block) Contains(id int64) bool {
	if b.Validate() != nil || id < b.Start {
		return false
	}
	d := id - b.Start
	return d%b.Step == 0 && d/b.Step < b.Size
}

// Slice returns the sub-block of n IDs starting at index from; the ticket server and expiry are kept.
func (b Block) Slice(from, n int64) (Block, error) {
	if from < 0 || n < 1 || from > b.Size-n {
		return Block{}, fmt.Errorf("%w: [%d, %d+%d) not within [0, %d)", ErrOutOfRange, from, from, n, b.Size)
	}
	start, err := b.ID(from)
	if err != nil {
		return Block{}, err
	}
	s := b
	s.Start, s.Size = start, n
	return s, nil
}

// Expired reports whether the block may no longer be used at now.
func (b Block) Expired(now time.Time) bool {
	return !b.ExpiresAt.IsZero() && !now.Before(b.ExpiresAt)
}

// String describes the block for logs.
func (b Block) String() string {
	last, _ := b.Last()
	return fmt.Sprintf("%s[%d..%d step %d, %d IDs from %s]", b.Namespace, b.Start, last, b.Step, b.Size, b.Server)
}
