package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/client"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestE2ENoWaitAfterAnOutage: SDK clients with the default backoff draw IDs through `ticketd serve`
// while both ticket servers are out of rotation long enough that every client's refills fail again and
// again and its backoff grows to its longest; then they come back. On the MariaDB pair both are refused
// (auto_increment_increment changed on both, as an operator might, and the connections cut so that
// ticketd checks them again) until the setting is put back; on Redis both refuse connections. From the
// moment ticketd has a server in rotation again, no Next waits a second: a refill asked during the
// outage is held by ticketd until a server is back and served then, and the client retries at once
// after an answer that was held, instead of sleeping a backoff that outlasts the outage. No ID comes
// twice.
func TestE2ENoWaitAfterAnOutage(t *testing.T) {
	const name = "after"
	t.Run("MariaDB", func(t *testing.T) {
		// A pair of its own: the settings changed are the servers' own, and other tests share the
		// harness's pair.
		pp := testenv.PrivatePair(t)
		dsns := prepareOn(t, testenv.FreshDatabases(t, []string{pp[0].DSN(""), pp[1].DSN("")}), allocator.Namespace{Name: name, BlockSize: 50, MaxBlockSize: 1000})
		direct := slices.Clone(dsns)
		setIncrement := func(n int) {
			for _, dsn := range direct {
				db, err := sql.Open("mysql", dsn)
				if err != nil {
					t.Fatal(err)
				}
				_, err = db.Exec(fmt.Sprintf("SET GLOBAL auto_increment_increment = %d", n))
				db.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Cleanup(func() { setIncrement(2) })
		var gates []*testenv.Gate
		for i, dsn := range dsns {
			mc, err := gomysql.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			g := testenv.StartGate(t, mc.Addr)
			mc.Addr = g.Addr()
			dsns[i], gates = mc.FormatDSN(), append(gates, g)
		}
		td := startTicketd(t, pairStore(dsns), name)
		noWaitAfterAnOutage(t, td, name, 3, func() {
			setIncrement(4)
			for _, g := range gates {
				g.Set(testenv.Refuse) // every connection closed: the next one is checked
				g.Set(testenv.Pass)
			}
		}, func() { setIncrement(2) })
	})
	t.Run("Redis", func(t *testing.T) {
		gates, addrs := testenv.GatedRedis(t, 2)
		store := []string{"--redis", strings.Join(addrs, ",")}
		testenv.RunTicketd(t, nil, append([]string{"namespace", "create"}, append(store, name, "--block-size", "50", "--max-block-size", "1000")...)...)
		td := startTicketd(t, store, name)
		set := func(f testenv.Fate) func() {
			return func() {
				for _, g := range gates {
					g.Set(f)
				}
			}
		}
		// A lease meets refused connections for its whole lease timeout (the servers are tried in
		// rounds) before it fails: each client fails about one refill in the outage.
		noWaitAfterAnOutage(t, td, name, 1, set(testenv.Refuse), set(testenv.Pass))
	})
}

// noWaitAfterAnOutage draws through td with clients of the default backoff, takes every ticket server
// out with out until td has none in rotation and for 8 s more (each client must have failed at least
// minFailures refills by then), brings them back with in, and checks that no Next waits a second from
// the moment td has one in rotation again, and that no ID comes twice.
func noWaitAfterAnOutage(t *testing.T, td *testenv.Serve, name string, minFailures int64, out, in func()) {
	usable := func() (n int) {
		req, _ := http.NewRequest(http.MethodGet, td.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+e2eAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var r api.Readiness
		if json.NewDecoder(resp.Body).Decode(&r) != nil {
			return -1
		}
		for _, s := range r.Servers {
			if s.Healthy {
				n++
			}
		}
		return n
	}

	const clients = 8
	var (
		mu      sync.Mutex
		back    time.Time // when ticketd had a server in rotation again; zero before
		longest time.Duration
		after   int
		lastErr error
		set     = newIDSet()
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		cs      []*client.Client
	)
	for range clients {
		// The default backoff and request timeout; callers wait as long as the test runs, so that none
		// gives up in the moment the servers come back.
		c := newClient(t, client.HTTP(td.URL), name, client.WithToken(e2eNSToken), client.WithMaxWait(time.Minute))
		cs = append(cs, c)
		wg.Go(func() {
			add := set.adder()
			for {
				select {
				case <-stop:
					return
				default:
				}
				begin := time.Now()
				id, err := c.Next(context.Background())
				end := time.Now()
				mu.Lock()
				if err == nil {
					add.add(id)
				}
				if !back.IsZero() && end.After(back) {
					after++
					longest = max(longest, min(end.Sub(begin), end.Sub(back))) // waited since the outage ended
					if err != nil {
						lastErr = err
					}
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	failures := func() int64 { // the fewest failed refills of any client
		n := cs[0].Stats().RefillErrors
		for _, c := range cs[1:] {
			n = min(n, c.Stats().RefillErrors)
		}
		return n
	}
	eventually(t, "IDs served through ticketd", func() bool { return set.n.Load() > 10*clients })
	out()
	eventually(t, "neither server in rotation", func() bool { return usable() == 0 })
	// Long enough that the clients' backoffs reach their longest (DefaultBackoffMax, 5 s).
	time.Sleep(8 * time.Second)
	if n := failures(); n < minFailures {
		t.Fatalf("a client failed only %d refills in the outage; the test needs their backoff grown", n)
	}
	in()
	eventually(t, "a server back in rotation", func() bool { return usable() > 0 })
	mu.Lock()
	back = time.Now()
	mu.Unlock()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	set.check(t, set.n.Load())
	mu.Lock()
	defer mu.Unlock()
	var errs int64
	for _, c := range cs {
		errs += c.Stats().RefillErrors
	}
	t.Logf("longest wait after the outage: %s; %d calls after it; %d refill errors in all", longest, after, errs)
	if lastErr != nil {
		t.Fatalf("a Next that ended after the outage failed: %v", lastErr)
	}
	if after < clients {
		t.Fatalf("only %d calls returned in the 3 s after the outage", after)
	}
	if longest >= time.Second {
		t.Fatalf("a Next waited %s after both servers were back in rotation, want under a second", longest)
	}
}
