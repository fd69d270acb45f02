package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ticketd/ticketd/allocator"
	tmysql "github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testservers"
)

// galeraNodes is the size of the Galera cluster a run starts.
const galeraNodes = 3

// galeraServers is a throwaway 3-node MariaDB Galera cluster the run owns: node i (from 0) at offset
// i+1 of auto_increment_increment 4 (see testservers.StartGalera).
type galeraServers struct {
	cfg    Config
	log    *slog.Logger
	nodes  []*testservers.MariaDB
	dsns   []string
	ownDir string
}

func (g *galeraServers) start(ctx context.Context) error {
	dir := g.cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "tkg")
		if err != nil {
			return err
		}
		dir, g.ownDir = d, d
	} else {
		dir += "/galera"
	}
	nodes, err := testservers.StartGalera(ctx, dir, galeraNodes)
	if err != nil {
		return fmt.Errorf("chaos: starting the Galera cluster: %w", err)
	}
	g.nodes = nodes
	// The database and the schema are made on one node; they replicate to the others.
	db, err := openDB(nodes[0].DSN(""))
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS ticketd")
	db.Close()
	if err != nil {
		return err
	}
	if _, err := schemaMigrate(ctx, nodes[0].DSN("ticketd")); err != nil {
		return err
	}
	for _, n := range nodes {
		g.dsns = append(g.dsns, n.DSN("ticketd"))
	}
	g.log.Info("chaos: Galera cluster up", "a", nodes[0].Port, "b", nodes[1].Port, "c", nodes[2].Port)
	return nil
}

func (g *galeraServers) layout() layout { return layout{servers: galeraNodes, step: galeraNodes + 1} }

func (g *galeraServers) addrs() []string {
	out := make([]string, len(g.nodes))
	for i, n := range g.nodes {
		out[i] = fmt.Sprintf("127.0.0.1:%d", n.Port)
	}
	return out
}

// open opens the cluster's nodes as ticket servers. When a node dies, every node's writes wait until
// the cluster evicts it (evs.suspect_timeout, 3 s on the cluster the run starts): one attempt outlasts
// that, as README's settings for Galera say.
func (g *galeraServers) open(ctx context.Context, ends []endpoint, obs allocator.Observer, log *slog.Logger) (leaser, error) {
	return openMySQL(ctx, g.dsns, ends, tmysql.Config{Failover: allocator.Failover{
		AttemptTimeout: 5 * time.Second, Timeout: 12 * time.Second, MaxBackoff: time.Second}, Logger: log, Observer: obs})
}

func (g *galeraServers) kill(i int) error                         { return g.nodes[i].Kill() }
func (g *galeraServers) restart(ctx context.Context, i int) error { return g.nodes[i].Start(ctx) }
func (g *galeraServers) canKill() bool                            { return true }

func (g *galeraServers) close() {
	for _, n := range g.nodes {
		_ = n.Kill()
	}
	if g.ownDir != "" {
		_ = os.RemoveAll(g.ownDir)
	}
}

// clusterSize is the number of nodes node i counts in its cluster, 0 when it does not answer.
func (g *galeraServers) clusterSize(i int) int {
	db, err := sql.Open("mysql", g.nodes[i].DSN("")+"?timeout=1s")
	if err != nil {
		return 0
	}
	defer db.Close()
	var name string
	var size int
	if db.QueryRow("SHOW STATUS LIKE 'wsrep_cluster_size'").Scan(&name, &size) != nil {
		return 0
	}
	return size
}

// faults: a node that lost its disk, which the cluster rebuilds by state transfer. No replica may fence
// it, and it must serve again without a repair.
func (g *galeraServers) faults(w *world) []fault {
	const c = 2
	name := fmt.Sprintf("Galera node %s's data directory wiped; it rejoins by state transfer", label(c))
	return []fault{at(slotSettings, fault{name: name, expect: ExpectHealed,
		apply: func(context.Context, *FaultResult) error {
			if err := g.nodes[c].WipeData(); err != nil {
				return err
			}
			// A node that rejoins with a new identity before the cluster evicted the old one meets a view
			// it cannot join: wait until the others count one node less.
			if !waitUntil(30*time.Second, func() bool {
				return g.clusterSize(0) == galeraNodes-1 && g.clusterSize(1) == galeraNodes-1
			}) {
				return fmt.Errorf("the cluster did not evict node %s within 30s", label(c))
			}
			return nil
		},
		revert: func(ctx context.Context, res *FaultResult) error {
			fenced := func() bool {
				for r := range w.running() {
					if h, ok := w.health(r, c); ok && (h.Fenced || refused(h)) {
						res.Detail = fmt.Sprintf("replica %d: %s", r+1, h.Error)
						return true
					}
				}
				return false
			}
			start := time.Now()
			if err := g.restart(ctx, c); err != nil {
				return err
			}
			transfer := time.Since(start)
			back := waitUntil(healthyWithin, func() bool {
				res.FencedOrRefused = res.FencedOrRefused || fenced()
				return w.everywhere(c, func(h allocator.ServerHealth) bool { return h.Healthy })
			})
			if !back {
				return fmt.Errorf("node %s not back in rotation in every replica within %s", label(c), healthyWithin)
			}
			w.checkFrom(name, c)
			if err := w.exercise(ctx, c); err != nil {
				return err
			}
			if !res.FencedOrRefused {
				res.Detail = fmt.Sprintf("state transfer and restart in %s; back in rotation in every replica, never fenced", transfer.Round(100*time.Millisecond))
			}
			return nil
		}})}
}
