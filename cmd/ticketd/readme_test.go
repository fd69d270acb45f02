package main

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// TestConfigurationReferenceIsComplete keeps the README's configuration reference true: every flag of
// every command, and its environment variable, must be in it.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ref, ok := strings.Cut(string(b), "## Configuration")
	if !ok {
		t.Fatal("README has no Configuration section")
	}
	ref, _, _ = strings.Cut(ref, "\n## ")
	for name, info := range commands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cmd := info.new()
		cmd.flags(fs)
		_, noEnv := cmd.(noEnvFallback)
		fs.VisitAll(func(f *flag.Flag) {
			dashes := "--"
			if len(f.Name) == 1 {
				dashes = "-"
			}
			if !strings.Contains(ref, "`"+dashes+f.Name) {
				t.Errorf("%s: flag %s%s is not in the README's configuration reference", name, dashes, f.Name)
			}
			if env := envName(f.Name); env != "" && !noEnv && !strings.Contains(ref, env) {
				t.Errorf("%s: %s (for --%s) is not in the README's configuration reference", name, env, f.Name)
			}
		})
	}
}
