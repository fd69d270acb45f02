package snowflake_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/bench/snowflake"
)

// clock is a hand-driven wall clock; Sleep advances it unless it is stuck.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	stuck  bool
	slept  time.Duration
	sleeps int
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept += d
	c.sleeps++
	if !c.stuck {
		c.t = c.t.Add(d)
	}
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

func (c *clock) Slept() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}

func newGen(t *testing.T, l snowflake.Layout, worker int64, c *clock) *snowflake.Generator {
	t.Helper()
	g, err := snowflake.New(snowflake.Config{Layout: l, Worker: worker, Now: c.Now, Sleep: c.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestBitLayout(t *testing.T) {
	const ms = 123_456_789
	tests := []struct {
		layout         snowflake.Layout
		worker         int64
		first, second  uint64
		workers, perMS int64
	}{
		// 41 time bits above 10 worker bits above 12 sequence bits.
		{snowflake.Twitter, 1023, ms<<22 | 1023<<12, ms<<22 | 1023<<12 | 1, 1024, 4096},
		{snowflake.Discord, 5, ms<<22 | 5<<12, ms<<22 | 5<<12 | 1, 1024, 4096},
		// 41 time bits above 13 shard bits above 10 sequence bits.
		{snowflake.Instagram, 8191, ms<<23 | 8191<<10, ms<<23 | 8191<<10 | 1, 8192, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.layout.Name, func(t *testing.T) {
			c := &clock{t: tt.layout.Epoch.Add(ms*time.Millisecond + 300*time.Microsecond)}
			g := newGen(t, tt.layout, tt.worker, c)
			a, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			b, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			if a != tt.first || b != tt.second {
				t.Fatalf("IDs %#x, %#x; want %#x, %#x", a, b, tt.first, tt.second)
			}
			p := tt.layout.Decompose(b)
			if p.Millis != ms || p.Worker != tt.worker || p.Sequence != 1 || !p.Time.Equal(tt.layout.Epoch.Add(ms*time.Millisecond)) {
				t.Fatalf("Decompose(%#x) = %+v", b, p)
			}
			if tt.layout.Workers() != tt.workers || tt.layout.PerMillisecond() != tt.perMS {
				t.Fatalf("workers %d, per ms %d", tt.layout.Workers(), tt.layout.PerMillisecond())
			}
		})
	}
}

func TestTwitterIDsStayPositiveToTheLastMillisecond(t *testing.T) {
	l := snowflake.Twitter
	if years := l.Lifetime().Hours() / 24 / 365.25; years < 69.6 || years > 69.8 {
		t.Fatalf("41 bits of milliseconds last %.2f years, want about 69.7", years)
	}
	last := l.Epoch.Add(l.Lifetime() - time.Millisecond)
	if last.Year() != 2080 || last.Month() != time.July {
		t.Fatalf("Twitter's layout runs out in %s, want July 2080", last.Format("January 2006"))
	}
	c := &clock{t: last}
	g := newGen(t, l, 1023, c)
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	if id > math.MaxInt64 || id < 1<<62 {
		t.Fatalf("last-millisecond ID %#x: want the sign bit clear and the top time bit set", id)
	}
	c.Add(time.Millisecond)
	if _, err := g.Next(); !errors.Is(err, snowflake.ErrTimeRange) {
		t.Fatalf("past the lifetime: %v, want ErrTimeRange", err)
	}
	c.Set(l.Epoch.Add(-time.Millisecond))
	if _, err := g.Next(); !errors.Is(err, snowflake.ErrTimeRange) {
		t.Fatalf("before the epoch: %v, want ErrTimeRange", err)
	}
}

func TestSequenceExhaustionWaitsForTheNextMillisecond(t *testing.T) {
	for _, l := range []snowflake.Layout{snowflake.Twitter, snowflake.Instagram} {
		t.Run(l.Name, func(t *testing.T) {
			c := &clock{t: l.Epoch.Add(time.Hour + 250*time.Microsecond)}
			g := newGen(t, l, 3, c)
			var prev uint64
			for i := range l.PerMillisecond() {
				id, err := g.Next()
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 && id != prev+1 {
					t.Fatalf("ID %d is %#x after %#x", i, id, prev)
				}
				prev = id
			}
			if c.Slept() != 0 {
				t.Fatalf("slept %s within the first millisecond", c.Slept())
			}
			id, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			p := l.Decompose(id)
			if p.Millis != time.Hour.Milliseconds()+1 || p.Sequence != 0 || id <= prev {
				t.Fatalf("after %d IDs in one millisecond: %+v", l.PerMillisecond(), p)
			}
			if s := c.Slept(); s != 750*time.Microsecond {
				t.Fatalf("slept %s, want the 750µs left in the millisecond", s)
			}
		})
	}
}

func TestClockSteps(t *testing.T) {
	tests := []struct {
		name   string
		back   time.Duration
		stuck  bool
		want   error
		maxDur time.Duration // longest acceptable sleep
	}{
		{"1ms back is waited out", time.Millisecond, false, nil, 2 * time.Millisecond},
		{"5ms back is waited out", 5 * time.Millisecond, false, nil, 6 * time.Millisecond},
		{"6ms back fails at once", 6 * time.Millisecond, false, snowflake.ErrClockBackwards, 0},
		{"1s back (chrony leap second) fails at once", time.Second, false, snowflake.ErrClockBackwards, 0},
		{"3ms back on a clock that does not move fails within the limit", 3 * time.Millisecond, true, snowflake.ErrClockBackwards, 6 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: snowflake.Twitter.Epoch.Add(24*time.Hour + 100*time.Microsecond)}
			g := newGen(t, snowflake.Twitter, 7, c)
			before, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			c.Add(-tt.back)
			c.stuck = tt.stuck
			id, err := g.Next()
			if !errors.Is(err, tt.want) {
				t.Fatalf("Next after stepping back %s: %v, want %v", tt.back, err, tt.want)
			}
			if s := c.Slept(); s > tt.maxDur {
				t.Fatalf("slept %s, want at most %s", s, tt.maxDur)
			}
			if err == nil && id <= before {
				t.Fatalf("ID %#x after a step back is not above %#x", id, before)
			}
			if err != nil {
				if id != 0 {
					t.Fatalf("an ID (%#x) came with the error", id)
				}
				// Once the clock is past the last millisecond used, IDs flow again, above the old ones.
				c.stuck = false
				c.Set(snowflake.Twitter.Epoch.Add(24*time.Hour + time.Millisecond))
				id, err = g.Next()
				if err != nil || id <= before {
					t.Fatalf("after the clock recovered: %#x, %v (last %#x)", id, err, before)
				}
			}
		})
	}
}

func TestNeverReusesAMillisecondAfterAStepBack(t *testing.T) {
	c := &clock{t: snowflake.Twitter.Epoch.Add(time.Minute)}
	g := newGen(t, snowflake.Twitter, 1, c)
	seen := map[uint64]bool{}
	var last uint64
	// A clock that wobbles back and forth by up to 4ms while IDs are taken.
	steps := []time.Duration{300 * time.Microsecond, -4 * time.Millisecond, 2 * time.Millisecond, -time.Millisecond, 5 * time.Millisecond}
	for i := range 20_000 {
		if i%500 == 0 {
			c.Add(steps[(i/500)%len(steps)])
		}
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] || id <= last {
			t.Fatalf("ID %#x repeated or not above %#x", id, last)
		}
		seen[id], last = true, id
	}
}

