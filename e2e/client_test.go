package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/inprocess"
	"github.com/ticketd/ticketd/internal/testenv"
)

const (
	e2eAdminToken = "admin-e2e-secret-2718281828"
	e2eNSToken    = "namespace-e2e-secret"
)

// preparePair migrates a fresh database on each server of the harness's MariaDB pair and creates the
// namespace; it returns the DSNs.
func preparePair(t *testing.T, ns allocator.Namespace) []string {
	t.Helper()
	return prepareOn(t, testenv.Pair(t), ns)
}

// prepareOn migrates the databases dsns, one on each server of a pair, and creates the namespace.
func prepareOn(t *testing.T, dsns []string, ns allocator.Namespace) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := mysql.Open(ctx, mysql.Config{DSNs: dsns, Migrate: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("open the pair: %v", err)
	}
	defer p.Close()
	if _, err := p.CreateNamespace(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return dsns
}

// pairStore is the flag of `ticketd serve` that puts it on the pair.
func pairStore(dsns []string) []string { return []string{"--mysql", testenv.DSNList(dsns)} }

// startTicketd runs `ticketd serve` on the store that the flags choose (pairStore, or --data-dir for
// the embedded store), on a free loopback port, with an admin token and a token for each namespace
// given, and waits until it is ready. It is killed when the test ends.
func startTicketd(t testing.TB, store []string, namespaces ...string) *testenv.Serve {
	t.Helper()
	var tokens []string
	for _, ns := range namespaces {
		tokens = append(tokens, ns+"="+e2eNSToken)
	}
	// Tokens through the environment, as the docs advise.
	p := testenv.StartServe(t, []string{"TICKETD_ADMIN_TOKEN=" + e2eAdminToken, "TICKETD_TOKENS=" + strings.Join(tokens, ",")}, store...)
	eventually(t, "ticketd ready", func() bool {
		resp, err := http.Get(p.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// e2eLoad runs goroutines that take IDs from c until stop is closed or each has taken perG; every ID
// goes into set. Even goroutines use Next, odd ones NextN with batches of 1 to 64.
type e2eLoad struct {
	served    atomic.Int64
	odd, even atomic.Int64
	wg        sync.WaitGroup
	errs      chan error
	stop      chan struct{}
	stopOnce  sync.Once
	set       *idSet
	c         *client.Client
	perG      int64 // 0: until stopped
}

func startLoad(c *client.Client, set *idSet, goroutines int, perG int64) *e2eLoad {
	l := &e2eLoad{errs: make(chan error, goroutines), stop: make(chan struct{}), set: set, c: c, perG: perG}
	for g := range goroutines {
		l.wg.Add(1)
		go l.run(g)
	}
	return l
}

func (l *e2eLoad) run(g int) {
	defer l.wg.Done()
	add := l.set.adder()
	ctx := context.Background()
	buf := make([]int64, 1+g%64)
	var odd, even int64
	defer func() { l.odd.Add(odd); l.even.Add(even) }()
	record := func(id int64) {
		add.add(id)
		if id%2 == 1 {
			odd++
		} else {
			even++
		}
	}
	for taken := int64(0); l.perG == 0 || taken < l.perG; {
		if taken%4096 == 0 {
			select {
			case <-l.stop:
				return
			default:
			}
		}
		if g%2 == 0 {
			id, err := l.c.Next(ctx)
			if err != nil {
				l.errs <- fmt.Errorf("goroutine %d after %d IDs: %w", g, taken, err)
				return
			}
			record(id)
			taken++
			l.served.Add(1)
			continue
		}
		want := buf
		if l.perG > 0 {
			want = buf[:min(int64(len(buf)), l.perG-taken)]
		}
		n, err := l.c.NextN(ctx, want)
		for _, id := range want[:n] {
			record(id)
		}
		taken += int64(n)
		l.served.Add(int64(n))
		if err != nil {
			l.errs <- fmt.Errorf("goroutine %d after %d IDs: %w", g, taken, err)
			return
		}
	}
}

// halt tells the goroutines to stop.
func (l *e2eLoad) halt() { l.stopOnce.Do(func() { close(l.stop) }) }

// wait waits for the goroutines and fails the test on any caller's error.
func (l *e2eLoad) wait(t *testing.T) {
	t.Helper()
	l.wg.Wait()
	close(l.errs)
	for err := range l.errs {
		t.Fatal(err)
	}
}

// TestE2EUniqueThroughTicketd: 64 goroutines × 1,000,000 IDs through a real ticketd on the MariaDB pair;
// no ID twice, and both ticket servers (odd and even) took part.
func TestE2EUniqueThroughTicketd(t *testing.T) {
	dsns := preparePair(t, allocator.Namespace{Name: "e2e"})
	td := startTicketd(t, pairStore(dsns), "e2e")
	c := newClient(t, client.HTTP(td.URL), "e2e", client.WithToken(e2eNSToken))
	const goroutines, perG = 64, 1_000_000
	set := newIDSet()
	start := time.Now()
	l := startLoad(c, set, goroutines, perG)
	l.wait(t)
	took := time.Since(start)
	set.check(t, goroutines*perG)
	st := c.Stats()
	if st.Served != goroutines*perG {
		t.Fatalf("client.Stats().Served = %d, want %d", st.Served, goroutines*perG)
	}
	if l.odd.Load() == 0 || l.even.Load() == 0 {
		t.Fatalf("odd IDs %d, even IDs %d: want both ticket servers used", l.odd.Load(), l.even.Load())
	}
	t.Logf("%d IDs in %s (%.1f M/s with the race detector); %d refills (latency %s), %d stalls; %d odd, %d even",
		goroutines*perG, took.Round(time.Millisecond), float64(goroutines*perG)/took.Seconds()/1e6,
		st.Refills, st.RefillLatency, st.Stalls, l.odd.Load(), l.even.Load())
}

// TestE2EFailoverAndBothDown: two ticketd replicas on one pair. Killing one mid-run does not stop the
// IDs; killing the other too, the IDs still cached are served, then Next returns client.ErrUnavailable.
func TestE2EFailoverAndBothDown(t *testing.T) {
	dsns := preparePair(t, allocator.Namespace{Name: "fo", BlockSize: 1000, MaxBlockSize: 50_000})
	a := startTicketd(t, pairStore(dsns), "fo")
	b := startTicketd(t, pairStore(dsns), "fo")
	c := newClient(t, client.HTTP(a.URL, b.URL), "fo", client.WithToken(e2eNSToken), client.WithRefillInterval(20*time.Millisecond),
		client.WithBackoff(5*time.Millisecond, 100*time.Millisecond), client.WithRequestTimeout(2*time.Second))
	set := newIDSet()
	l := startLoad(c, set, 16, 0)
	eventually(t, "leases through both replicas", func() bool {
		st := c.Stats()
		return st.Endpoints[0].Leases > 2 && st.Endpoints[1].Leases > 2
	})
	b.Kill()
	killedAt, refillsAt := l.served.Load(), c.Stats().Refills
	eventually(t, "IDs and refills after one replica died", func() bool {
		return l.served.Load() > killedAt+500_000 && c.Stats().Refills > refillsAt+10
	})
	l.halt()
	l.wait(t) // any caller error fails here: one replica was up all along
	st := c.Stats()
	if st.Endpoints[1].Failures == 0 && st.Endpoints[1].LastError == "" {
		t.Fatalf("the dead replica shows no failure: %+v", st.Endpoints)
	}
	t.Logf("%d IDs before the kill, %d in all; endpoints %+v", killedAt, l.served.Load(), st.Endpoints)

	a.Kill()
	after, err := drain(c, set, time.Second)
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("with both replicas gone: %v, want client.ErrUnavailable", err)
	}
	if after == 0 {
		t.Fatalf("no cached ID served after both replicas died")
	}
	set.check(t, l.served.Load()+after)
	if st := c.Stats(); st.Cached != 0 {
		t.Fatalf("client.ErrUnavailable with %d IDs still cached", st.Cached)
	}
	t.Logf("%d cached IDs served after both died, then: %v", after, err)
}

// TestFromBackendOnThePair: the in-process source leases straight from the MariaDB pair; many
// goroutines, no ID twice, both servers used.
func TestFromBackendOnThePair(t *testing.T) {
	dsns := testenv.Pair(t)
	ctx := context.Background()
	p, err := mysql.Open(ctx, mysql.Config{DSNs: dsns, Migrate: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.CreateNamespace(ctx, allocator.Namespace{Name: "inproc", BlockSize: 500, MaxBlockSize: 100_000}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, inprocess.Source(p), "inproc", client.WithRefillInterval(50*time.Millisecond))
	const goroutines, perG = 64, 200_000
	set := newIDSet()
	l := startLoad(c, set, goroutines, perG)
	l.wait(t)
	set.check(t, goroutines*perG)
	if l.odd.Load() == 0 || l.even.Load() == 0 {
		t.Fatalf("odd %d, even %d: want both ticket servers used", l.odd.Load(), l.even.Load())
	}
	st := c.Stats()
	t.Logf("%d IDs, %d refills, latency %s, %d stalls", st.Served, st.Refills, st.RefillLatency, st.Stalls)
}

// pacedLoad is goroutines that each take burst IDs with Next, then sleep a millisecond, until stopped;
// every ID goes into set, and each call's wait is measured once measure is set.
type pacedLoad struct {
	c       *client.Client
	set     *idSet
	served  atomic.Int64
	measure atomic.Bool
	mu      sync.Mutex
	longest time.Duration // the longest Next while measuring
	at      time.Time     // when it began
	stop    chan struct{}
	wg      sync.WaitGroup
	errs    chan error
}

func startPaced(c *client.Client, set *idSet, goroutines, burst int) *pacedLoad {
	l := &pacedLoad{c: c, set: set, stop: make(chan struct{}), errs: make(chan error, goroutines)}
	for range goroutines {
		l.wg.Go(func() { l.run(burst) })
	}
	return l
}

func (l *pacedLoad) run(burst int) {
	add := l.set.adder()
	var longest time.Duration
	var at time.Time
	defer func() {
		l.mu.Lock()
		if longest > l.longest {
			l.longest, l.at = longest, at
		}
		l.mu.Unlock()
	}()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		for range burst {
			measure := l.measure.Load()
			begin := time.Now()
			id, err := l.c.Next(context.Background())
			took := time.Since(begin)
			if err != nil {
				l.errs <- err
				return
			}
			add.add(id)
			l.served.Add(1)
			if measure && took > longest {
				longest, at = took, begin
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// halt stops the goroutines, fails the test on any caller's error, and returns the longest Next
// measured and when it began.
func (l *pacedLoad) halt(t *testing.T) (time.Duration, time.Time) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	close(l.errs)
	for err := range l.errs {
		t.Fatal(err)
	}
	return l.longest, l.at
}

// TestE2EHedgesAroundAHungReplica: two ticketd replicas on one pair; mid-run one of them stops
// answering (SIGSTOP: its connections are accepted, nothing replies) for 3 s, then answers again. The
// request timeout is 10 s, so a refill sent there and not hedged would keep callers waiting for seconds;
// hedged to the other replica, no Next call after the warm-up waits for the frozen one (none waits a
// second), and the blocks the frozen replica delivers late are kept or dropped, never served twice. The
// load is bounded (four goroutines, 5 IDs a millisecond each).
func TestE2EHedgesAroundAHungReplica(t *testing.T) {
	dsns := preparePair(t, allocator.Namespace{Name: "hedge", BlockSize: 100, MaxBlockSize: 1000})
	a := startTicketd(t, pairStore(dsns), "hedge")
	b := startTicketd(t, pairStore(dsns), "hedge")
	c := newClient(t, client.HTTP(a.URL, b.URL), "hedge", client.WithToken(e2eNSToken), client.WithRequestTimeout(10*time.Second),
		client.WithMaxWait(30*time.Second), client.WithBackoff(5*time.Millisecond, 200*time.Millisecond))
	set := newIDSet()
	l := startPaced(c, set, 4, 5)
	eventually(t, "warm-up: leases through both replicas", func() bool {
		st := c.Stats()
		return st.Refills > 20 && st.Endpoints[0].Leases > 5 && st.Endpoints[1].Leases > 5
	})
	l.measure.Store(true)
	time.Sleep(500 * time.Millisecond)
	frozenAt := time.Now()
	// SIGSTOP: the kernel still accepts connections on a's port and takes requests into its buffers,
	// but nothing answers until SIGCONT.
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	time.Sleep(3 * time.Second)
	during := c.Stats()
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	longest, at := l.halt(t)
	set.check(t, l.served.Load())
	st := c.Stats()
	t.Logf("%d IDs; while frozen: %d refills, %d slow, %d hedges, %d won, %d stalls", l.served.Load(),
		during.Refills-before.Refills, during.SlowRefills-before.SlowRefills, during.Hedges-before.Hedges,
		during.HedgesWon-before.HedgesWon, during.Stalls-before.Stalls)
	t.Logf("in all: %d refills, %d hedges, %d won, %d stalls, %d IDs discarded, hedge delay %s; endpoints %+v",
		st.Refills, st.Hedges, st.HedgesWon, st.Stalls, st.Discarded, st.HedgeDelay, st.Endpoints)
	t.Logf("longest Next after the warm-up: %s, %s after the freeze", longest, at.Sub(frozenAt).Round(time.Millisecond))
	if won := during.HedgesWon - before.HedgesWon; won < 3 {
		t.Fatalf("%d hedges won while replica a was frozen: the test did not exercise hedging", won)
	}
	// Not waiting for the frozen replica is the mechanism tested (the request timeout is 10 s); how fast
	// the hedges are is the chaos run's to measure.
	if longest >= time.Second {
		t.Fatalf("a Next call waited %s, %s after replica a froze; want under a second: it waited for the frozen replica", longest, at.Sub(frozenAt))
	}
}
