package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
)

// The odds formula reproduces the article's figures at 1 M IDs/s for a year.
func TestCollisionChanceMatchesTheArticle(t *testing.T) {
	tests := []struct {
		name   string
		bits   int
		window time.Duration
		oneIn  float64 // the article's "1 in …"
	}{
		{"UUIDv4", 122, 0, 10e9},
		{"ULID", 80, time.Millisecond, 77e6},
		{"UUIDv7", 74, time.Millisecond, 1.2e6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := collisionChance(tt.bits, tt.window, 1e6, year)
			if got := 1 / p; math.Abs(got-tt.oneIn)/tt.oneIn > 0.1 {
				t.Fatalf("1 in %.3g, the article says 1 in %.3g", got, tt.oneIn)
			}
		})
	}
	if p := collisionChance(0, time.Millisecond, 1e9, year); p != 0 {
		t.Fatalf("a coordinated scheme: %g", p)
	}
	if p := collisionChance(32, 0, 1e6, year); p > 1 || p < 0.999 {
		t.Fatalf("32 random bits at 1 M/s for a year must collide almost surely: %g", p)
	}
	// Twice the rate, four times the odds (while they are small).
	a, b := collisionChance(80, time.Millisecond, 1e6, year), collisionChance(80, time.Millisecond, 2e6, year)
	if r := b / a; math.Abs(r-4) > 0.01 {
		t.Fatalf("doubling the rate multiplied the odds by %.3f", r)
	}
}

func TestOneIn(t *testing.T) {
	for p, want := range map[float64]string{0: "0", 1e-10: "1 in 10 billion", 1.0 / 123456: "1 in 123,456", 0.9: "0.90"} {
		if got := oneIn(p); got != want {
			t.Errorf("oneIn(%g) = %q, want %q", p, got, want)
		}
	}
}

// btreeRow is a measured row: its clustered index mib MiB as rebuilt, fill as full, and a secondary
// index of indexMiB.
func btreeRow(mib, fill, indexMiB float64) BTreeRow {
	rebuilt := int64(mib * (1 << 20))
	return BTreeRow{Fill: fill, RebuiltDataBytes: rebuilt, DataBytes: int64(float64(rebuilt) / fill), IndexBytes: int64(indexMiB * (1 << 20))}
}

func TestJudgeComputesAgreementFromTheNumbers(t *testing.T) {
	keys := []btreeKey{{name: "seq"}, {name: "random wide", random: true, wide: true}, {name: "ordered wide", wide: true}}
	tests := []struct {
		name  string
		rows  []BTreeRow
		agree []bool
	}{
		{"as the article says", []BTreeRow{
			btreeRow(40, 1.0, 20), btreeRow(50, 0.7, 28), btreeRow(48, 0.98, 30),
		}, []bool{true, true, true}},
		{"sequential pages half empty, random pages full, indexes no bigger", []BTreeRow{
			btreeRow(40, 0.6, 20), btreeRow(50, 0.95, 28), btreeRow(48, 0.95, 20),
		}, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			judge(tt.rows, keys)
			for i, r := range tt.rows {
				if r.Agrees != tt.agree[i] || !r.Judged || r.Claim == "" || r.Why == "" {
					t.Errorf("%s: %+v, want a verdict, agrees=%v", keys[i].name, r, tt.agree[i])
				}
			}
			if note := noVerdict(tt.rows, keys, 1_000_000); note != "" {
				t.Errorf("every row was judged, yet: %s", note)
			}
		})
	}
}

