package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bwsnowflake "github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"
	"github.com/rs/xid"
	"github.com/segmentio/ksuid"
	"github.com/sony/sonyflake"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/embedded"
	"github.com/ticketd/ticketd/bench/snowflake"
)

// maxKey is the widest binary ID measured (KSUID, 20 bytes).
const maxKey = 20

type key [maxKey]byte

// generator makes IDs of one scheme. next writes the next ID's binary form, big-endian so that byte
// order is ID order, into dst; it is safe for concurrent use.
type generator struct {
	next  func(dst []byte) error
	text  func(bin []byte) string
	close func()
}

// scheme is one way of making IDs, with what the collision-odds table needs to know about it.
type scheme struct {
	name    string
	binSize int
	// randomBits are the bits that must all match for two IDs from independent generators to collide,
	// within one window of the time prefix (0: the whole ID is random). Zero randomBits: coordinated.
	randomBits int
	window     time.Duration
	// coordination says what keeps the scheme unique when randomBits is zero.
	coordination string
	// space is what runs out first in the scheme's IDs.
	space idSpace
	// codes: the scheme also stands for the shortener's codes (a row of their own in the odds table).
	codes bool
	open  func(ctx context.Context) (*generator, error)
}

func decimalText(bin []byte) string { return strconv.FormatUint(binary.BigEndian.Uint64(bin), 10) }

func put64(dst []byte, v uint64) { binary.BigEndian.PutUint64(dst, v) }

func genSchemes(opts Options, env *mysqlEnv) []scheme {
	snow := func(name string, l snowflake.Layout) scheme {
		return scheme{name: name, binSize: 8, space: clockSpace(int(l.TimeBits), time.Millisecond, l.Epoch),
			coordination: fmt.Sprintf("unique worker IDs (%s) and a clock that never reuses a millisecond", count(l.Workers())),
			open: func(context.Context) (*generator, error) {
				g, err := snowflake.New(snowflake.Config{Layout: l, Worker: 1})
				if err != nil {
					return nil, err
				}
				return &generator{next: func(dst []byte) error {
					id, err := g.Next()
					put64(dst, id)
					return err
				}, text: decimalText}, nil
			}}
	}
	ticketName := ticketRowName + ", embedded store"
	if env != nil {
		ticketName = ticketRowName + ", MySQL pair"
	}
	return []scheme{
		{name: ticketName, binSize: 8, coordination: "unique ticket server offsets and counters that never go back",
			space: counterSpace(63), codes: true,
			open: func(ctx context.Context) (*generator, error) { return openTicketGen(ctx, opts, env) }},
		snow("snowflake 41/10/12 (Twitter)", snowflake.Twitter),
		snow("snowflake 42/10/12 (Discord)", snowflake.Discord),
		snow("snowflake 41/13/10 (Instagram)", snowflake.Instagram),
		{name: "bwmarrin/snowflake", binSize: 8, coordination: "unique node IDs (1,024)",
			space: clockSpace(41, time.Millisecond, time.UnixMilli(bwsnowflake.Epoch).UTC()),
			open: func(context.Context) (*generator, error) {
				n, err := bwsnowflake.NewNode(1)
				if err != nil {
					return nil, err
				}
				return &generator{next: func(dst []byte) error { put64(dst, uint64(n.Generate().Int64())); return nil }, text: decimalText}, nil
			}},
		{name: "sony/sonyflake", binSize: 8, coordination: "unique machine IDs (65,536)",
			space: clockSpace(39, 10*time.Millisecond, sonyflakeEpoch),
			open: func(context.Context) (*generator, error) {
				sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
				if err != nil {
					return nil, err
				}
				return &generator{next: func(dst []byte) error {
					id, err := sf.NextID()
					put64(dst, id)
					return err
				}, text: decimalText}, nil
			}},
		{name: "google/uuid v4", binSize: 16, randomBits: 122,
			open: func(context.Context) (*generator, error) {
				return &generator{next: func(dst []byte) error {
					u, err := uuid.NewRandom()
					copy(dst, u[:])
					return err
				}, text: uuidText}, nil
			}},
		{name: "google/uuid v7", binSize: 16, randomBits: 74, window: time.Millisecond, space: clockSpace(48, time.Millisecond, time.Unix(0, 0).UTC()),
			open: func(context.Context) (*generator, error) {
				return &generator{next: func(dst []byte) error {
					u, err := uuid.NewV7()
					copy(dst, u[:])
					return err
				}, text: uuidText}, nil
			}},
		{name: "oklog/ulid (monotonic)", binSize: 16, randomBits: 80, window: time.Millisecond, space: clockSpace(48, time.Millisecond, time.Unix(0, 0).UTC()),
			open: func(context.Context) (*generator, error) {
				return &generator{next: func(dst []byte) error {
					u := ulid.Make() // the library's monotonic, locked default entropy
					copy(dst, u[:])
					return nil
				}, text: func(bin []byte) string { var u ulid.ULID; copy(u[:], bin); return u.String() }}, nil
			}},
		{name: "rs/xid", binSize: 12, coordination: "a unique 3-byte host hash and process ID on every host",
			space: clockSpace(32, time.Second, time.Unix(0, 0).UTC()),
			open: func(context.Context) (*generator, error) {
				return &generator{next: func(dst []byte) error {
					id := xid.New()
					copy(dst, id[:])
					return nil
				}, text: func(bin []byte) string { var id xid.ID; copy(id[:], bin); return id.String() }}, nil
			}},
		{name: "segmentio/ksuid", binSize: 20, randomBits: 128, window: time.Second, space: clockSpace(32, time.Second, time.Unix(ksuidEpoch, 0).UTC()),
			open: func(context.Context) (*generator, error) {
				return &generator{next: func(dst []byte) error {
					k, err := ksuid.NewRandom()
					copy(dst, k[:])
					return err
				}, text: func(bin []byte) string { k, _ := ksuid.FromBytes(bin); return k.String() }}, nil
			}},
	}
}

