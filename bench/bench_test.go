package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
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

func TestJudgeComputesAgreementFromTheNumbers(t *testing.T) {
	keys := []btreeKey{{name: "seq"}, {name: "random wide", random: true, wide: true}, {name: "ordered wide", wide: true}}
	tests := []struct {
		name  string
		rows  []BTreeRow
		agree []bool
	}{
		{"as the article says", []BTreeRow{
			{Fill: 1.0, IndexBytes: 100}, {Fill: 0.7, IndexBytes: 140}, {Fill: 0.98, IndexBytes: 150},
		}, []bool{true, true, true}},
		{"sequential pages half empty, random pages full, indexes no bigger", []BTreeRow{
			{Fill: 0.6, IndexBytes: 100}, {Fill: 0.95, IndexBytes: 140}, {Fill: 0.95, IndexBytes: 100},
		}, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			judge(tt.rows, keys)
			for i, r := range tt.rows {
				if r.Agrees != tt.agree[i] || r.Claim == "" || r.Why == "" {
					t.Errorf("%s: %+v, want agrees=%v", keys[i].name, r, tt.agree[i])
				}
			}
		})
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
	var server sync.Mutex // one request at a time, 2ms each: 500/s at most
	op := func(ctx context.Context) (int64, error) {
		server.Lock()
		defer server.Unlock()
		time.Sleep(2 * time.Millisecond)
		return 1, nil
	}
	opts := Options{}.withDefaults()
	row := openLoop(context.Background(), opts, "slow", op, 1000, 100*time.Millisecond, 1000)
	if row.Ops != 100 {
		t.Fatalf("sent %d, want 100", row.Ops)
	}
	// The 100th request was due at 99ms and served after 100 × 2ms: about 100ms late.
	if row.MaxMs < 60 || row.P99ms < 40 {
		t.Fatalf("queueing does not show: %+v", row)
	}
	closed := closedLoop(context.Background(), opts, "slow", op, 1, 100*time.Millisecond, 1000)
	if closed.P99ms > row.P99ms/4 {
		t.Fatalf("one closed-loop client sees the service time only: p99 %.1fms vs open %.1fms", closed.P99ms, row.P99ms)
	}
}
