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
func run(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
	code := m.Main(context.Background(), args)
	return stdout.String(), stderr.String(), code
}

// TestBadInputIsOneClearLine: a usage error is one line in ticketd's style that names the help to read.
func TestBadInputIsOneClearLine(t *testing.T) {
	for _, tt := range []struct {
		env        map[string]string
		args       []string
		want, help string
	}{
		{nil, []string{"--rows", "many"}, `invalid value "many" for flag -rows: want a whole number`, "ticketd-bench --help"},
		{map[string]string{"TICKETD_DURATION": "5"}, []string{"gen"}, `TICKETD_DURATION="5": want a duration with a unit`, "ticketd-bench --help"},
		{nil, []string{"chaos", "--min-ids", "0"}, "0 is outside 1..2147483647", "ticketd-bench chaos --help"},
		{nil, []string{"chaos", "now"}, "chaos takes no arguments", "ticketd-bench chaos --help"},
	} {
		_, errOut, code := run(t, tt.env, tt.args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ticketd-bench: ") ||
			!strings.Contains(errOut, tt.want) || !strings.HasSuffix(errOut, "(see "+tt.help+")\n") {
			t.Errorf("%v: exit %d, %q; want 2 and one line saying %q (see %s)", tt.args, code, errOut, tt.want, tt.help)
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	for args, want := range map[string][]string{
		"--help": {"usage: ticketd-bench [flags] [gen] [btree] [load]", "ticketd-bench chaos --help", "$TICKETD_MYSQL", "-rows int"},
		"-h":     {"usage: ticketd-bench [flags]"},
		"chaos --help": {"usage: ticketd-bench chaos [flags]", "command line only", "-min-ids number",
			"max_id lowered by an admin process cut off from a server", "replica of a server promoted in its place", "above the max_id in force"},
		"gen load -h":          {"usage: ticketd-bench [flags]"},
		"chaos -h gen":         {"usage: ticketd-bench chaos"},
		"btree --quick --help": {"-quick"},
	} {
		_, errOut, code := run(t, nil, strings.Fields(args)...)
		for _, w := range want {
			if code != 0 || !strings.Contains(errOut, w) {
				t.Errorf("%s: exit %d, want 0 and %q in:\n%s", args, code, w, errOut)
			}
		}
	}
}

func TestChaosIgnoresTheEnvironment(t *testing.T) {
	m := &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string {
		return map[string]string{"TICKETD_MYSQL": "root@tcp(prod:3306)/ticketd", "TICKETD_DURATION": "nonsense"}[k]
	}}
	if err := m.ParseFlags(context.Background(), []string{"chaos", "--duration", "2s"}); err != nil {
		t.Fatal(err)
	}
	if c := m.cmd.(*chaosCmd); c.mysql != "" {
		t.Fatalf("chaos took --mysql %q from the environment", c.mysql)
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
			m := &Main{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
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

// TestConfigurationReferenceIsComplete keeps the README's configuration reference true: every flag of
// both commands has a row of the command's own, with its environment variable where it reads one.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, _ := strings.Cut(string(b), "\n## Configuration\n")
	ref, _, _ = strings.Cut(ref, "\n## ")
	for name, label := range map[string]string{"bench": "ticketd-bench", "chaos": "ticketd-bench chaos"} {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		cmd := commands[name].new()
		cmd.flags(fs)
		_, noEnv := cmd.(noEnvFallback)
		fs.VisitAll(func(f *flag.Flag) {
			var row string
			for _, l := range strings.Split(ref, "\n") {
				if strings.HasPrefix(l, "| `"+label+"` | ") && strings.Contains(l, "`--"+f.Name+"`") {
					row = l
				}
			}
			if row == "" {
				t.Errorf("%s: flag --%s has no row of its own in the README's configuration reference", label, f.Name)
			}
			if env := cliflag.EnvName(f.Name); !noEnv && !strings.Contains(row, "`"+env+"`") {
				t.Errorf("%s: %s (for --%s) is not in its row of the README's configuration reference", label, env, f.Name)
			}
		})
	}
}
