package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
)

// run drives Main in-process the way main does and returns stdout, stderr and the exit code.
func run(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return env[k] }}
	ctx := context.Background()
	err := m.ParseFlags(ctx, args)
	if err == nil {
		err = m.Run(ctx)
	}
	if cerr := m.Close(); err == nil {
		err = cerr
	}
	if cerr := m.Close(); cerr != nil {
		t.Fatalf("second Close: %v", cerr)
	}
	code := m.exitCode(err)
	return stdout.String(), stderr.String(), code
}

func decodeBlock(t *testing.T, out string) api.Block {
	t.Helper()
	var b api.Block
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("lease output %q: %v", out, err)
	}
	return b
}

func TestLeaseOnTheEmbeddedStore(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := run(t, nil, "lease", "--data-dir", dir, "demo", "-n", "10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b := decodeBlock(t, out)
	if b.Namespace != "demo" || b.Start != "1" || b.Last != "10" || b.Size != 10 || b.Step != 1 || b.Server != "embedded" || b.ExpiresAt != nil {
		t.Fatalf("block %+v", b)
	}
	// The environment fallback picks the same store; the next block follows the first.
	out, errOut, code = run(t, map[string]string{"TICKETD_DATA_DIR": dir}, "lease", "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if b := decodeBlock(t, out); b.Start != "11" || b.Size != 1000 {
		t.Fatalf("second block %+v, want 1000 IDs from 11", b)
	}
}

func TestNamespaceCommands(t *testing.T) {
	dir := t.TempDir()
	_, errOut, code := run(t, nil, "namespace", "create", "--data-dir", dir, "orders", "--block-size", "50", "--lease-ttl", "10m", "--start", "5000")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	_, errOut, code = run(t, nil, "namespace", "create", "--data-dir", dir, "orders")
	if code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("second create: exit %d, %q", code, errOut)
	}
	if _, errOut, code = run(t, nil, "namespace", "create", "--data-dir", dir, "orders", "--exists-ok", "--block-size", "7"); code != 0 {
		t.Fatalf("create --exists-ok: exit %d, %q", code, errOut)
	}
	out, _, code := run(t, nil, "namespace", "get", "--data-dir", dir, "orders")
	var ns api.Namespace
	if code != 0 || json.Unmarshal([]byte(out), &ns) != nil || ns.BlockSize != 50 || ns.LeaseTTL != "10m0s" || ns.Start != "5000" {
		t.Fatalf("get: exit %d, %s", code, out)
	}
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("get printed %q, want one line of JSON", out)
	}
	out, _, code = run(t, nil, "lease", "--data-dir", dir, "orders")
	if b := decodeBlock(t, out); code != 0 || b.Start != "5000" || b.Size != 50 || b.ExpiresAt == nil {
		t.Fatalf("lease: %+v", b)
	}
	out, _, code = run(t, nil, "namespace", "list", "--data-dir", dir)
	var list api.Namespaces
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Namespaces) != 1 {
		t.Fatalf("list: exit %d, %s", code, out)
	}
}

func TestBadInputIsOneClearLine(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"no command", nil, nil, 2, "no command given"},
		{"unknown command", nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"bad namespace", nil, []string{"lease", "--data-dir", dir, "Bad Name"}, 2, "invalid namespace name"},
		{"no namespace", nil, []string{"lease", "--data-dir", dir}, 2, "want exactly one namespace"},
		{"size not a number", nil, []string{"lease", "--data-dir", dir, "-n", "ten", "x"}, 2, `"ten" is not a whole number`},
		{"size negative", nil, []string{"lease", "--data-dir", dir, "-n", "-1", "x"}, 2, "outside 0..4294967296"},
		{"size too big for namespace", nil, []string{"lease", "--data-dir", dir, "-n", "2000000", "x"}, 1, "invalid block size"},
		{"missing namespace without auto-create", nil, []string{"lease", "--data-dir", dir, "--create-namespaces", "off", "nosuch"}, 1, "ticketd namespace create"},
		{"bad create mode", nil, []string{"lease", "--data-dir", dir, "--create-namespaces", "maybe", "x"}, 2, "must be on, off or auto"},
		{"bad env duration", map[string]string{"TICKETD_LEASE_TIMEOUT": "soon"}, []string{"lease", "x"}, 2, "TICKETD_LEASE_TIMEOUT"},
		{"duration without a unit", nil, []string{"namespace", "create", "--data-dir", dir, "--lease-ttl", "5", "x"}, 2,
			`invalid value "5" for flag -lease-ttl: want a duration with a unit, like 10m, 1h30m or 500ms`},
		{"env duration without a unit", map[string]string{"TICKETD_LEASE_TIMEOUT": "5"}, []string{"lease", "x"}, 2,
			`TICKETD_LEASE_TIMEOUT="5": want a duration with a unit, like 10m, 1h30m or 500ms`},
		{"env bool", map[string]string{"TICKETD_AUTO_MIGRATE": "yes"}, []string{"lease", "x"}, 2, `TICKETD_AUTO_MIGRATE="yes": want true or false`},
		{"number", nil, []string{"serve", "--max-connections", "many"}, 2, `invalid value "many" for flag -max-connections: want a whole number`},
		{"bad timeout", nil, []string{"lease", "--data-dir", dir, "--lease-timeout", "1ns", "x"}, 2, "between 10ms and 10m"},
		{"bad settings", nil, []string{"namespace", "create", "--data-dir", dir, "--block-size", "10", "--max-block-size", "5", "y"}, 2, "block_size 10 must be between 1 and max_block_size 5"},
		{"unknown namespace subcommand", nil, []string{"namespace", "drop", "x"}, 2, "namespace drop"},
		{"unreachable pair", nil, []string{"lease", "--mysql", "root@tcp(127.0.0.1:1)/x", "--lease-timeout", "500ms", "--attempt-timeout", "200ms", "x"}, 1, "no ticket server available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, tt.env, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d (%s)", code, tt.code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "ticketd: ") || !strings.Contains(last, tt.want) {
				t.Fatalf("stderr %q, want one line saying %q", errOut, tt.want)
			}
		})
	}
}