// sonyflakeEpoch is sony/sonyflake's default start time; ksuidEpoch is KSUID's, in Unix seconds.
var sonyflakeEpoch = time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC)

const ksuidEpoch = 1_400_000_000

func uuidText(bin []byte) string {
	var u uuid.UUID
	copy(u[:], bin)
	return u.String()
}

// ticketBackend is the backend the ticket row leases from: the pair when the run has one, otherwise
// an embedded store in a temporary directory.
func ticketBackend(ctx context.Context, env *mysqlEnv) (allocator.Backend, string, func(), error) {
	if env != nil {
		ns, err := env.namespace(ctx, env.pair, "gen", genBlockSize)
		return env.pair, ns, func() {}, err
	}
	dir, err := os.MkdirTemp("", "ticketd-bench-")
	if err != nil {
		return nil, "", nil, err
	}
	st, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", nil, err
	}
	done := func() { _ = st.Close(); _ = os.RemoveAll(dir) }
	if _, err := st.CreateNamespace(ctx, allocator.Namespace{Name: "gen", BlockSize: genBlockSize}); err != nil {
		done()
		return nil, "", nil, err
	}
	return st, "gen", done, nil
}

// genBlockSize is the block the ticket row serves from: big enough that the row measures serving
// from a cached block, not the backend.
const genBlockSize = 100_000

func openTicketGen(ctx context.Context, opts Options, env *mysqlEnv) (*generator, error) {
	be, ns, done, err := ticketBackend(ctx, env)
	if err != nil {
		return nil, err
	}
	src, closeSrc, err := newTicketSource(ctx, be, ns, genBlockSize)
	if err != nil {
		done()
		return nil, err
	}
	bg := context.Background()
	return &generator{next: func(dst []byte) error {
		id, err := src.Next(bg)
		put64(dst, uint64(id))
		return err
	}, text: decimalText, close: func() { closeSrc(); done() }}, nil
}

// GenRow is one scheme's measurements.
type GenRow struct {
	Scheme      string `json:"scheme"`
	BinaryBytes int    `json:"binary_bytes"`
	TextBytes   int    `json:"text_bytes"`
	// NsPerID is wall time per ID on one goroutine; NsPerIDAllCores is wall time per ID with
	// GOMAXPROCS goroutines sharing one generator (as testing's RunParallel reports it).
	NsPerID         float64 `json:"ns_per_id"`
	NsPerIDAllCores float64 `json:"ns_per_id_all_cores"`
	AllocsPerID     float64 `json:"allocs_per_id"`
	BytesPerID      float64 `json:"bytes_per_id"`
	// IDsPerSecond is the better of the one-goroutine and all-core rates: this machine's ceiling.
	IDsPerSecond float64 `json:"ids_per_second"`
	// Increasing: every ID one goroutine took was above the one before (Violations counts the others).
	Increasing bool `json:"one_goroutine_strictly_increasing"`
	Violations int  `json:"one_goroutine_violations"`
	OneChecked int  `json:"one_goroutine_ids"`
	// OutOfOrder is the share of consecutive pairs, in the order IDs were handed to several goroutines
	// (a shared counter taken right after each ID), whose second ID sorts below the first.
	OutOfOrder float64 `json:"out_of_order_share_across_goroutines"`
	Goroutines int     `json:"goroutines"`
	// Checked IDs were kept and compared; Duplicates among them.
	Checked    int    `json:"ids_checked"`
	Duplicates int    `json:"duplicates"`
	Error      string `json:"error,omitempty"`
}

// GenReport is the generation comparison.
type GenReport struct {
	Rows []GenRow  `json:"rows"`
	Odds []OddsRow `json:"collision_odds"`
	// ShortCodes is the ticket row's IDs as the shortener's codes of a few characters: a space of its
	// own, the last row of the collision table.
	ShortCodes *OddsRow `json:"short_codes,omitempty"`
}

