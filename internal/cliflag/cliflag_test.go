package cliflag

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

// refusing is a flag value that refuses every value, as a secret flag's would if it checked them.
type refusing struct{}

func (refusing) String() string     { return "" }
func (refusing) Set(s string) error { return errors.New("not a valid value") }

// TestEnvironmentErrorsQuoteNoSecret: a value from the environment that a flag refuses is quoted in
// the error, unless the flag may hold a secret (a token, a DSN, a Redis URL).
func TestEnvironmentErrorsQuoteNoSecret(t *testing.T) {
	for name := range Secret {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.Var(refusing{}, name, "")
		fs.Var(refusing{}, "log-level", "")
		env := map[string]string{EnvName(name): "SECRET-value-0123456789"}
		err := ApplyEnv(fs, func(k string) string { return env[k] })
		if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), EnvName(name)) {
			t.Errorf("--%s: %v", name, err)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(refusing{}, "log-level", "")
	if err := ApplyEnv(fs, func(string) string { return "loud" }); err == nil || !strings.Contains(err.Error(), `"loud"`) {
		t.Errorf("a value that holds no secret is not quoted: %v", err)
	}
}

// TestParse: flags after arguments, a value that says its form, and -h that leaves each flag's type
// to the help.
func TestParse(t *testing.T) {
	newFS := func() (*flag.FlagSet, *int64, *bool) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		n := new(int64)
		fs.Var(Int64(n, 0, 10), "n", "`SIZE`")
		q := fs.Bool("quick", false, "")
		fs.Int("rows", 0, "")
		return fs, n, q
	}
	fs, n, q := newFS()
	if err := Parse(fs, []string{"gen", "-n", "3", "load", "--quick"}, true); err != nil || *n != 3 || !*q || !slices.Equal(fs.Args(), []string{"gen", "load"}) {
		t.Fatalf("Parse: %v, n %d, quick %v, args %q", err, *n, *q, fs.Args())
	}
	if !strings.Contains(fs.Lookup("rows").Usage, "$TICKETD_ROWS") || strings.Contains(fs.Lookup("n").Usage, "$") {
		t.Errorf("usage %q, %q", fs.Lookup("rows").Usage, fs.Lookup("n").Usage)
	}
	for args, want := range map[string]string{"--rows many": "want a whole number", "-n 11": "outside 0..10", "-n x": `"x" is not a whole number`} {
		fs, _, _ := newFS()
		if err := Parse(fs, strings.Fields(args), false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	fs, _, _ = newFS()
	if err := Parse(fs, []string{"-h"}, false); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	var help strings.Builder
	PrintFlags(&help, fs, false)
	if !strings.Contains(help.String(), "-rows int") || !strings.Contains(help.String(), "command line only") {
		t.Errorf("help:\n%s", help.String())
	}
}
