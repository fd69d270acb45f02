package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func init() {
	register(commandInfo{name: "migrate", summary: "Create or upgrade the ticketd tables on every MySQL ticket server. Safe to run again.",
		new: func() command { return &migrateCmd{} }})
	register(commandInfo{name: "lease", args: "NAMESPACE",
		summary: "Lease one block of IDs and print it as JSON (IDs as strings), the same shape as the HTTP API's block.",
		new:     func() command { return &leaseCmd{} }})
	register(commandInfo{name: "namespace", args: "COMMAND ...", summary: "Manage namespaces, the independent ID sequences.",
		new: func() command { return &namespaceHelpCmd{} }})
	register(commandInfo{name: "namespace create", args: "NAME",
		summary: "Create a namespace (an independent ID sequence) on every ticket server.",
		new:     func() command { return &nsCreateCmd{} }})
	register(commandInfo{name: "namespace update", args: "NAME",
		summary: "Change a namespace's settings on every ticket server; the flags given change, the rest stay.",
		new:     func() command { return &nsUpdateCmd{} }})
	register(commandInfo{name: "namespace get", args: "NAME",
		summary: "Show a namespace's settings and each ticket server's counter.",
		new:     func() command { return &nsGetCmd{} }})
	register(commandInfo{name: "namespace list", summary: "List every namespace.",
		new: func() command { return &nsListCmd{} }})
}

// printJSON writes v as one line of JSON, the bytes the HTTP API answers with: one result a line is
// what jq and log pipelines read (`| jq .` indents it for a person).
func (m *Main) printJSON(v any) error {
	return json.NewEncoder(m.Stdout).Encode(v)
}

func oneArg(args []string, what string) (string, error) {
	if len(args) != 1 {
		return "", usagef("want exactly one %s, got %d arguments", what, len(args))
	}
	if err := allocator.ValidateName(args[0]); err != nil {
		return "", usageError{err.Error()}
	}
	return args[0], nil
}

type migrateCmd struct{ backendFlags }

func (c *migrateCmd) flags(fs *flag.FlagSet) { c.register(fs, 0) }

func (c *migrateCmd) run(ctx context.Context, m *Main, args []string) error {
	if len(args) != 0 {
		return usagef("migrate takes no arguments")
	}
	if err := c.validate(); err != nil {
		return err
	}
	if c.kind() != "mysql" {
		fmt.Fprintf(m.Stdout, "the %s backend has no schema to migrate; give --mysql to migrate ticket servers\n", c.kind())
		return nil
	}
	logger := m.logger()
	c.routeClientLogs(logger)
	cfg := c.mysqlConfig(logger, nil)
	// Every server, whatever became of the one before: an operator fixing grants wants the whole list.
	failed := 0
	for _, dsn := range cfg.DSNs {
		applied, err := mysql.MigrateDSN(ctx, dsn)
		if err != nil {
			failed++
			fmt.Fprintf(m.Stdout, "%s: FAILED: %s\n", mysql.ServerName(dsn), explainMigrate(dsn, err))
			continue
		}
		fmt.Fprintf(m.Stdout, "%s: applied %d migration(s) %v\n", mysql.ServerName(dsn), len(applied), applied)
	}
	if failed > 0 {
		return fmt.Errorf("migrate failed on %d of %d ticket servers; each line above says why and what to run", failed, len(cfg.DSNs))
	}
	return nil
}

// migrateGrants are the privileges `ticketd migrate` needs on the ticket database.
const migrateGrants = "CREATE, ALTER, INDEX, SELECT, INSERT, UPDATE"

