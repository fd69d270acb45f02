package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// oneShot is what one `ticketd lease` process did, and when it ended.
type oneShot struct {
	out, log string
	err      error
	ended    time.Time
}

// leaseAtOnce runs n `ticketd lease` processes at once, with the default timeouts, and returns what
// each did.
func leaseAtOnce(t *testing.T, n int, args ...string) []oneShot {
	t.Helper()
	res := make([]oneShot, n)
	var wg sync.WaitGroup
	for i := range res {
		cmd := testenv.TicketdCommand(t, nil, append([]string{"lease"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Run()
			res[i] = oneShot{out: stdout.String(), log: stderr.String(), err: err, ended: time.Now()}
		}()
	}
	wg.Wait()
	return res
}

// TestOneShotLeasesOnGaleraWhileANodeDies runs one-shot `ticketd lease` processes on a 3-node Galera
// cluster: 120 of them, 20 at a time, half of them right after a node is SIGKILLed (each node once).
// Until the cluster evicts the dead node it stalls every write: evs.suspect_timeout (3 s here) after
// the kill when the others agree quickly, evs.inactive_timeout (6 s) at the latest, either plus up to
// evs.inactive_check_period (1 s). So a lease with 2 s attempts must keep trying the nodes for its
// whole lease timeout, which the processes set above the longest stall, as the docs tell operators to,
// not give up after one attempt on each. And processes closing together write the same water marks on
// different nodes, which the cluster refuses as deadlocks (Error 1213) unless they are written again.
// Every lease succeeds, no log says a write met another, and no ID is issued twice.
func TestOneShotLeasesOnGaleraWhileANodeDies(t *testing.T) {
	nodes := testenv.PrivateGalera(t)
	testenv.Exec(t, nodes[0].DSN(""), "CREATE DATABASE ticketd") // replicates to the others
	var dsns []string
	for _, n := range nodes {
		dsns = append(dsns, n.DSN("ticketd"))
	}
	cluster := testenv.DSNList(dsns)
	testenv.RunTicketd(t, nil, "migrate", "--mysql", dsns[0]) // replicates to the others
	testenv.RunTicketd(t, nil, "namespace", "create", "--mysql", cluster, "orders", "--block-size", "100")

	// The longest stall, with a second to spare.
	leaseTimeout := testservers.GaleraInactiveTimeout + 2*time.Second
	args := []string{"--mysql", cluster, "--lease-timeout", leaseTimeout.String(), "orders"}
	const perBatch = 20
	var blocks []allocator.Block
	failed := 0
	// check takes the blocks of a batch. With every node up a process logs nothing; after a kill it
	// says which node is down and which writes waited too long for the cluster, but never that a
	// write met another (Error 1213, a deadlock, as Galera reports a lost certification).
	check := func(when string, allUp bool, res []oneShot) {
		t.Helper()
		for _, r := range res {
			switch {
			case r.err != nil:
				failed++
				t.Errorf("%s: ticketd lease: %v\n%s", when, r.err, r.log)
				continue
			case allUp && r.log != "", strings.Contains(r.log, "Error 1213"), strings.Contains(r.log, "Deadlock"):
				t.Errorf("%s: ticketd lease succeeded but logged:\n%s", when, r.log)
			}
			var wb api.Block
			if err := json.Unmarshal([]byte(r.out), &wb); err != nil {
				t.Fatalf("%s: lease output %q: %v", when, r.out, err)
			}
			b, err := wb.ToBlock()
			if err != nil {
				t.Fatalf("%s: block %+v: %v", when, wb, err)
			}
			blocks = append(blocks, b)
		}
	}
	ctx := context.Background()
	for i, node := range nodes {
		check("every node up", true, leaseAtOnce(t, perBatch, args...))
		if err := node.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		res := leaseAtOnce(t, perBatch, args...)
		check(fmt.Sprintf("right after node %d was killed", i+1), false, res)
		var last time.Duration
		for _, r := range res {
			last = max(last, r.ended.Sub(killed))
		}
		t.Logf("node %d killed: the last of %d processes ended %s after the kill", i+1, perBatch, last.Round(time.Millisecond))
		if i == len(nodes)-1 {
			break
		}
		testenv.WaitClusterSize(t, nodes, len(nodes)-1)
		if err := node.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testenv.WaitClusterSize(t, nodes, len(nodes))
	}
	if failed > 0 {
		t.Fatalf("%d of %d leases failed", failed, 2*perBatch*len(nodes))
	}
	if err := allocatortest.CheckDisjoint(blocks); err != nil {
		t.Fatal(err)
	}
	servers := map[string]int{}
	for _, b := range blocks {
		servers[b.Server]++
	}
	if len(servers) != len(nodes) {
		t.Fatalf("blocks per node %v: want every node serving", servers)
	}
	t.Logf("%d leases, none failed, none logged a deadlock; blocks per node %v", len(blocks), servers)
}
