package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/allocator/redis"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func init() {
	register(commandInfo{name: "doctor",
		summary: "Check every configured ticket server and print what is wrong and how to fix it; exits 1 on any problem. " +
			"MySQL: reachability, version, auto_increment increment and offset (pairwise distinct), durability settings, schema, each namespace's row and step/offset, counters against the peers' water marks. " +
			"Redis: reachability, version, persistence and eviction settings, each instance's offset claim against the configuration and the peers' records, counters against the peers' water marks.",
		new: func() command { return &doctorCmd{} }})
	register(commandInfo{name: "namespace adopt", args: "NAME --flickr-table TABLE",
		summary: "Create a namespace that starts above every ID a running Flickr ticket table has issued. " +
			"Reads each server's AUTO_INCREMENT of the table (not MAX(id): the stub row is not always the highest ticket), so that switching from per-ID tickets to block leases never reissues an ID.",
		new: func() command { return &adoptCmd{} }})
}

type doctorCmd struct{ backendFlags }

func (c *doctorCmd) flags(fs *flag.FlagSet) { c.register(fs, useRedis|useTimeouts) }

func (c *doctorCmd) run(ctx context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("doctor takes no arguments")
	}
	if err := c.validate(); err != nil {
		return err
	}
	logger := m.logger()
	c.routeClientLogs(logger)
	var problems []string
	switch c.kind() {
	case "mysql":
		d, err := mysql.Diagnose(ctx, c.mysqlConfig(logger, nil))
		if err != nil {
			return err
		}
		printMySQLDiagnosis(m, d)
		problems = d.Problems
	case "redis":
		d, err := redis.Diagnose(ctx, c.redisConfig(logger, nil))
		if err != nil {
			return err
		}
		printRedisDiagnosis(m, d)
		problems = d.Problems
	default:
		return usagef("doctor checks ticket servers: give --mysql or --redis (the embedded store needs no checks)")
	}
	if len(problems) == 0 {
		fmt.Fprintln(m.Stdout, "\nno problem found")
		return nil
	}
	fmt.Fprintln(m.Stdout)
	for _, p := range problems {
		fmt.Fprintf(m.Stdout, "\nPROBLEM: %s", p)
	}
	fmt.Fprintln(m.Stdout)
	return fmt.Errorf("doctor found %d problem(s); each says how to fix it above", len(problems))
}

func printMySQLDiagnosis(m *Main, d mysql.Diagnosis) {
	w := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SERVER\tREACHABLE\tVERSION\tINCREMENT\tOFFSET\tFLUSH_AT_COMMIT\tBINLOG\tSYNC_BINLOG\tSCHEMA\tREPLICATION")
	for _, s := range d.Servers {
		if !s.Reachable {
			fmt.Fprintf(w, "%s\tno\t-\t-\t-\t-\t-\t-\t-\t-\n", s.Name)
			continue
		}
		repl := s.Replication
		if repl == "" {
			repl = "none"
		}
		fmt.Fprintf(w, "%s\tyes\t%s\t%d\t%d\t%d\t%v\t%d\t%d\t%s\n", s.Name, s.Version, s.Increment, s.Offset, s.FlushAtCommit, onOff(s.LogBin), s.SyncBinlog, s.Schema, repl)
	}
	w.Flush()
	if len(d.Namespaces) > 0 {
		fmt.Fprintln(m.Stdout)
		w = tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAMESPACE\tSERVER\tROW\tSTEP/OFFSET\tNEXT\tPEER_WATER_MARK\tSTATUS")
		for _, n := range d.Namespaces {
			row, so, next := "missing", "-", "-"
			if n.Present {
				row, so, next = "yes", fmt.Sprintf("%d/%d", n.Step, n.Offset), fmt.Sprint(n.Next)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Namespace, n.Server, row, so, next, markCell(n.Watermark, n.Holder), n.Status)
		}
		w.Flush()
	}
	for _, n := range d.Notes {
		fmt.Fprintf(m.Stdout, "\nnote: %s", n)
	}
}