// explainMigrate turns the errors a newcomer meets first into what to run, as an administrator of the
// server: a database that does not exist, a user without the grants migrate needs.
func explainMigrate(dsn string, err error) string {
	cfg, perr := gomysql.ParseDSN(strings.TrimSpace(dsn))
	var me *gomysql.MySQLError
	if perr != nil || !errors.As(err, &me) {
		return oneLine(err)
	}
	user := "'" + cfg.User + "'@'%'"
	grant := fmt.Sprintf("GRANT %s ON `%s`.* TO %s;", migrateGrants, cfg.DBName, user)
	switch me.Number {
	case 1049: // ER_BAD_DB_ERROR
		return fmt.Sprintf("database %q does not exist. Create it as an administrator of this server: CREATE DATABASE `%s`; %s (the host part as your user was created). [MySQL %d: %s]",
			cfg.DBName, cfg.DBName, grant, me.Number, me.Message)
	case 1044, 1142, 1143: // ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR
		what := "the privileges"
		if cmd, _, ok := strings.Cut(me.Message, " command denied"); ok {
			what = "the " + cmd + " privilege"
		}
		return fmt.Sprintf("user %q lacks %s on database %q, which migrate needs. As an administrator of this server: %s (the host part as your user was created). [MySQL %d: %s]",
			cfg.User, what, cfg.DBName, grant, me.Number, me.Message)
	case 1045: // ER_ACCESS_DENIED_ERROR
		return fmt.Sprintf("the server refused user %q (a wrong password, or no such user from this host). [MySQL %d: %s]", cfg.User, me.Number, me.Message)
	}
	return oneLine(err)
}

type leaseCmd struct {
	backendFlags
	size int64
}

func (c *leaseCmd) flags(fs *flag.FlagSet) {
	c.register(fs, useStore|useCreate)
	fs.Var(cliflag.Int64(&c.size, 0, allocator.MaxBlockSizeLimit), "n", "`SIZE` of the block; 0 means the namespace's block size")
}

func (c *leaseCmd) run(ctx context.Context, m *Main, args []string) error {
	c.writes = true
	ns, err := oneArg(args, "namespace")
	if err != nil {
		return err
	}
	b, err := c.open(ctx, m, m.logger(), nil)
	if err != nil {
		return err
	}
	lease := b.Lease
	if c.createOnLease() {
		lease = func(ctx context.Context, ns string, size int64) (allocator.Block, error) {
			return allocator.LeaseOrCreate(ctx, b, ns, size)
		}
	}
	blk, err := lease(ctx, ns, c.size)
	if err != nil {
		return err
	}
	return m.printJSON(api.FromBlock(blk))
}

type namespaceHelpCmd struct{}

func (c *namespaceHelpCmd) flags(*flag.FlagSet) {}
func (c *namespaceHelpCmd) run(context.Context, *Main, []string) error {
	return usagef("want a command: %s", orList("namespace", subcommands("namespace")))
}

// nsSettings are the settings flags of namespace create and update.
type nsSettings struct {
	blockSize, maxBlockSize, start, maxID int64
	ttl                                   time.Duration
}

func (c *nsSettings) register(fs *flag.FlagSet, start string) {
	fs.Var(cliflag.Int64(&c.blockSize, 0, allocator.MaxBlockSizeLimit), "block-size", fmt.Sprintf("default lease size, in `IDS` (0: %d)", allocator.DefaultBlockSize))
	fs.Var(cliflag.Int64(&c.maxBlockSize, 0, allocator.MaxBlockSizeLimit), "max-block-size", fmt.Sprintf("largest lease, in `IDS` (0: %d)", allocator.DefaultMaxBlockSize))
	fs.Var(cliflag.Int64(&c.start, 0, math.MaxInt64), "start", start)
	fs.Var(cliflag.Int64(&c.maxID, 0, math.MaxInt64), "max-id", "the ceiling, inclusive: no `ID` above it is ever issued, as for an INT column (2147483647) or "+
		"IDs a JavaScript client reads exactly (9007199254740991); past it leases fail with id_space_exhausted (0: 9223372036854775807)")
	fs.DurationVar(&c.ttl, "lease-ttl", 0, "how long a leased block may be used; 0 means forever")
}

type nsCreateCmd struct {
	backendFlags
	nsSettings
	existsOK bool
}

func (c *nsCreateCmd) flags(fs *flag.FlagSet) {
	c.backendFlags.register(fs, useStore)
	c.nsSettings.register(fs, "lowest `ID` to issue, to begin above IDs a table already has (0: 1)")
	fs.BoolVar(&c.existsOK, "exists-ok", false, "succeed when the namespace exists already (its settings are left as they are)")
}

