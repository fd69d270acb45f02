package main

import (
	"context"
	"flag"
	"fmt"
	"math"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func init() {
	register(commandInfo{name: "repair", args: "NAMESPACE --server HOST:PORT",
		summary: "Advance a fenced ticket server's counter past the high-water mark its peers recorded, plus a margin, so that it serves again. " +
			"A server is fenced when its counter went back (a restore from an old backup, a dump reloaded, a lost disk); check why before repairing. " +
			"A server that is not fenced is refused unless --force.",
		new: func() command { return &repairCmd{} }})
}

type repairCmd struct {
	backendFlags
	server string
	margin int64
	force  bool
}

func (c *repairCmd) flags(fs *flag.FlagSet) {
	c.register(fs, useRedis|useTimeouts|useMigrate)
	fs.StringVar(&c.server, "server", "", "the fenced ticket server, by its `HOST:PORT` name, as /readyz and 'ticketd namespace get' show it")
	fs.Var(cliflag.Int64(&c.margin, 0, math.MaxInt64/4), "margin", "how many `IDS` to skip beyond the water mark, for leases after the last mark was written (0: sized from the lease rate recorded with the marks, at least 10 blocks of max_block_size)")
	fs.BoolVar(&c.force, "force", false, "advance the counter even though the server is not fenced for the namespace")
}

func (c *repairCmd) run(ctx context.Context, m *Main, args []string) error {
	ns, err := oneArg(args, "namespace")
	if err != nil {
		return err
	}
	if c.kind() == "embedded" {
		return usagef("repair needs the ticket servers: give --mysql or --redis (the embedded store has no peers to fence it)")
	}
	if c.server == "" {
		return usagef("--server is required: the name of the fenced server")
	}
	b, err := c.open(ctx, m, m.logger(), nil)
	if err != nil {
		return err
	}
	r, ok := b.(allocator.Repairer)
	if !ok {
		return fmt.Errorf("the %s backend has no repair", c.kind())
	}
	res, err := r.Repair(ctx, ns, c.server, allocator.RepairOptions{Margin: c.margin, Force: c.force})
	if err != nil {
		return err
	}
	if res.Fenced {
		fmt.Fprintf(m.Stderr, "%s was fenced for %s: %s\n", res.Server, res.Namespace, res.Reason)
	} else {
		fmt.Fprintf(m.Stderr, "%s was not fenced for %s; moved anyway (--force)\n", res.Server, res.Namespace)
	}
	holder := ""
	if res.Holder != "" {
		holder = " (" + res.Holder + ")"
	}
	fmt.Fprintf(m.Stderr, "highest water mark %d%s; margin %d: %s\n", res.Watermark, holder, res.Margin, res.MarginWhy)
	fmt.Fprintf(m.Stderr, "%s: %s counter moved from %d to %d\n", res.Server, res.Namespace, res.Before, res.After)
	return m.printJSON(res)
}
