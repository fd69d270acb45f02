package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/internal/cliflag"
)

// run drives Main in-process and returns stdout, stderr and the exit status.
func run(t *testing.T, args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr}
	code := m.Main(context.Background(), args)
	return stdout.String(), stderr.String(), code
}

// TestBadInputIsOneClearLine: a usage error is one line in ticketd's style that names the help to read.
func TestBadInputIsOneClearLine(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		want, help string
	}{
		{[]string{"--rows", "many"}, `invalid value "many" for flag -rows: want a whole number`, "ticketd-bench --help"},
		{[]string{"--duration", "5"}, `want a duration with a unit`, "ticketd-bench --help"},
		{[]string{"chaos", "--min-ids", "0"}, "0 is outside 1..2147483647", "ticketd-bench chaos --help"},
		{[]string{"chaos", "now"}, "chaos takes no arguments", "ticketd-bench chaos --help"},
		{[]string{"sim", "--off", "fences"}, `unknown mechanism "fences"`, "ticketd-bench sim --help"},
		{[]string{"sim", "--schedules", "0"}, "0 is outside 1..", "ticketd-bench sim --help"},
	} {
		_, errOut, code := run(t, tt.args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ticketd-bench: ") ||
			!strings.Contains(errOut, tt.want) || !strings.HasSuffix(errOut, "(see "+tt.help+")\n") {
			t.Errorf("%v: exit %d, %q; want 2 and one line saying %q (see %s)", tt.args, code, errOut, tt.want, tt.help)
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	for args, want := range map[string][]string{
		"--help": {"usage: ticketd-bench [flags] [gen] [btree] [load]", "ticketd-bench chaos --help", "command line only", "-rows int"},
		"-h":     {"usage: ticketd-bench [flags]"},
		"chaos --help": {"usage: ticketd-bench chaos [flags]", "command line only", "-min-ids number",
			"max_id lowered by an admin process cut off from a server", "replica of a server promoted in its place", "above the max_id in force"},
		"gen load -h":          {"usage: ticketd-bench [flags]"},
		"chaos -h gen":         {"usage: ticketd-bench chaos"},
		"btree --quick --help": {"-quick"},
		"sim --help":           {"usage: ticketd-bench sim [flags]", "-schedules schedules", "-off string", "repair-margin"},
	} {
		_, errOut, code := run(t, strings.Fields(args)...)
		for _, w := range want {
			if code != 0 || !strings.Contains(errOut, w) {
				t.Errorf("%s: exit %d, want 0 and %q in:\n%s", args, code, w, errOut)
			}
		}
	}
}

// TestIgnoresTheEnvironment: in a shell where ticketd's TICKETD_* variables are exported (the pair
// that holds real IDs), neither the report nor the chaos run takes a flag from them.
func TestIgnoresTheEnvironment(t *testing.T) {
	for k, v := range map[string]string{"TICKETD_MYSQL": "root@tcp(127.0.0.1:3306)/ticketd", "TICKETD_REDIS": "127.0.0.1:6379",
		"TICKETD_GALERA": "root@tcp(127.0.0.1:3306)/ticketd", "TICKETD_DURATION": "nonsense", "TICKETD_QUICK": "true"} {
		t.Setenv(k, v)
	}
	m := &Main{Stdout: io.Discard, Stderr: io.Discard}
	if err := m.ParseFlags(context.Background(), []string{"chaos", "--duration", "2s"}); err != nil {
		t.Fatal(err)
	}
	if c := m.cmd.(*chaosCmd); c.mysql != "" {
		t.Fatalf("chaos took --mysql %q from the environment", c.mysql)
	}
	if err := m.ParseFlags(context.Background(), []string{"gen"}); err != nil {
		t.Fatalf("the report read TICKETD_DURATION: %v", err)
	}
	if c := m.cmd.(*benchCmd); c.mysql != "" || c.redis != "" || c.galera != "" || c.quick || c.duration != 0 {
		t.Fatalf("the report took flags from the environment: %+v", c)
	}
}

// TestChaosRefusesBadBackends: the backends are checked before any server starts.
func TestChaosRefusesBadBackends(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--backends", "mysql,oracle"}, `unknown backend "oracle"`},
		{[]string{"--backends", " , "}, "names no backend"},
		{[]string{"--backends", "redis", "--mysql", "root@tcp(127.0.0.1:1)/ticketd"}, "leaves out"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			m := &Main{Stdout: io.Discard, Stderr: io.Discard}
			if err := m.ParseFlags(context.Background(), append([]string{"chaos"}, c.args...)); err != nil {
				t.Fatal(err)
			}
			err := m.Run(context.Background())
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want a usage error saying %q", err, c.want)
			}
		})
	}
}

// TestConfigurationReferenceIsComplete keeps the configuration reference (docs/configuration.md) true: every flag of
// both commands has a row of the command's own, with its environment variable where it reads one.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	ref := string(b)
	for name, label := range map[string]string{"bench": "ticketd-bench", "chaos": "ticketd-bench chaos"} {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		cmd := commands[name].new()
		cmd.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			var row string
			for _, l := range strings.Split(ref, "\n") {
				if strings.HasPrefix(l, "| `"+label+"` | ") && strings.Contains(l, "`--"+f.Name+"`") {
					row = l
				}
			}
			if row == "" {
				t.Errorf("%s: flag --%s has no row of its own in the configuration reference (docs/configuration.md)", label, f.Name)
			}
			if env := cliflag.EnvName(f.Name); strings.Contains(row, "`"+env+"`") {
				t.Errorf("%s: its row for --%s names %s, which ticketd-bench never reads", label, f.Name, env)
			}
		})
	}
}