// TestSmallTablesGetNoVerdict: a quick run's tables (a 20,000-row run: a few MiB or less) are too small
// for the fill or the index size to mean anything; the report says so and how many rows would do,
// and shows no verdict.
func TestSmallTablesGetNoVerdict(t *testing.T) {
	keys := []btreeKey{{name: "seq"}, {name: "random wide", random: true, wide: true}, {name: "big seq"}}
	// The random key's pages look as full as a rebuild's: at this size that is the extent size speaking.
	rows := []BTreeRow{btreeRow(1, 1.0, 0.5), btreeRow(1.5, 1.0, 0.75), btreeRow(40, 1.0, 20)}
	for i := range rows {
		rows[i].Key = keys[i].name
	}
	judge(rows, keys)
	for i, r := range rows[:2] {
		if r.Judged || r.Agrees || !strings.Contains(r.Why, "too small for a verdict") {
			t.Errorf("%s: %+v, want no verdict", keys[i].name, r)
		}
	}
	if !rows[2].Judged || !rows[2].Agrees {
		t.Errorf("a 40 MiB table got no verdict: %+v", rows[2])
	}
	note := noVerdict(rows, keys, 20_000)
	// The smallest index compared is the wide key's secondary index, 0.75 MiB at 20,000 rows: 16 MiB
	// needs 426,667 rows, rounded up to 500,000.
	if !strings.Contains(note, "too small for a verdict on 2 of 3 tables") || !strings.Contains(note, "--rows 500,000") {
		t.Errorf("note %q", note)
	}
	var md strings.Builder
	(&BTreeReport{RowsPerTable: 20_000, Batch: 1000, NoVerdict: note, Rows: rows}).markdown(&md)
	if !strings.Contains(md.String(), "**No verdict:** "+note) {
		t.Errorf("the report does not say why:\n%s", md.String())
	}
	for _, line := range strings.Split(md.String(), "\n") {
		if strings.HasPrefix(line, "| seq |") || strings.HasPrefix(line, "| random wide |") {
			if cells := strings.Split(line, " | "); cells[9] != "–" {
				t.Errorf("a row without a verdict shows %q in agrees: %s", cells[9], line)
			}
		}
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:3306": true, "[::1]:6379": true, "localhost:80": true, "127.5.0.1:1": true,
		"10.0.0.5:3306": false, "192.168.1.2:6379": false, "db.example.com:3306": false, "8.8.8.8:53": false,
	} {
		if err := loopbackOnly("server", addr); (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidOptions)) {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

func TestRunRefusesBadOptionsAndRemoteServers(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		parts []string
	}{
		{"unknown part", Options{Quick: true}, []string{"speed"}},
		{"nothing", Options{Quick: true}, nil},
		{"btree without servers", Options{Quick: true}, []string{"btree"}},
		{"zero clients", Options{Quick: true, Clients: []int{0}}, []string{"gen"}},
		{"too few rows", Options{Rows: 5}, []string{"gen"}},
		{"remote server", Options{Quick: true, MySQL: []string{"root@tcp(10.1.2.3:3306)/x"}}, []string{"load"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tt.opts, tt.parts...); !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("Run: %v, want ErrInvalidOptions", err)
			}
		})
	}
}