// TestErrorsPointToTheCommandsHelp: a usage error names the help that lists what was wrong — the
// command's own, where its flags are, or the list of commands.
func TestErrorsPointToTheCommandsHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		help string
	}{
		{[]string{"frobnicate"}, "(see ticketd --help)"},
		{nil, "(see ticketd --help)"},
		{[]string{"lease"}, "(see ticketd lease --help)"},
		{[]string{"lease", "--size", "3", "x"}, "(see ticketd lease --help)"},
		{[]string{"namespace", "create", "--lease-ttl", "5", "x"}, "(see ticketd namespace create --help)"},
		{[]string{"namespace"}, "(see ticketd namespace --help)"},
		{[]string{"namespace", "drop", "x"}, "(see ticketd namespace --help)"},
		{[]string{"repair", "x", "--mysql", "root@tcp(127.0.0.1:1)/x"}, "(see ticketd repair --help)"},
	} {
		_, errOut, code := run(t, nil, tt.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if last := lines[len(lines)-1]; code != 2 || !strings.HasSuffix(last, tt.help) {
			t.Errorf("%v: exit %d, last line %q; want 2 ending %q", tt.args, code, last, tt.help)
		}
	}
}

// TestHelpText: namespace --help lists every namespace command and no empty flag list; flag lines show
// a placeholder that names the value, and no Markdown quotes.
func TestHelpText(t *testing.T) {
	_, errOut, code := run(t, nil, "namespace", "--help")
	if code != 0 || strings.Contains(errOut, "Flags") {
		t.Fatalf("namespace --help: exit %d, a flag list for a command that has none:\n%s", code, errOut)
	}
	for _, sub := range []string{"adopt", "create", "get", "list", "update"} {
		if !strings.Contains(errOut, "  namespace "+sub+" ") {
			t.Errorf("namespace --help does not list namespace %s:\n%s", sub, errOut)
		}
	}
	if _, errOut, _ := run(t, nil, "namespace"); !strings.Contains(errOut, "namespace adopt, create, get, list or update") {
		t.Errorf("namespace alone: %s", errOut)
	}
	for name := range commands {
		_, errOut, code := run(t, nil, append(strings.Fields(name), "--help")...)
		if code != 0 {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		_, flags, _ := strings.Cut(errOut, "\nFlags")
		if strings.Contains(flags, "`") {
			t.Errorf("%s --help shows a backquote in its flags:\n%s", name, flags)
		}
	}
	for cmd, want := range map[string]string{"repair": "--server HOST:PORT", "namespace create": "--start ID", "namespace update": "--max-id ID", "namespace adopt": "--margin IDS", "serve": "--cache-min IDS", "lease": "-n SIZE"} {
		if _, errOut, _ := run(t, nil, append(strings.Fields(cmd), "--help")...); !strings.Contains(errOut, "  "+want+"\n") {
			t.Errorf("%s --help lacks %q:\n%s", cmd, want, errOut)
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"lease", "--help"}, {"namespace", "create", "-h"}, {"migrate", "--help"}} {
		_, errOut, code := run(t, nil, args...)
		if code != 0 || !strings.Contains(errOut, "ticketd") {
			t.Fatalf("%v: exit %d, %q", args, code, errOut)
		}
	}
	_, errOut, _ := run(t, nil, "lease", "--help")
	if !strings.Contains(errOut, "$TICKETD_MYSQL") || !strings.Contains(errOut, "$TICKETD_DATA_DIR") {
		t.Fatalf("help does not name the environment fallbacks: %s", errOut)
	}
}

func TestCommandsOnThePair(t *testing.T) {
	pair := testenv.Pair(t)
	testenvName := func(i int) string { return mysql.ServerName(pair[i]) }
	dsns := testenv.DSNList(pair)
	env := map[string]string{"TICKETD_MYSQL": dsns}
	if _, errOut, code := run(t, env, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	if _, errOut, code := run(t, env, "lease", "orders"); code != 1 || !strings.Contains(errOut, "namespace not found") {
		t.Fatalf("with --mysql a lease must not create its namespace: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, env, "namespace", "create", "orders", "--block-size", "100"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	parity := map[string]int64{}
	for i := 0; i < 40 && len(parity) < 2; i++ { // each run starts the round-robin at random
		out, errOut, code := run(t, env, "lease", "orders")
		if code != 0 {
			t.Fatalf("lease: %s", errOut)
		}
		b := decodeBlock(t, out)
		blk, err := b.ToBlock()
		if err != nil || b.Step != 2 || b.Size != 100 {
			t.Fatalf("block %+v: %v", b, err)
		}
		if p, seen := parity[b.Server]; seen && p != blk.Start%2 {
			t.Fatalf("%s issued IDs of both parities", b.Server)
		}
		parity[b.Server] = blk.Start % 2
	}
	if len(parity) != 2 || parity[testenvName(0)] == parity[testenvName(1)] {
		t.Fatalf("blocks came from %v, want both servers", parity)
	}
	out, _, code := run(t, env, "namespace", "get", "orders")
	var ns api.Namespace
	if code != 0 || json.Unmarshal([]byte(out), &ns) != nil || len(ns.Servers) != 2 {
		t.Fatalf("get: %s", out)
	}
}
