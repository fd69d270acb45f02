package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestHelpCommand: `ticketd help COMMAND` is `ticketd COMMAND --help`, and flags are listed with two
// dashes (one-letter ones with one), as the docs write them.
func TestHelpCommand(t *testing.T) {
	for _, name := range []string{"lease", "namespace create", "serve", "version"} {
		_, want, _ := run(t, nil, append(strings.Fields(name), "--help")...)
		_, got, code := run(t, nil, append([]string{"help"}, strings.Fields(name)...)...)
		if code != 0 || got != want || !strings.HasPrefix(got, "usage: ticketd "+name) {
			t.Fatalf("help %s: exit %d\n%s\nwant\n%s", name, code, got, want)
		}
	}
	_, errOut, _ := run(t, nil, "help", "lease")
	if !strings.Contains(errOut, "\n  --mysql string\n") || !strings.Contains(errOut, "\n  -n SIZE\n") || strings.Contains(errOut, "\n  -mysql") {
		t.Fatalf("lease's flags are not listed with two dashes (one for -n):\n%s", errOut)
	}
	if _, _, code := run(t, nil, "help", "nosuch"); code != 2 {
		t.Fatalf("help nosuch: exit %d, want 2", code)
	}
}

// TestHelpListsOnlyTheFlagsACommandUses: each command takes, and its help lists, only the backend
// flags it acts on.
func TestHelpListsOnlyTheFlagsACommandUses(t *testing.T) {
	flagsOf := func(name string) string {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		commands[name].new().flags(fs)
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		sort.Strings(names)
		return strings.Join(names, " ")
	}
	backend := "allow-volatile-redis attempt-timeout auto-migrate data-dir lease-timeout mysql redis"
	for name, want := range map[string]string{
		"migrate":          "mysql",
		"namespace get":    backend,
		"namespace list":   backend,
		"doctor":           "allow-volatile-redis attempt-timeout lease-timeout mysql redis",
		"lease":            "allow-volatile-redis attempt-timeout auto-migrate create-namespaces data-dir lease-timeout mysql n redis",
		"namespace adopt":  "attempt-timeout auto-migrate block-size flickr-table lease-timeout margin max-block-size mysql",
		"namespace create": "",
	} {
		got := flagsOf(name)
		if want == "" {
			if strings.Contains(got, "create-namespaces") {
				t.Errorf("namespace create takes --create-namespaces, which only a lease uses: %s", got)
			}
			continue
		}
		if got != want {
			t.Errorf("%s takes %q, want %q", name, got, want)
		}
	}
	if _, errOut, code := run(t, nil, "namespace", "get", "x", "--create-namespaces", "on"); code != 2 || !strings.Contains(errOut, "create-namespaces") {
		t.Fatalf("namespace get --create-namespaces: exit %d, %q; want a usage error", code, errOut)
	}
}

// TestEmbeddedStoreIsNeverSilent: with no server given, the commands that only read make no store
// (and say there is none, naming the flags that give servers), and those that lease or create say on
// stderr which store they use.
func TestEmbeddedStoreIsNeverSilent(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, args := range [][]string{{"namespace", "list"}, {"namespace", "get", "orders"}, {"namespace", "update", "orders", "--block-size", "5"}} {
		_, errOut, code := run(t, nil, args...)
		if code != 1 || !strings.Contains(errOut, "no embedded store at "+filepath.Join(dir, "ticketd-data", "ticketd.db")) || !strings.Contains(errOut, "--mysql") {
			t.Fatalf("%v: exit %d, %q; want 1, saying there is no store and how to give servers", args, code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "ticketd-data")); !os.IsNotExist(err) {
			t.Fatalf("%v made ./ticketd-data (%v)", args, err)
		}
	}
	if _, errOut, code := run(t, nil, "doctor"); code != 2 || !strings.Contains(errOut, "give --mysql or --redis") {
		t.Fatalf("doctor: exit %d, %q", code, errOut)
	}
	store := "using the embedded store " + filepath.Join(dir, "ticketd-data", "ticketd.db")
	for _, args := range [][]string{{"lease", "orders", "-n", "3"}, {"namespace", "create", "links"}} {
		_, errOut, code := run(t, nil, args...)
		if code != 0 || !strings.Contains(errOut, store) {
			t.Fatalf("%v: exit %d, stderr %q; want it to say %q", args, code, errOut, store)
		}
	}
	if out, errOut, code := run(t, nil, "namespace", "list"); code != 0 || !strings.Contains(out, `"links"`) || errOut != "" {
		t.Fatalf("namespace list on the store made: exit %d, %q %q", code, out, errOut)
	}
}