func TestErrorKinds(t *testing.T) {
	tests := map[string]error{
		"deadlock":          &gomysql.MySQLError{Number: 1213, Message: "Deadlock found"},
		"lock wait timeout": fmt.Errorf("x: %w", &gomysql.MySQLError{Number: 1205}),
		"timeout":           context.DeadlineExceeded,
		"unavailable":       fmt.Errorf("%w: both down", allocator.ErrUnavailable),
		"other":             errors.New("boom"),
	}
	for want, err := range tests {
		if got := errorKind(err); got != want {
			t.Errorf("errorKind(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestClosedAndOpenLoopCountWhatHappened(t *testing.T) {
	var calls atomic.Int64
	op := func(ctx context.Context) (int64, error) {
		n := calls.Add(1)
		time.Sleep(time.Millisecond)
		if n%10 == 0 {
			return 0, &gomysql.MySQLError{Number: 1213}
		}
		return 100, nil
	}
	opts := Options{}.withDefaults()
	row := closedLoop(context.Background(), opts, "fake", op, 4, 200*time.Millisecond, 1_000_000)
	if row.Ops == 0 || row.IDs != 100*row.Ops || row.ErrorKinds["deadlock"] != row.Errors || row.Errors == 0 {
		t.Fatalf("closed loop: %+v", row)
	}
	if row.Ops+row.Errors != calls.Load() {
		t.Fatalf("%d ops + %d errors, %d calls", row.Ops, row.Errors, calls.Load())
	}
	if row.P50ms < 1 || row.P99ms < row.P50ms || row.MaxMs < row.P99ms || row.IDsPerSecond <= row.OpsPerSecond {
		t.Fatalf("latencies/rates: %+v", row)
	}
	// The count bound stops a loop before its time is up.
	calls.Store(0)
	row = closedLoop(context.Background(), opts, "fake", op, 3, time.Minute, 50)
	if got := row.Ops + row.Errors; got != 50 {
		t.Fatalf("bounded at 50 requests, made %d", got)
	}

	calls.Store(0)
	row = openLoop(context.Background(), opts, "fake", op, 500, 200*time.Millisecond, 1_000_000)
	if got := row.Ops + row.Errors; got != 100 || calls.Load() != 100 {
		t.Fatalf("open loop at 500/s for 200ms sent %d requests (%d calls), want 100", got, calls.Load())
	}
	if row.Mode != "open" || row.TargetRate != 500 || row.P50ms < 1 {
		t.Fatalf("open loop: %+v", row)
	}
	// A rate too slow for the duration still sends what fits in 2s at that rate.
	calls.Store(1) // no deadlock in the first ten
	row = openLoop(context.Background(), opts, "slow", op, 4, 10*time.Millisecond, 1_000_000)
	if got := row.Ops + row.Errors; got != 8 || row.P50ms <= 0 {
		t.Fatalf("open loop at 4/s for 10ms: %d requests, %+v; want 8", got, row)
	}
}

// A server slower than the send rate shows in open-loop latency as queueing behind the intended send
// times, not as a slower sender.
func TestOpenLoopCountsQueueingDelay(t *testing.T) {
	// A server that answers nothing until all 200 requests of the open loop have reached it, then
	// everything at once. Request i was due at i ms (1000/s) and is answered after request 199 was
	// sent, no earlier than 199 ms: from its due time it waited at least (199-i) ms. Those bounds hold
	// however slow or busy the machine is: the loop never sends a request before it is due (50µs at
	// most), and lateness only adds.
	const n = 200
	var arrived atomic.Int64
	gate := make(chan struct{})
	gated := func(ctx context.Context) (int64, error) {
		if arrived.Add(1) == n {
			close(gate)
		}
		select {
		case <-gate:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	opts := Options{}.withDefaults()
	row := openLoop(context.Background(), opts, "gated", gated, 1000, n*time.Millisecond, n)
	if row.Ops != n || row.Errors != 0 {
		t.Fatalf("sent %d with %d errors, want %d without", row.Ops, row.Errors, n)
	}
	// The slowest waited for all the others to be due; the 99th percentile (the second slowest) for
	// all but one.
	if row.MaxMs < float64(n-1)-0.1 || row.P99ms < float64(n-2)-0.1 {
		t.Fatalf("queueing does not show: max %.1fms, p99 %.1fms; want at least %d and %d", row.MaxMs, row.P99ms, n-1, n-2)
	}
	// A closed loop measures from when each request is sent: one client over a server that answers at
	// once sees only the service time. (Its requests run one after another, so for its p99 to reach a
	// quarter of the open loop's, ten of its 1,000 requests would each have to stall for ~50ms.)
	instant := func(context.Context) (int64, error) { return 1, nil }
	closed := closedLoop(context.Background(), opts, "instant", instant, 1, 30*time.Second, 1000)
	if closed.Ops != 1000 || closed.P99ms > row.P99ms/4 {
		t.Fatalf("one closed-loop client sees the service time only: %d requests, p99 %.1fms vs open %.1fms", closed.Ops, closed.P99ms, row.P99ms)
	}
}

// How long each space lasts, from the figures that are known: a 63-bit counter at 1 M IDs/s, 7
// characters of base 62, Twitter's 41-bit clock (July 2080), 48 bits of milliseconds (year 10889).
func TestSpaceLasts(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		space idSpace
		rate  float64
		want  string
	}{
		{"63-bit counter", counterSpace(63), 1e6, "292,471 years"},
		{"63-bit counter, 200 M/s", counterSpace(63), 2e8, "1,462 years"},
		{"7-character codes", codeSpace(7), 1e6, "40.8 days"},
		{"7-character codes, 200 M/s", codeSpace(7), 2e8, "4.9 hours"},
		{"Twitter's clock", clockSpace(41, time.Millisecond, time.UnixMilli(1288834974657)), 1e6, "53.7 years"},
		{"a clock whatever the rate", clockSpace(41, time.Millisecond, time.UnixMilli(1288834974657)), 1, "53.7 years"},
		{"48-bit ms clock (365-day years)", clockSpace(48, time.Millisecond, time.Unix(0, 0)), 1e6, "8,869 years"},
		{"nothing runs out", idSpace{}, 1e6, "–"},
	} {
		if got := lasts(tt.space.yearsLeft(tt.rate, now)); got != tt.want {
			t.Errorf("%s: lasts %s, want %s", tt.name, got, tt.want)
		}
	}
	row := shortCodes(scheme{name: "x", coordination: "offsets"}, 1e6, now)
	if !strings.Contains(row.Scheme, "7-character") || row.Space != "7-character codes (62^7-1 IDs)" || lasts(row.YearsLeftReference) != "40.8 days" {
		t.Errorf("the shortener row: %+v", row)
	}
}
