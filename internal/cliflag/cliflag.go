// Package cliflag reads the flags of ticketd's commands (ticketd, ticketd-bench) the same way: every
// flag of two or more letters falls back to a TICKETD_* environment variable, a value that does not
// parse says what form it takes, and flags may follow the positional arguments.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// EnvName is the environment variable that a flag falls back to: --data-dir reads TICKETD_DATA_DIR.
// One-letter flags have none.
func EnvName(flagName string) string {
	if len(flagName) < 2 {
		return ""
	}
	return "TICKETD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Secret are the flags whose values may hold a token or a password: no message quotes them.
var Secret = map[string]bool{"admin-token": true, "token": true, "tokens": true, "metrics-token": true,
	"mysql": true, "redis": true, "galera": true}

// Parse parses args into fs, flags after positional arguments included. With env, each flag's help
// names its environment variable (ApplyEnv reads them once Parse is done). A value that does not parse
// is refused with the form it takes. On -h or --help it returns flag.ErrHelp, and fs prints each flag's
// type from its own value again.
func Parse(fs *flag.FlagSet, args []string, env bool) error {
	if env {
		describeEnv(fs)
	}
	restore := explainValues(fs)
	err := fs.Parse(interleave(fs, args))
	if errors.Is(err, flag.ErrHelp) {
		restore()
	}
	return err
}

// ApplyEnv sets every flag not given on the command line from its environment variable.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		if name == "" || given[f.Name] || err != nil {
			return
		}
		if v := getenv(name); v != "" {
			if serr := fs.Set(f.Name, v); serr != nil {
				shown := fmt.Sprintf("%q", v)
				if Secret[f.Name] {
					shown = "(not shown: it may hold a secret)"
				}
				err = fmt.Errorf("environment %s=%s: %v", name, shown, serr)
			}
		}
	})
	return err
}

// PrintFlags writes fs's flags under a heading that says whether the environment is read, or nothing
// when fs has none.
func PrintFlags(w io.Writer, fs *flag.FlagSet, env bool) {
	if !HasFlags(fs) {
		return
	}
	if env {
		fmt.Fprintln(w, "\nFlags (each also read from the environment variable shown):")
	} else {
		fmt.Fprintln(w, "\nFlags (read from the command line only):")
	}
	// The flag package prints one dash; ticketd's commands are written with two (--mysql), as in the
	// docs, and both work.
	var buf strings.Builder
	fs.SetOutput(&buf)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			if name, _, _ := strings.Cut(strings.TrimSpace(rest), " "); len(name) > 1 {
				line = "  --" + rest
			}
		}
		io.WriteString(w, line)
	}
}

// HasFlags reports whether fs defines any flag.
func HasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// describeEnv appends each flag's environment variable to its help text.
func describeEnv(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if name := EnvName(f.Name); name != "" && !strings.Contains(f.Usage, "$"+name) {
			f.Usage += " ($" + name + ")"
		}
	})
}

// explainedValue is a flag value whose parse error says what form the value takes: the flag package
// says only "parse error".
type explainedValue struct {
	flag.Value
	want string
}

func (v explainedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		return errors.New("want " + v.want)
	}
	return nil
}

func (v explainedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// explainValues wraps the duration, bool and number flags of fs in explainedValue, and returns a
// function that puts the originals back (flag.PrintDefaults names a flag's type from its own value).
func explainValues(fs *flag.FlagSet) (restore func()) {
	var wrapped []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		var want string
		switch g.Get().(type) {
		case time.Duration:
			want = "a duration with a unit, like 10m, 1h30m or 500ms"
		case bool:
			want = "true or false"
		case int, int64, uint, uint64:
			want = "a whole number"
		case float64:
			want = "a number"
		default:
			return
		}
		f.Value = explainedValue{f.Value, want}
		wrapped = append(wrapped, f)
	})
	return func() {
		for _, f := range wrapped {
			f.Value = f.Value.(explainedValue).Value
		}
	}
}

// interleave moves flags that follow positional arguments in front of them, so that both
// `ticketd lease orders -n 10` and `ticketd lease -n 10 orders` work.
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !IsBool(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, pos...)
}

// IsBool reports whether f is a switch, given without a value.
func IsBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(v string) []string {
	var out []string
	for _, d := range strings.Split(v, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// Int64 is an int64 flag value that refuses values outside [min, max] with a message naming the range.
func Int64(v *int64, min, max int64) flag.Value { return int64Value{v, min, max} }

type int64Value struct {
	v        *int64
	min, max int64
}

func (f int64Value) String() string {
	if f.v == nil {
		return "0"
	}
	return fmt.Sprint(*f.v)
}

func (f int64Value) Set(s string) error {
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil || fmt.Sprint(v) != strings.TrimPrefix(s, "+") {
		return fmt.Errorf("%q is not a whole number", s)
	}
	if v < f.min || v > f.max {
		return fmt.Errorf("%d is outside %d..%d", v, f.min, f.max)
	}
	*f.v = v
	return nil
}