func printRedisDiagnosis(m *Main, d redis.Diagnosis) {
	w := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INSTANCE\tREACHABLE\tVERSION\tAPPENDONLY\tAPPENDFSYNC\tMAXMEMORY_POLICY\tOFFSET/STRIDE\tCLAIM")
	for _, s := range d.Instances {
		if !s.Reachable {
			fmt.Fprintf(w, "%s\tno\t-\t-\t-\t-\t%d/%d\t-\n", s.Name, s.Offset, s.Stride)
			continue
		}
		fmt.Fprintf(w, "%s\tyes\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", s.Name, s.Version, s.AppendOnly, s.AppendFsync, s.Eviction, s.Offset, s.Stride, s.Claim)
	}
	w.Flush()
	if len(d.Namespaces) > 0 {
		fmt.Fprintln(m.Stdout)
		w = tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAMESPACE\tINSTANCE\tNEXT\tPEER_WATER_MARK\tSTATUS")
		for _, n := range d.Namespaces {
			next := "-"
			if n.Present {
				next = fmt.Sprint(n.Next)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", n.Namespace, n.Instance, next, markCell(n.Watermark, n.Holder), n.Status)
		}
		w.Flush()
	}
	for _, n := range d.Notes {
		fmt.Fprintf(m.Stdout, "\nnote: %s", n)
	}
}

func markCell(v int64, holder string) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%s)", v, holder)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

type adoptCmd struct {
	backendFlags
	table                   string
	margin                  int64
	blockSize, maxBlockSize int64
}

func (c *adoptCmd) flags(fs *flag.FlagSet) {
	c.register(fs, useTimeouts|useMigrate)
	fs.StringVar(&c.table, "flickr-table", "Tickets64", "the per-ID ticket table to take over from, in each DSN's database")
	fs.Var(cliflag.Int64(&c.margin, 0, math.MaxInt64/4), "margin", "how many `IDS` to skip above the highest ticket, for tickets issued while clients switch over")
	fs.Var(cliflag.Int64(&c.blockSize, 0, allocator.MaxBlockSizeLimit), "block-size", fmt.Sprintf("default lease size, in `IDS` (0: %d)", allocator.DefaultBlockSize))
	fs.Var(cliflag.Int64(&c.maxBlockSize, 0, allocator.MaxBlockSizeLimit), "max-block-size", fmt.Sprintf("largest lease, in `IDS` (0: %d)", allocator.DefaultMaxBlockSize))
}

func (c *adoptCmd) run(ctx context.Context, m *Main, args []string) error {
	name, err := oneArg(args, "namespace name")
	if err != nil {
		return err
	}
	if c.mysql == "" {
		return usagef("adopt takes over a Flickr ticket table on MySQL servers: give --mysql")
	}
	if strings.TrimSpace(c.table) == "" {
		return usagef("--flickr-table must name the ticket table")
	}
	b, err := c.open(ctx, m, m.logger(), nil)
	if err != nil {
		return err
	}
	p := b.(*mysql.Store)
	tables, err := p.FlickrTables(ctx, c.table)
	if err != nil {
		return err
	}
	start, err := mysql.AdoptStart(tables, c.margin)
	if err != nil {
		return err
	}
	for _, t := range tables {
		fmt.Fprintf(m.Stderr, "%s: %s AUTO_INCREMENT %d, highest row %d\n", t.Server, c.table, t.AutoIncrement, t.MaxID)
	}
	ns, err := b.CreateNamespace(ctx, allocator.Namespace{Name: name, Start: start, BlockSize: c.blockSize, MaxBlockSize: c.maxBlockSize})
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stderr, "namespace %s starts at %d, above every ticket issued from %s\n", name, start, c.table)
	return m.printJSON(api.FromNamespace(ns))
}
