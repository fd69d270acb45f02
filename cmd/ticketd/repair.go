package main

import (
	"context"
	"flag"
	"fmt"
	"math"

	"github.com/ticketd/ticketd/allocator/mysql"
)

func init() {
	register(commandInfo{name: "repair", args: "NAMESPACE --server NAME",
		summary: "Advance a fenced ticket server's counter past the high-water mark its peers recorded. " +
			"A server is fenced when its counter went back, as after a restore from an old backup; check why before repairing, because afterwards it serves again.",
		new: func() command { return &repairCmd{} }})
}

type repairCmd struct {
	backendFlags
	server string
	margin int64
}

func (c *repairCmd) flags(fs *flag.FlagSet) {
	c.register(fs)
	fs.StringVar(&c.server, "server", "", "the fenced ticket server, by name (host:port, as /readyz and `ticketd namespace get` show it)")
	fs.Var(int64Flag{&c.margin, 0, math.MaxInt64 / 4}, "margin", "IDs to skip beyond the water mark, for leases after the last mark was written (0: 100 × max_block_size × step)")
}

func (c *repairCmd) run(ctx context.Context, m *Main, args []string) error {
	ns, err := oneArg(args, "namespace")
	if err != nil {
		return err
	}
	if c.mysql == "" {
		return usagef("repair needs the ticket servers: give --mysql (the embedded store has no peers to fence it)")
	}
	if c.server == "" {
		return usagef("--server is required: the name of the fenced server")
	}
	if err := c.validate(); err != nil {
		return err
	}
	p, err := mysql.Open(ctx, c.mysqlConfig(m.logger(), nil))
	if err != nil {
		return err
	}
	m.onClose(p.Close)
	res, err := p.Repair(ctx, ns, c.server, c.margin)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stderr, "%s: %s counter moved from %d to %d (highest water mark %d)\n", res.Server, res.Namespace, res.Before, res.After, res.Watermark)
	return m.printJSON(map[string]any{"server": res.Server, "namespace": res.Namespace,
		"before": fmt.Sprint(res.Before), "watermark": fmt.Sprint(res.Watermark), "after": fmt.Sprint(res.After)})
}
