// Command ticketd hands out unique 64-bit IDs in leased blocks, from a Flickr-style pair of MySQL ticket
// servers or, with no server configured, from an embedded single-file store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/internal/cliflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := NewMain()
	err := m.ParseFlags(ctx, os.Args[1:])
	if err == nil {
		err = m.Run(ctx)
	}
	if cerr := m.Close(); err == nil {
		err = cerr
	}
	os.Exit(m.exitCode(err))
}

// Main is the ticketd program: parse flags, run the chosen subcommand, close. Tests drive it in-process.
type Main struct {
	Stdout, Stderr io.Writer
	// Getenv reads TICKETD_* fallbacks for flags. Default os.Getenv.
	Getenv func(string) string

	cmd     command
	name    string // the command being run ("lease", "namespace create"), for where to find its help
	args    []string
	closers []func() error
}

// NewMain returns a Main on the process's stdout, stderr and environment.
func NewMain() *Main {
	return &Main{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// command is one subcommand.
type command interface {
	// flags registers the subcommand's flags.
	flags(fs *flag.FlagSet)
	// run runs it with the positional arguments left after the flags.
	run(ctx context.Context, m *Main, args []string) error
}

type commandInfo struct {
	name, args, summary string
	new                 func() command
}

// commands lists every subcommand; each file adds its own in init.
var commands = map[string]commandInfo{}

func register(c commandInfo) { commands[c.name] = c }

// usageError is an error in how ticketd was called: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// errHelp means --help was shown: exit status 0.
var errHelp = errors.New("help shown")

// ParseFlags chooses the subcommand and parses its flags, with TICKETD_* environment fallbacks.
func (m *Main) ParseFlags(_ context.Context, args []string) error {
	if m.Getenv == nil {
		m.Getenv = os.Getenv
	}
	if len(args) > 1 && args[0] == "help" {
		// ticketd help COMMAND is ticketd COMMAND --help.
		args = append(append([]string{}, args[1:]...), "--help")
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		m.usage()
		if len(args) == 0 {
			return usagef("no command given")
		}
		return errHelp
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	name := args[0]
	info, ok := commands[name]
	if !ok {
		m.usage()
		return usagef("unknown command %q", name)
	}
	m.name = name
	if subs := subcommands(name); len(subs) > 0 && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		sub, ok := commands[name+" "+args[1]]
		if !ok {
			return usagef("unknown command %q (want %s)", name+" "+args[1], orList(name, subs))
		}
		info, name, args = sub, name+" "+args[1], args[1:]
		m.name = name
	}
	cmd := info.new()
	fs := flag.NewFlagSet("ticketd "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported once, by exitCode
	cmd.flags(fs)
	if err := cliflag.Parse(fs, args[1:], true); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			m.help(fs, name, info)
			return errHelp
		}
		return usagef("%s: %v", name, err)
	}
	if err := cliflag.ApplyEnv(fs, m.Getenv); err != nil {
		return usageError{err.Error()}
	}
	m.cmd, m.args = cmd, fs.Args()
	return nil
}

// Run runs the chosen subcommand.
func (m *Main) Run(ctx context.Context) error {
	if m.cmd == nil {
		return usagef("no command parsed")
	}
	return m.cmd.run(ctx, m, m.args)
}

// onClose registers cleanup for Close.
func (m *Main) onClose(f func() error) { m.closers = append(m.closers, f) }

// Close releases what Run opened, last first. Safe to call twice.
func (m *Main) Close() error {
	var errs []error
	for i := len(m.closers) - 1; i >= 0; i-- {
		errs = append(errs, m.closers[i]())
	}
	m.closers = nil
	return errors.Join(errs...)
}

func (m *Main) exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		help := "ticketd --help" // lists the commands
		if m.name != "" {
			help = "ticketd " + m.name + " --help" // lists the command's flags
		}
		fmt.Fprintf(m.Stderr, "ticketd: %s (see %s)\n", ue.msg, help)
		return 2
	default:
		fmt.Fprintf(m.Stderr, "ticketd: %s%s\n", oneLine(err), hint(err))
		return 1
	}
}

// hint says what to do about the commonest errors.
func hint(err error) string {
	switch {
	case errors.Is(err, allocator.ErrNotFound):
		return " (create it with: ticketd namespace create NAME)"
	case errors.Is(err, allocator.ErrExists):
		return " (see it with: ticketd namespace get NAME)"
	case errors.Is(err, allocator.ErrUnavailable):
		return " (check that the ticket servers in --mysql or --redis are running and reachable)"
	}
	return ""
}

// oneLine joins a multi-line error (errors.Join) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

func (m *Main) usage() {
	fmt.Fprintln(m.Stderr, "ticketd: unique 64-bit IDs in leased blocks, the Flickr way.\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		if n == "namespace" {
			continue
		}
		fmt.Fprintf(m.Stderr, "  %-18s %s\n", n, firstSentence(c.summary))
	}
	fmt.Fprintln(m.Stderr, "\nRun `ticketd help COMMAND` (or `ticketd COMMAND --help`) for a command's flags.")
}

// help prints a command's usage: its summary, its subcommands if it has any, and its flags if it has any.
func (m *Main) help(fs *flag.FlagSet, name string, info commandInfo) {
	usage := "ticketd " + name
	if cliflag.HasFlags(fs) {
		usage += " [flags]"
	}
	if info.args != "" {
		usage += " " + info.args
	}
	fmt.Fprintf(m.Stderr, "usage: %s\n\n%s\n", usage, info.summary)
	if subs := subcommands(name); len(subs) > 0 {
		fmt.Fprintln(m.Stderr, "\nCommands:")
		for _, sub := range subs {
			fmt.Fprintf(m.Stderr, "  %-18s %s\n", name+" "+sub, firstSentence(commands[name+" "+sub].summary))
		}
		fmt.Fprintf(m.Stderr, "\nRun `ticketd %s COMMAND --help` for a command's flags.\n", name)
	}
	cliflag.PrintFlags(m.Stderr, fs, true)
}

// subcommands returns the sorted names of the commands under name: "namespace" has create, get, ….
func subcommands(name string) []string {
	var out []string
	for n := range commands {
		if sub, ok := strings.CutPrefix(n, name+" "); ok {
			out = append(out, sub)
		}
	}
	sort.Strings(out)
	return out
}

// orList writes "namespace adopt, create, get or list".
func orList(name string, subs []string) string {
	if len(subs) == 1 {
		return name + " " + subs[0]
	}
	return name + " " + strings.Join(subs[:len(subs)-1], ", ") + " or " + subs[len(subs)-1]
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// logger returns the logger for CLI subcommands: text, warnings and errors, on stderr.
func (m *Main) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
