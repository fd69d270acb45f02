package server

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// killable is a backend on two real ticket servers, and a way to kill the second.
type killable struct {
	backend allocator.Backend
	nameB   string
	killB   func() error
}

func killablePair(t *testing.T) killable {
	pair := testenv.PrivatePair(t)
	var dsns []string
	for _, m := range pair {
		testenv.Exec(t, m.DSN(""), "CREATE DATABASE ticketd")
		dsns = append(dsns, m.DSN("ticketd"))
	}
	p, err := mysql.Open(context.Background(), mysql.Config{DSNs: dsns, Names: []string{"a", "b"}, Logger: quiet, Migrate: true, Failover: leasesAlone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return killable{backend: p, nameB: "b", killB: pair[1].Kill}
}

func killableRedis(t *testing.T) killable {
	var addrs []string
	var second *testservers.Redis
	for range 2 {
		second = testenv.PrivateRedis(t, testservers.RedisOptions{})
		addrs = append(addrs, second.Addr())
	}
	s, err := redis.Open(context.Background(), redis.Config{Addrs: addrs, Logger: quiet, Failover: leasesAlone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return killable{backend: s, nameB: second.Addr(), killB: second.Kill}
}

// TestHeadroomThroughAnOutage: on a real pair (and two Redis instances), with max_id 100,000,000 and 400
// IDs issued, the second server is killed. The headroom a GET, the status page and the metrics show
// does not shrink: the dead server counts at the counter it was last read at, named as stale, and the
// forecast sees no burst of issuing (its date does not come closer).
func TestHeadroomThroughAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) killable
	}{{"mysql", killablePair}, {"redis", killableRedis}} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.open(t)
			clk := allocatortest.NewClock()
			s := newTestServer(t, func(c *Config) { c.Backend, c.now, c.Cache.Disabled = k.backend, clk.Now, true })
			if w := s.do(t, request{method: "PUT", path: "/v1/namespaces/big", token: adminTok, body: `{"block_size":100,"max_id":"100000000"}`}); w.Code != 201 {
				t.Fatalf("create: %d %s", w.Code, w.Body.String())
			}
			get := func() api.Namespace {
				t.Helper()
				w := s.do(t, request{method: "GET", path: "/v1/namespaces/big", token: adminTok})
				if w.Code != 200 {
					t.Fatalf("get: %d %s", w.Code, w.Body.String())
				}
				return decode[api.Namespace](t, w)
			}
			gauge := func() string {
				t.Helper()
				// A scrape serves the last reading and takes a new one in the background when it is
				// old: the second scrape serves what the servers say now.
				s.do(t, request{method: "GET", path: "/metrics", token: adminTok})
				s.background.Wait()
				body := s.do(t, request{method: "GET", path: "/metrics", token: adminTok}).Body.String()
				for _, line := range strings.Split(body, "\n") {
					if v, ok := strings.CutPrefix(line, `ticketd_namespace_ids_remaining{ticketd_namespace="big"} `); ok {
						return v
					}
				}
				return "absent"
			}
			get()
			for range 4 {
				if w := s.do(t, request{method: "POST", path: "/v1/namespaces/big/blocks", token: adminTok}); w.Code != 200 {
					t.Fatalf("lease: %d %s", w.Code, w.Body.String())
				}
				clk.Advance(15 * time.Second)
			}
			before := get()
			if before.IDsRemaining == nil || len(before.StaleCounters) != 0 || before.ExhaustsAt == nil {
				t.Fatalf("with both servers up: %+v", before)
			}
			left, _ := strconv.ParseUint(*before.IDsRemaining, 10, 64)
			if left < 99_000_000 {
				t.Fatalf("%d IDs left after 400 of 100,000,000", left)
			}
			if g := gauge(); !sameCount(g, left) {
				t.Fatalf("gauge %s, the namespace says %s", g, *before.IDsRemaining)
			}
			if err := k.killB(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				clk.Advance(15 * time.Second)
				after := get()
				if after.IDsRemaining == nil || *after.IDsRemaining != *before.IDsRemaining {
					t.Fatalf("with %s killed, ids_remaining %s; it was %s and nothing was issued", k.nameB, str(after.IDsRemaining), *before.IDsRemaining)
				}
				if len(after.StaleCounters) != 1 || after.StaleCounters[0].Server != k.nameB {
					t.Fatalf("with %s killed, the stale counters are %+v", k.nameB, after.StaleCounters)
				}
				if after.ExhaustsAt != nil && before.ExhaustsAt != nil && after.ExhaustsAt.Before(*before.ExhaustsAt) {
					t.Fatalf("with %s killed and nothing issued, the namespace exhausts at %s; before, at %s", k.nameB, after.ExhaustsAt, before.ExhaustsAt)
				}
				if g := gauge(); g == "absent" || g == "0" || !sameCount(g, left) {
					t.Fatalf("with %s killed, the headroom gauge is %s; it was %d", k.nameB, g, left)
				}
			}
			page := section(t, s.do(t, request{method: "GET", path: "/", token: adminTok}).Body.String(), "big")
			if got := attr(page, "data-ids-remaining"); len(got) != 1 || got[0] != *before.IDsRemaining || !strings.Contains(page, "stale") {
				t.Fatalf("status page headroom %v with %s killed:\n%s", got, k.nameB, page)
			}
		})
	}
}

// sameCount reports whether a sample value in the text format is the count n.
func sameCount(v string, n uint64) bool {
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && f == float64(n)
}

