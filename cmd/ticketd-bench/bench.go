package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ticketd/ticketd/bench"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func init() {
	commands["bench"] = commandInfo{usage: "ticketd-bench [flags] [gen] [btree] [load]",
		summary: "Measure ticketd against Snowflake, UUID, ULID, xid and KSUID: ID generation (gen), what each key does " +
			"to an InnoDB B-tree (btree), and load on the ticket servers (load). With no part named, runs gen, and btree " +
			"and load too when --mysql is given. Writes report.md, report.json and PNG charts to --out; load goes to " +
			"loopback servers only.",
		new: func() command { return &benchCmd{} }}
}

type benchCmd struct {
	fs       *flag.FlagSet
	out      string
	duration time.Duration
	clients  string
	rows     int
	batch    int
	mysql    string
	redis    string
	galera   string
	json     bool
	quick    bool
	force    bool
}

func (c *benchCmd) flags(fs *flag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.out, "out", "bench-report", "directory the report (report.md, report.json, charts) is written to")
	fs.DurationVar(&c.duration, "duration", 0, "length of each timed measurement (default 2s, or 200ms with --quick)")
	fs.StringVar(&c.clients, "clients", "", "comma-separated client counts of the closed-loop load cases (default 1,4,16,64, or 1,4 with --quick)")
	fs.IntVar(&c.rows, "rows", 0, "rows per B-tree table (default 1000000, or 20000 with --quick)")
	fs.IntVar(&c.batch, "batch", 0, "rows per INSERT in the B-tree tables, the same for all (default 1000)")
	fs.StringVar(&c.mysql, "mysql", "", "comma-separated DSNs of the MariaDB/MySQL ticket pair on loopback; without a database name a fresh one is made and dropped")
	fs.StringVar(&c.redis, "redis", "", "address of a Redis on loopback for the Redis backend's load case")
	fs.StringVar(&c.galera, "galera", "", "comma-separated DSNs of the nodes of a MariaDB Galera cluster on loopback, for the load case that compares it with the pair")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON on stdout instead of Markdown")
	fs.BoolVar(&c.quick, "quick", false, "a smoke run of seconds: small defaults everywhere")
	fs.BoolVar(&c.force, "force-database", false, "use the database --mysql names even when it holds tables ticketd-bench did not create (a live ticket database included): the run creates namespaces there and moves their counters")
}

var dsnPassword = regexp.MustCompile(`:[^:@/()]*@`)

// commandLine rebuilds the command from the flags that were set (on the command line or from the
// environment), passwords hidden, for the report.
func (c *benchCmd) commandLine(parts []string) string {
	args := []string{"ticketd-bench"}
	args = append(args, parts...)
	c.fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		if f.Name == "mysql" || f.Name == "galera" {
			v = dsnPassword.ReplaceAllString(v, ":***@")
		}
		if cliflag.IsBool(f) {
			args = append(args, "--"+f.Name)
			return
		}
		if strings.ContainsAny(v, " ()'\"$") {
			v = "'" + v + "'"
		}
		args = append(args, "--"+f.Name, v)
	})
	return strings.Join(args, " ")
}

func (c *benchCmd) run(ctx context.Context, m *Main, args []string) error {
	parts := args
	if len(parts) == 0 {
		parts = []string{"gen"}
		if c.mysql != "" {
			parts = append(parts, "btree", "load")
		}
	}
	for _, p := range parts {
		if p != "gen" && p != "btree" && p != "load" {
			return usagef("unknown part %q (want gen, btree or load)", p)
		}
		if p != "gen" && c.mysql == "" {
			return usagef("%s needs the ticket server pair: give --mysql DSN,DSN (servers on loopback)", p)
		}
	}
	if c.duration < 0 || c.rows < 0 || c.batch < 0 {
		return usagef("--duration, --rows and --batch must not be negative")
	}
	if strings.TrimSpace(c.out) == "" {
		return usagef("--out must name a directory")
	}
	opts := bench.Options{ForceDatabase: c.force, Duration: c.duration, Rows: c.rows, Batch: c.batch, Redis: c.redis, Quick: c.quick,
		Command: c.commandLine(args)}
	for _, s := range strings.Split(c.clients, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return usagef("--clients %q: each count must be a whole number of at least 1", c.clients)
		}
		opts.Clients = append(opts.Clients, n)
	}
	for _, d := range strings.Split(c.mysql, ",") {
		if d = strings.TrimSpace(d); d != "" {
			opts.MySQL = append(opts.MySQL, d)
		}
	}
	opts.Galera = cliflag.SplitList(c.galera)
	if len(opts.Galera) > 0 && len(opts.Galera) < 2 {
		return usagef("--galera names the nodes of a cluster: give at least two DSNs")
	}
	// The progress line goes to stderr: rewritten in place on a terminal, a line a step elsewhere.
	opts.Progress = m.Stderr
	if f, ok := m.Stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			opts.LiveProgress = true
		}
	}
	rep, err := bench.Run(ctx, opts, parts...)
	if errors.Is(err, bench.ErrInvalidOptions) {
		return usageError{err.Error()}
	}
	if err != nil {
		return err
	}
	if err := rep.Write(c.out); err != nil {
		return fmt.Errorf("writing the report to %s: %w", c.out, err)
	}
	if c.json {
		return rep.JSON(m.Stdout)
	}
	rep.Markdown(m.Stdout)
	fmt.Fprintf(m.Stderr, "report written to %s (report.md, report.json, %d charts)\n", c.out, len(rep.Charts))
	return nil
}
