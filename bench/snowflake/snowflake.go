// Package snowflake generates Snowflake IDs: milliseconds since an epoch, a worker ID and a sequence
// within the millisecond, packed into 64 bits with the budgets of Twitter, Discord or Instagram.
// ticketd's bench builds it to the published layout so that ticket blocks can be compared with it.
package snowflake

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrClockBackwards means the clock stepped back further than Config.MaxBackstep, or did not catch up
	// within it. No ID is issued: a millisecond that may have been used is never used again.
	ErrClockBackwards = errors.New("snowflake: clock moved backwards")
	// ErrTimeRange means the clock is before the epoch or past the layout's last millisecond.
	ErrTimeRange = errors.New("snowflake: time outside the layout's range")
	// ErrInvalidConfig means a Config or Layout is out of range.
	ErrInvalidConfig = errors.New("snowflake: invalid configuration")
)

// Layout is a bit budget: time bits (milliseconds since Epoch), then worker bits, then sequence bits,
// from the most significant end. Bits left over at the top (the sign bit in Twitter's layout) are zero.
type Layout struct {
	Name                          string
	TimeBits, WorkerBits, SeqBits uint
	// Epoch is the layout's time zero.
	Epoch time.Time
}

// The layouts the article names.
var (
	// Twitter: 1 sign bit, 41 time bits (about 69.7 years from 2010-11-04), 10 worker bits (1,024
	// generators), 12 sequence bits (4,096 IDs per millisecond per worker). The IDs are positive int64s.
	Twitter = Layout{Name: "twitter", TimeBits: 41, WorkerBits: 10, SeqBits: 12, Epoch: time.UnixMilli(1288834974657).UTC()}
	// Discord: 42 time bits from 2015-01-01, 10 worker bits (5 worker + 5 process), 12 sequence bits; it
	// uses all 64 bits, so IDs pass the int64 range after 2^41 ms.
	Discord = Layout{Name: "discord", TimeBits: 42, WorkerBits: 10, SeqBits: 12, Epoch: time.UnixMilli(1420070400000).UTC()}
	// Instagram: 41 time bits, 13 shard bits (8,192 logical shards), 10 sequence bits (1,024 IDs per
	// millisecond per shard); all 64 bits, epoch 2011-08-24 as in Instagram's post.
	Instagram = Layout{Name: "instagram", TimeBits: 41, WorkerBits: 13, SeqBits: 10, Epoch: time.UnixMilli(1314220021721).UTC()}
)

// Validate reports whether the budget fits in 64 bits and leaves room for time, a worker and a sequence.
func (l Layout) Validate() error {
	switch {
	case l.TimeBits < 32 || l.TimeBits > 44:
		return fmt.Errorf("%w: %d time bits, want 32 to 44", ErrInvalidConfig, l.TimeBits)
	case l.WorkerBits > 20:
		return fmt.Errorf("%w: %d worker bits, want at most 20", ErrInvalidConfig, l.WorkerBits)
	case l.SeqBits < 1 || l.SeqBits > 22:
		return fmt.Errorf("%w: %d sequence bits, want 1 to 22", ErrInvalidConfig, l.SeqBits)
	case l.TimeBits+l.WorkerBits+l.SeqBits > 64:
		return fmt.Errorf("%w: %d+%d+%d bits do not fit in 64", ErrInvalidConfig, l.TimeBits, l.WorkerBits, l.SeqBits)
	}
	return nil
}

// Workers is how many distinct worker IDs the layout has.
func (l Layout) Workers() int64 { return 1 << l.WorkerBits }

// PerMillisecond is how many IDs one worker can issue in a millisecond.
func (l Layout) PerMillisecond() int64 { return 1 << l.SeqBits }

// Lifetime is how long after the epoch the time field runs out.
func (l Layout) Lifetime() time.Duration {
	return time.Duration(1<<l.TimeBits) * time.Millisecond
}

// Parts are the fields of an ID.
type Parts struct {
	// Millis is milliseconds since the layout's epoch; Time is the same as a time.
	Millis   int64
	Time     time.Time
	Worker   int64
	Sequence int64
}

// Decompose splits an ID made with this layout into its fields.
func (l Layout) Decompose(id uint64) Parts {
	ms := int64(id >> (l.WorkerBits + l.SeqBits) & (1<<l.TimeBits - 1))
	return Parts{
		Millis:   ms,
		Time:     l.Epoch.Add(time.Duration(ms) * time.Millisecond),
		Worker:   int64(id >> l.SeqBits & (1<<l.WorkerBits - 1)),
		Sequence: int64(id & (1<<l.SeqBits - 1)),
	}
}

// Compose packs fields into an ID; it does not check their ranges.
func (l Layout) Compose(millis, worker, seq int64) uint64 {
	return uint64(millis)<<(l.WorkerBits+l.SeqBits) | uint64(worker)<<l.SeqBits | uint64(seq)
}

// DefaultMaxBackstep is how far the clock may step back and be waited out: the article's "fine for a
// few milliseconds".
const DefaultMaxBackstep = 5 * time.Millisecond