// str is *p, or "null".
func str(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

// TestHeadroomAfterTheCeilingChanges: with a million IDs issued, max_id lowered to 2^31-1 (and later raised)
// through the API. The IDs the ceiling took away are not IDs issued: no forecast until IDs are issued
// under the new ceiling, and then one from them alone.
func TestHeadroomAfterTheCeilingChanges(t *testing.T) {
	clk := allocatortest.NewClock()
	s := newTestServer(t, func(c *Config) { c.Backend, c.now, c.Cache.Disabled = testenv.Embedded(t), clk.Now, true })
	if w := s.do(t, request{method: "PUT", path: "/v1/namespaces/n", token: adminTok, body: `{"block_size":1000000,"max_id":"1000000000000"}`}); w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	get := func() api.Namespace {
		t.Helper()
		return decode[api.Namespace](t, s.do(t, request{method: "GET", path: "/v1/namespaces/n", token: adminTok}))
	}
	lease := func() {
		t.Helper()
		if w := s.do(t, request{method: "POST", path: "/v1/namespaces/n/blocks", token: adminTok}); w.Code != 200 {
			t.Fatalf("lease: %d %s", w.Code, w.Body.String())
		}
	}
	get()
	clk.Advance(20 * time.Second)
	lease()
	if ns := get(); ns.ExhaustsAt == nil {
		t.Fatalf("a million IDs issued in 20 s and no forecast: %+v", ns)
	}
	for _, maxID := range []string{"2147483647", "4294967295"} {
		clk.Advance(20 * time.Second)
		w := s.do(t, request{method: "PUT", path: "/v1/namespaces/n", token: adminTok, body: `{"max_id":"` + maxID + `"}`})
		if ns := decode[api.Namespace](t, w); w.Code != 200 || ns.ExhaustsAt != nil {
			t.Fatalf("max_id %s: %d, exhausts_at %v; nothing was issued under it", maxID, w.Code, ns.ExhaustsAt)
		}
		clk.Advance(20 * time.Second)
		if ns := get(); ns.ExhaustsAt != nil {
			t.Fatalf("max_id %s, 20 s later with nothing issued: exhausts_at %v", maxID, ns.ExhaustsAt)
		}
		page := section(t, s.do(t, request{method: "GET", path: "/", token: adminTok}).Body.String(), "n")
		if attr(page, "data-soon")[0] != "false" {
			t.Fatalf("max_id %s: the status page shows the namespace running out:\n%s", maxID, page)
		}
		lease()
		clk.Advance(20 * time.Second)
		ns := get()
		// A million IDs in 20 s under this ceiling: 50,000 a second, half a day or more away, not now.
		if ns.ExhaustsAt == nil || ns.ExhaustsAt.Before(clk.Now().Add(6*time.Hour)) {
			t.Fatalf("max_id %s, a million IDs issued under it: exhausts_at %v", maxID, ns.ExhaustsAt)
		}
	}
}

// TestHeadroomReadingAllocatesNothing: the forecast of a namespace already read, over the same servers,
// allocates nothing, however often it is read: the scrape's background reading observes every
// namespace every 10 s, and what each one keeps stays what it was (its samples and counters are
// updated in place, the list of servers counted shared by the namespaces).
func TestHeadroomReadingAllocatesNothing(t *testing.T) {
	var h headroom
	ns := allocator.Namespace{Name: "orders", MaxID: 1_000_000_000, Servers: []allocator.ServerState{
		{Server: "b:3306", Next: 2, Step: 2}, {Server: "a:3306", Next: 1, Step: 2},
	}}
	now := time.Unix(1_800_000_000, 0)
	read := func() {
		now = now.Add(headroomEvery)
		ns.Servers[0].Next += 2000
		ns.Servers[1].Next += 2000
		if f := h.observe(ns, now); !f.Known {
			t.Fatalf("forecast %+v", f)
		}
	}
	for range 2 * headroomSamples { // the samples reach their bound
		read()
	}
	if f := h.observe(ns, now); f.PerSecond != 200 || len(h.series["orders"].samples) > headroomSamples {
		t.Fatalf("forecast %+v from %d samples, want 200 IDs/s (each server issues every other ID)", f, len(h.series["orders"].samples))
	}
	if n := testing.AllocsPerRun(100, read); n != 0 {
		t.Errorf("a reading allocates %v times, want 0", n)
	}
	other := ns
	other.Name = "links"
	h.observe(other, now)
	if a, b := h.series["orders"].servers, h.series["links"].servers; a != "a:3306,b:3306" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("the servers counted: %q and %q, not one shared list", a, b)
	}
}

// TestHeadroomOfAnIdleNamespace: a namespace read every 10 s with nothing issued keeps two samples, the
// first and the last of the run, however long; its rate is that of the last hour, from as many left
// at the hour's start, also once IDs are issued again.
func TestHeadroomOfAnIdleNamespace(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ns := func(next int64) allocator.Namespace {
		return allocator.Namespace{Name: "idle", Start: 1, MaxID: 100_000_000, Servers: []allocator.ServerState{{Server: "a", Next: next, Step: 1}}}
	}
	var h headroom
	now := t0
	for range 3 * 360 { // three hours of readings, nothing issued
		now = now.Add(headroomEvery)
		if f := h.observe(ns(1_000), now); f.PerSecond != 0 || !f.Known {
			t.Fatalf("idle: %+v", f)
		}
	}
	if sr := h.series["idle"]; len(sr.samples) != 2 || cap(sr.samples) != 2 {
		t.Fatalf("an idle namespace keeps %d samples in an array of %d, want 2 in 2", len(sr.samples), cap(sr.samples))
	}
	// 3,600 IDs in the next 30 minutes: the rate over the last hour is one a second, half of the hour idle.
	now = now.Add(30 * time.Minute)
	if f := h.observe(ns(1_000+3_600), now); f.PerSecond != 1 {
		t.Fatalf("after 3,600 IDs in the last hour: %v per second, want 1", f.PerSecond)
	}
}
