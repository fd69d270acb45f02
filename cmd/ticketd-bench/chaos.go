package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/chaos"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func init() {
	commands["chaos"] = commandInfo{usage: "ticketd-bench chaos [flags]",
		summary: "Draw IDs through two ticketd replicas of each backend while faults run, and check that none is issued twice. " +
			"64 SDK clients per backend by default; faults: a server SIGKILLed and restarted, 200 ms latency, replies lost after the lease committed, connection resets (toxiproxy, in-process, loopback), a replica restarted, " +
			"a namespace's start advanced while a server is down, and what operators do: a dump reloaded into a running MariaDB, a cold copy of a data directory put back, auto_increment_increment changed on running servers, a Redis instance's data lost, a replica given the Redis instances in the other order, " +
			"a second namespace's max_id lowered by an admin process cut off from a server (refused) and then with every server in reach, the namespace drawn up to it, and a lagging replica of a server promoted in its place. " +
			"Starts throwaway servers unless --mysql is given; its flags have no environment fallback. The last line of output is a JSON summary; the exit status is 1 when any ID was issued twice, broke parity or an advanced start, lay above the max_id in force, a restored or replaced server was not fenced, a misconfigured one not refused, a lowering a server could not take was not refused, or too few IDs were drawn.",
		new: func() command { return &chaosCmd{} }}
}

type chaosCmd struct {
	backends, mysql, killCmd, startCmd, dir string
	duration                                time.Duration
	clients                                 int
	minIDs                                  int64
	rate                                    float64
}

// noEnv: a TICKETD_MYSQL meant for serve must never aim the chaos run at production servers.
func (c *chaosCmd) noEnv() {}

func (c *chaosCmd) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.backends, "backends", strings.Join(chaos.DefaultBackends, ","), "comma-separated backends to run at once, each with its own servers, replicas and clients: "+strings.Join(chaos.Backends, ", ")+" (galera: a 3-node MariaDB Galera cluster)")
	fs.StringVar(&c.mysql, "mysql", "", "the pair's two `DSNs`, odd server first, when the run should not start its own")
	fs.StringVar(&c.killCmd, "kill-cmd", "", "with --mysql: shell `command` that kills server $CHAOS_SERVER (a or b)")
	fs.StringVar(&c.startCmd, "start-cmd", "", "with --mysql: shell `command` that starts server $CHAOS_SERVER again")
	fs.StringVar(&c.dir, "dir", "", "`directory` for the throwaway servers (default: a new temporary one)")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long the clients draw IDs")
	fs.IntVar(&c.clients, "clients", 64, "SDK clients of each backend, each with its own cache")
	fs.Var(cliflag.Int64(&c.minIDs, 1, math.MaxInt32), "min-ids", "the `number` of IDs the run must draw from each backend (default 1000000)")
	fs.Float64Var(&c.rate, "rate", 0, "IDs per second, all clients of one backend together (0: 1.5 × min-ids / duration)")
}

func (c *chaosCmd) run(ctx context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("chaos takes no arguments")
	}
	switch {
	case c.duration < time.Second || c.duration > 24*time.Hour:
		return usagef("--duration %s must be between 1s and 24h", c.duration)
	case c.clients < 1 || c.clients > 4096:
		return usagef("--clients %d must be between 1 and 4096", c.clients)
	case c.rate < 0:
		return usagef("--rate must not be negative")
	case (c.killCmd != "" || c.startCmd != "") && c.mysql == "":
		return usagef("--kill-cmd and --start-cmd are for servers given with --mysql")
	case (c.killCmd == "") != (c.startCmd == ""):
		return usagef("give both --kill-cmd and --start-cmd, or neither")
	}
	if c.minIDs == 0 {
		c.minIDs = 1_000_000
	}
	dsns, backends := cliflag.SplitList(c.mysql), cliflag.SplitList(c.backends)
	for _, b := range backends {
		if !slices.Contains(chaos.Backends, b) {
			return usagef("--backends: unknown backend %q; choose from %s", b, strings.Join(chaos.Backends, ", "))
		}
	}
	switch {
	case len(backends) == 0:
		return usagef("--backends names no backend")
	case c.mysql != "" && !slices.Contains(backends, chaos.BackendMySQL):
		return usagef("--mysql is for the %s backend, which --backends leaves out", chaos.BackendMySQL)
	}
	log := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	mysql.RouteDriverLogs(log)
	redis.RouteClientLogs(log)
	sum, err := chaos.Run(ctx, chaos.Config{Backends: backends, MySQL: dsns, KillCmd: c.killCmd, StartCmd: c.startCmd, Dir: c.dir,
		Duration: c.duration, Clients: c.clients, MinIDs: c.minIDs, Rate: c.rate, Logger: log})
	if err != nil {
		return err
	}
	line, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, string(line))
	if err := sum.OK(c.minIDs); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}