func runGen(ctx context.Context, opts Options, env *mysqlEnv) (*GenReport, error) {
	rep := &GenReport{}
	now := time.Now()
	for _, s := range genSchemes(opts, env) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		row := GenRow{Scheme: s.name, BinaryBytes: s.binSize}
		opts.line.begin("gen", s.name)
		g, err := s.open(ctx)
		if err != nil {
			row.Error = err.Error()
			rep.Rows = append(rep.Rows, row)
			opts.line.end()
			continue
		}
		if err := measureGen(ctx, opts, s, g, &row); err != nil {
			row.Error = err.Error()
		}
		if g.close != nil {
			g.close()
		}
		rep.Rows = append(rep.Rows, row)
		rep.Odds = append(rep.Odds, odds(s, row.IDsPerSecond, now))
		if s.codes {
			codes := shortCodes(s, row.IDsPerSecond, now)
			rep.ShortCodes = &codes
		}
		opts.line.end()
	}
	return rep, nil
}

func measureGen(ctx context.Context, opts Options, s scheme, g *generator, row *GenRow) error {
	var buf key
	if err := g.next(buf[:]); err != nil { // warm up: the first ID may lease a block
		return err
	}

	n, took, mallocs, bytes, err := timeOne(ctx, g, opts.Duration)
	if err != nil {
		return err
	}
	row.NsPerID = float64(took.Nanoseconds()) / float64(n)
	row.AllocsPerID = float64(mallocs) / float64(n)
	row.BytesPerID = float64(bytes) / float64(n)

	procs := runtime.GOMAXPROCS(0)
	n, took, err = timeParallel(ctx, g, opts.Duration, procs)
	if err != nil {
		return err
	}
	row.NsPerIDAllCores = float64(took.Nanoseconds()) / float64(n)
	row.IDsPerSecond = max(1e9/row.NsPerID, 1e9/row.NsPerIDAllCores)

	seen := map[key]struct{}{}
	sample := 200_000
	if opts.Quick {
		sample = 20_000
	}
	one, err := collect(ctx, g, 1, sample, opts.Duration)
	if err != nil {
		return err
	}
	for i := 1; i < len(one); i++ {
		if compareKeys(one[i-1], one[i], s.binSize) >= 0 {
			row.Violations++
		}
	}
	row.OneChecked = len(one)
	row.Increasing = len(one) > 1 && row.Violations == 0
	row.Goroutines = max(4, 2*procs)
	many, err := collect(ctx, g, row.Goroutines, sample, opts.Duration)
	if err != nil {
		return err
	}
	inv := 0
	for i := 1; i < len(many); i++ {
		if compareKeys(many[i-1], many[i], s.binSize) > 0 {
			inv++
		}
	}
	if len(many) > 1 {
		row.OutOfOrder = float64(inv) / float64(len(many)-1)
	}
	for _, ids := range [][]key{one, many} {
		for _, k := range ids {
			if _, dup := seen[k]; dup {
				row.Duplicates++
			}
			seen[k] = struct{}{}
		}
		row.Checked += len(ids)
	}
	// Decimal text grows with the counter: take the length of an ID from after the run.
	if err := g.next(buf[:]); err != nil {
		return err
	}
	row.TextBytes = len(g.text(buf[:s.binSize]))
	return nil
}

func compareKeys(a, b key, n int) int { return bytes.Compare(a[:n], b[:n]) }

// timeOne makes IDs on one goroutine for d and counts them and the heap allocations made meanwhile.
func timeOne(ctx context.Context, g *generator, d time.Duration) (n int64, took time.Duration, mallocs, bytes uint64, err error) {
	var buf key
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	deadline := start.Add(d)
	for {
		for range 64 {
			if err := g.next(buf[:]); err != nil {
				return 0, 0, 0, 0, err
			}
		}
		n += 64
		if n%4096 == 0 && (time.Now().After(deadline) || ctx.Err() != nil) {
			break
		}
	}
	took = time.Since(start)
	runtime.ReadMemStats(&after)
	return n, took, after.Mallocs - before.Mallocs, after.TotalAlloc - before.TotalAlloc, ctx.Err()
}

// timeParallel makes IDs on procs goroutines sharing g for d.
func timeParallel(ctx context.Context, g *generator, d time.Duration, procs int) (int64, time.Duration, error) {
	var total atomic.Int64
	var firstErr error
	var once sync.Once
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf key
			var n int64
			for first := true; first || (!stop.Load() && ctx.Err() == nil); first = false {
				for range 64 { // at least one round each, however busy the machine
					if err := g.next(buf[:]); err != nil {
						once.Do(func() { firstErr = err })
						stop.Store(true)
						break
					}
					n++
				}
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if total.Load() == 0 {
		return 0, 0, fmt.Errorf("no ID made in %s", took)
	}
	return total.Load(), took, ctx.Err()
}

// collect has goroutines take up to limit IDs in all (for at most d) and returns them in the order of a
// shared counter taken right after each ID was made.
func collect(ctx context.Context, g *generator, goroutines, limit int, d time.Duration) ([]key, error) {
	out := make([]key, limit)
	var seq atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var k key
			for i := 0; ; i++ {
				if i%256 == 255 && (time.Now().After(deadline) || ctx.Err() != nil) {
					return
				}
				if err := g.next(k[:]); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				s := seq.Add(1) - 1
				if s >= int64(limit) {
					return
				}
				out[s] = k
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	n := min(int(seq.Load()), limit)
	return out[:n], ctx.Err()
}
