// Command ticketd-bench is ticketd's laboratory, kept apart from the server binary: it compares
// ticketd with other ID schemes (gen, btree, load), draws IDs under faults (chaos) and explores a
// simulated fleet (sim). What it links
// (plotting, fault proxies, other ID libraries, throwaway servers) never reaches ticketd itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ticketd/ticketd/internal/cliflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := &Main{Stdout: os.Stdout, Stderr: os.Stderr}
	os.Exit(m.Main(ctx, os.Args[1:]))
}

// Main is the ticketd-bench program: parse flags, run the report or the chaos run. Tests drive it
// in-process.
type Main struct {
	Stdout, Stderr io.Writer

	cmd  command
	name string // "bench" or "chaos"
	args []string
}

// command is the report (bench) or the chaos run: its flags, and a run on the arguments left after them.
type command interface {
	flags(fs *flag.FlagSet)
	run(ctx context.Context, m *Main, args []string) error
}

type commandInfo struct {
	usage, summary string
	new            func() command
}

// commands are "bench" (the report, run when the first argument is not a command) and "chaos"; each
// file adds its own in init.
var commands = map[string]commandInfo{}

// usageError is an error in how ticketd-bench was called: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// ParseFlags chooses the command and parses its flags. ticketd-bench reads the command line only,
// never ticketd's TICKETD_* environment variables: a TICKETD_MYSQL exported for ticketd must never aim
// a benchmark or the chaos run at the servers that hold real IDs.
func (m *Main) ParseFlags(_ context.Context, args []string) error {
	m.name = "bench"
	if len(args) > 0 && (args[0] == "chaos" || args[0] == "scale" || args[0] == "sim") {
		m.name, args = args[0], args[1:]
	}
	info := commands[m.name]
	cmd := info.new()
	fs := flag.NewFlagSet(m.helpName(), flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors are reported once, by exitCode
	cmd.flags(fs)
	if err := cliflag.Parse(fs, args, false); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			m.help(fs, info)
			return err
		}
		return usageError{err.Error()}
	}
	m.cmd, m.args = cmd, fs.Args()
	return nil
}

// Main parses args, runs the command and reports an error on stderr; it returns the exit status: 0,
// 1 when the run failed, 2 when it was called wrongly.
func (m *Main) Main(ctx context.Context, args []string) int {
	err := m.ParseFlags(ctx, args)
	if err == nil {
		err = m.Run(ctx)
	}
	return m.exitCode(err)
}

// Run runs the chosen command.
func (m *Main) Run(ctx context.Context) error {
	if m.cmd == nil {
		return usagef("no command parsed")
	}
	return m.cmd.run(ctx, m, m.args)
}

// helpName is the command line whose --help lists the flags of the command being run.
func (m *Main) helpName() string {
	if m.name != "bench" {
		return "ticketd-bench " + m.name
	}
	return "ticketd-bench"
}

func (m *Main) help(fs *flag.FlagSet, info commandInfo) {
	fmt.Fprintf(m.Stderr, "usage: %s\n\n%s\n", info.usage, info.summary)
	if m.name == "bench" {
		fmt.Fprintf(m.Stderr, "\nCommands:\n")
		for _, name := range []string{"chaos", "scale", "sim"} {
			fmt.Fprintf(m.Stderr, "  %-18s %s\n", name, strings.TrimSpace(strings.SplitAfter(commands[name].summary, ". ")[0]))
		}
		fmt.Fprintf(m.Stderr, "\nRun `ticketd-bench chaos --help`, `ticketd-bench scale --help` or `ticketd-bench sim --help` for their flags.\n")
	}
	cliflag.PrintFlags(m.Stderr, fs, false)
}

func (m *Main) exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(m.Stderr, "ticketd-bench: %s (see %s --help)\n", ue.msg, m.helpName())
		return 2
	default:
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
		fmt.Fprintf(m.Stderr, "ticketd-bench: %s\n", msg)
		return 1
	}
}