func (c *nsCreateCmd) run(ctx context.Context, m *Main, args []string) error {
	c.writes = true
	name, err := oneArg(args, "namespace name")
	if err != nil {
		return err
	}
	want := allocator.Namespace{Name: name, BlockSize: c.blockSize, MaxBlockSize: c.maxBlockSize, LeaseTTL: c.ttl, Start: c.start, MaxID: c.maxID}
	if err := want.WithDefaults().Validate(); err != nil {
		return usageError{err.Error()}
	}
	b, err := c.open(ctx, m, m.logger(), nil)
	if err != nil {
		return err
	}
	ns, err := b.CreateNamespace(ctx, want)
	if errors.Is(err, allocator.ErrExists) && c.existsOK {
		ns, err = want, nil
	}
	if err != nil {
		return err
	}
	if full, err := b.Namespace(ctx, name); err == nil {
		ns = full // with each server's counter
	}
	return m.printJSON(api.FromNamespace(ns))
}

type nsUpdateCmd struct {
	backendFlags
	nsSettings
	fs *flag.FlagSet // to tell the flags given from the others
}

func (c *nsUpdateCmd) flags(fs *flag.FlagSet) {
	c.backendFlags.register(fs, useStore)
	c.nsSettings.register(fs, "advance every counter to at least this `ID` (counters never move back)")
	c.fs = fs
}

func (c *nsUpdateCmd) run(ctx context.Context, m *Main, args []string) error {
	c.reads = true // a namespace to update must exist, and so must its store
	b, cur, err := c.namespace(ctx, m, args)
	if err != nil {
		return err
	}
	name := cur.Name
	want := allocator.Namespace{Name: name, BlockSize: cur.BlockSize, MaxBlockSize: cur.MaxBlockSize, LeaseTTL: cur.LeaseTTL, MaxID: cur.MaxID}
	c.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "block-size":
			want.BlockSize = c.blockSize
		case "max-block-size":
			want.MaxBlockSize = c.maxBlockSize
		case "lease-ttl":
			want.LeaseTTL = c.ttl
		case "start":
			want.Start = c.start
		case "max-id":
			want.MaxID = c.maxID
		}
	})
	if err := want.WithDefaults().Validate(); err != nil {
		return usageError{err.Error()}
	}
	if _, err := b.UpdateNamespace(ctx, want); err != nil {
		return err
	}
	ns, err := b.Namespace(ctx, name)
	if err != nil {
		return err
	}
	return m.printJSON(api.FromNamespace(ns))
}

type nsGetCmd struct{ backendFlags }

func (c *nsGetCmd) flags(fs *flag.FlagSet) { c.register(fs, useStore) }

func (c *nsGetCmd) run(ctx context.Context, m *Main, args []string) error {
	c.reads = true
	_, ns, err := c.namespace(ctx, m, args)
	if err != nil {
		return err
	}
	return m.printJSON(api.FromNamespace(ns))
}

// namespace opens the backend and reads the namespace named by the one argument.
func (c *backendFlags) namespace(ctx context.Context, m *Main, args []string) (allocator.Backend, allocator.Namespace, error) {
	name, err := oneArg(args, "namespace name")
	if err != nil {
		return nil, allocator.Namespace{}, err
	}
	b, err := c.open(ctx, m, m.logger(), nil)
	if err != nil {
		return nil, allocator.Namespace{}, err
	}
	ns, err := b.Namespace(ctx, name)
	return b, ns, err
}

type nsListCmd struct{ backendFlags }

func (c *nsListCmd) flags(fs *flag.FlagSet) { c.register(fs, useStore) }

func (c *nsListCmd) run(ctx context.Context, m *Main, args []string) error {
	c.reads = true
	if len(args) != 0 {
		return usagef("namespace list takes no arguments")
	}
	b, err := c.open(ctx, m, m.logger(), nil)
	if err != nil {
		return err
	}
	list, err := b.Namespaces(ctx)
	if err != nil {
		return err
	}
	out := api.Namespaces{Namespaces: make([]api.Namespace, 0, len(list))}
	for _, ns := range list {
		out.Namespaces = append(out.Namespaces, api.FromNamespace(ns))
	}
	return m.printJSON(out)
}