func TestConfigIsValidated(t *testing.T) {
	tests := []struct {
		name string
		cfg  snowflake.Config
	}{
		{"worker too big", snowflake.Config{Worker: 1024}},
		{"negative worker", snowflake.Config{Worker: -1}},
		{"shard too big for Instagram", snowflake.Config{Layout: snowflake.Instagram, Worker: 8192}},
		{"too many bits", snowflake.Config{Layout: snowflake.Layout{TimeBits: 44, WorkerBits: 10, SeqBits: 12}}},
		{"no sequence bits", snowflake.Config{Layout: snowflake.Layout{TimeBits: 41, WorkerBits: 10}}},
		{"too few time bits", snowflake.Config{Layout: snowflake.Layout{TimeBits: 20, WorkerBits: 10, SeqBits: 12}}},
		{"wait too long", snowflake.Config{MaxBackstep: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g, err := snowflake.New(tt.cfg); !errors.Is(err, snowflake.ErrInvalidConfig) || g != nil {
				t.Fatalf("New: %v, %v; want ErrInvalidConfig", g, err)
			}
		})
	}
}

func TestConcurrentCallersGetUniqueIncreasingIDs(t *testing.T) {
	g, err := snowflake.New(snowflake.Config{Worker: 42})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 20_000
	out := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				id, err := g.Next()
				if err != nil {
					t.Error(err)
					return
				}
				out[i] = append(out[i], id)
			}
		}()
	}
	wg.Wait()
	seen := make(map[uint64]bool, goroutines*each)
	for _, ids := range out {
		for j, id := range ids {
			if seen[id] {
				t.Fatalf("duplicate %#x", id)
			}
			seen[id] = true
			if j > 0 && id <= ids[j-1] {
				t.Fatalf("one goroutine's IDs went from %#x to %#x", ids[j-1], id)
			}
			if w := snowflake.Twitter.Decompose(id).Worker; w != 42 {
				t.Fatalf("worker %d in %#x", w, id)
			}
		}
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d IDs, want %d", len(seen), goroutines*each)
	}
}

func ExampleGenerator() {
	epoch := snowflake.Twitter.Epoch
	g, _ := snowflake.New(snowflake.Config{
		Worker: 5,
		Now:    func() time.Time { return epoch.Add(1000 * time.Millisecond) }, // a fixed clock for the example
	})
	a, _ := g.Next()
	b, _ := g.Next()
	fmt.Println(a, b)
	fmt.Printf("%+v\n", snowflake.Twitter.Decompose(b))
	// Output:
	// 4194324480 4194324481
	// {Millis:1000 Time:2010-11-04 01:42:55.657 +0000 UTC Worker:5 Sequence:1}
}

func BenchmarkNext(b *testing.B) {
	for _, l := range []snowflake.Layout{snowflake.Twitter, snowflake.Discord, snowflake.Instagram} {
		b.Run(l.Name, func(b *testing.B) {
			g, err := snowflake.New(snowflake.Config{Layout: l})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(l.Name+"/parallel", func(b *testing.B) {
			g, err := snowflake.New(snowflake.Config{Layout: l})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := g.Next(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