// Config configures a Generator. The zero value of each field means its default.
type Config struct {
	// Layout is the bit budget. Default Twitter.
	Layout Layout
	// Worker is this generator's worker (or shard) ID, 0 ≤ Worker < Layout.Workers(). Two generators
	// with the same worker ID and layout issue the same IDs: keep them unique.
	Worker int64
	// MaxBackstep is the largest backward clock step that is waited out; a larger one fails with
	// ErrClockBackwards. Default DefaultMaxBackstep (5ms). Negative means never wait.
	MaxBackstep time.Duration
	// Now reads the wall clock. Default time.Now.
	Now func() time.Time
	// Sleep waits; the generator calls it while holding its lock. Default time.Sleep.
	Sleep func(time.Duration)
}

// Generator issues Snowflake IDs. Safe for concurrent use: IDs from one generator are strictly
// increasing in the order Next returns them, across goroutines.
type Generator struct {
	layout                Layout
	worker                uint64
	maxBack               time.Duration
	now                   func() time.Time
	sleep                 func(time.Duration)
	epochMS, maxMS, seqMx int64

	mu   sync.Mutex
	last int64 // the last millisecond used; -1 before the first ID
	seq  int64
}

// New validates cfg and returns a generator.
func New(cfg Config) (*Generator, error) {
	if cfg.Layout == (Layout{}) {
		cfg.Layout = Twitter
	}
	if err := cfg.Layout.Validate(); err != nil {
		return nil, err
	}
	if cfg.Worker < 0 || cfg.Worker >= cfg.Layout.Workers() {
		return nil, fmt.Errorf("%w: worker %d, want 0 to %d", ErrInvalidConfig, cfg.Worker, cfg.Layout.Workers()-1)
	}
	switch {
	case cfg.MaxBackstep == 0:
		cfg.MaxBackstep = DefaultMaxBackstep
	case cfg.MaxBackstep < 0:
		cfg.MaxBackstep = 0
	case cfg.MaxBackstep > time.Second:
		return nil, fmt.Errorf("%w: MaxBackstep %s, want at most 1s (a generator waiting longer holds up every caller)", ErrInvalidConfig, cfg.MaxBackstep)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = time.Sleep
	}
	return &Generator{
		layout: cfg.Layout, worker: uint64(cfg.Worker), maxBack: cfg.MaxBackstep,
		now: cfg.Now, sleep: cfg.Sleep,
		epochMS: cfg.Layout.Epoch.UnixMilli(), maxMS: 1<<cfg.Layout.TimeBits - 1, seqMx: 1<<cfg.Layout.SeqBits - 1,
		last: -1,
	}, nil
}

// Layout returns the generator's bit budget.
func (g *Generator) Layout() Layout { return g.layout }

// millis reads the clock as milliseconds since the epoch.
func (g *Generator) millis() (int64, error) {
	t := g.now()
	ms := t.UnixMilli() - g.epochMS
	if ms < 0 || ms > g.maxMS {
		return 0, fmt.Errorf("%w: %s is not within [%s, %s]", ErrTimeRange, t.UTC().Format(time.RFC3339Nano),
			g.layout.Epoch.Format(time.RFC3339), g.layout.Epoch.Add(g.layout.Lifetime()).Format(time.RFC3339))
	}
	return ms, nil
}

// Next returns a new ID. When the clock is behind the last millisecond used by at most MaxBackstep it
// waits for the clock to catch up; further behind, or still behind after waiting MaxBackstep, it
// returns ErrClockBackwards. When a millisecond's sequence is used up it waits for the next one.
func (g *Generator) Next() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms, err := g.millis()
	if err != nil {
		return 0, err
	}
	if ms < g.last {
		if ms, err = g.waitPast(ms, g.last-1); err != nil {
			return 0, err
		}
	}
	if ms == g.last {
		g.seq = (g.seq + 1) & g.seqMx
		if g.seq == 0 { // the millisecond is used up
			if ms, err = g.waitPast(ms, g.last); err != nil {
				return 0, err
			}
		}
	} else {
		g.seq = 0
	}
	g.last = ms
	return g.layout.Compose(ms, int64(g.worker), g.seq), nil
}

// waitPast sleeps until the clock reads a millisecond after floor and returns it. While the clock is
// behind the last millisecond used, it gives up with ErrClockBackwards when the step is larger than
// MaxBackstep or when catching up would take more than MaxBackstep in all (plus the rest of the
// millisecond being waited out).
func (g *Generator) waitPast(ms, floor int64) (int64, error) {
	var waited time.Duration
	for ms <= floor {
		d := time.Duration(floor-ms)*time.Millisecond + g.untilNextMilli()
		if behind := time.Duration(g.last-ms) * time.Millisecond; behind > 0 && (behind > g.maxBack || waited+d > g.maxBack+time.Millisecond) {
			return 0, fmt.Errorf("%w: the clock reads %dms after the epoch but %dms was already used (step %s, waited %s, allowed %s)",
				ErrClockBackwards, ms, g.last, behind, waited, g.maxBack)
		}
		g.sleep(d)
		waited += d
		var err error
		if ms, err = g.millis(); err != nil {
			return 0, err
		}
	}
	return ms, nil
}

// untilNextMilli is the time left in the clock's current millisecond (at least 1µs).
func (g *Generator) untilNextMilli() time.Duration {
	ns := g.now().UnixNano()
	rest := time.Duration(time.Millisecond.Nanoseconds() - ns%time.Millisecond.Nanoseconds())
	return max(rest, time.Microsecond)
}
