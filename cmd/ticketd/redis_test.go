package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/api"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

func TestCommandsOnRedis(t *testing.T) {
	r := testenv.PrivateRedis(t, testservers.RedisOptions{})
	addr := r.Addr()
	if _, errOut, code := run(t, nil, "lease", "--redis", addr, "orders"); code != 1 || !strings.Contains(errOut, "namespace not found") {
		t.Fatalf("with --redis a lease must not create its namespace: exit %d %s", code, errOut)
	}
	if _, errOut, code := run(t, nil, "namespace", "create", "--redis", addr, "orders", "--block-size", "100"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	out, errOut, code := run(t, nil, "lease", "--redis", addr, "orders")
	if code != 0 {
		t.Fatalf("lease: %s", errOut)
	}
	if b := decodeBlock(t, out); b.Start != "1" || b.Last != "100" || b.Step != 1 || b.Size != 100 || b.Server != addr {
		t.Fatalf("block %+v", b)
	}
	// The environment fallback reaches the same instance; the counter continues.
	env := map[string]string{"TICKETD_REDIS": addr}
	out, errOut, code = run(t, env, "lease", "orders", "-n", "5")
	if code != 0 {
		t.Fatalf("lease via TICKETD_REDIS: %s", errOut)
	}
	if b := decodeBlock(t, out); b.Start != "101" || b.Size != 5 {
		t.Fatalf("second block %+v, want 5 IDs from 101", b)
	}
	out, _, code = run(t, env, "namespace", "get", "orders")
	var ns api.Namespace
	if code != 0 || json.Unmarshal([]byte(out), &ns) != nil || len(ns.Servers) != 1 || ns.Servers[0].Next != 106 {
		t.Fatalf("get: exit %d, %s", code, out)
	}
}

func TestTwoRedisInstancesIssueOddAndEven(t *testing.T) {
	a := testenv.PrivateRedis(t, testservers.RedisOptions{})
	b := testenv.PrivateRedis(t, testservers.RedisOptions{})
	both := a.Addr() + "," + b.Addr()
	if _, errOut, code := run(t, nil, "namespace", "create", "--redis", both, "orders", "--block-size", "10"); code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	parity := map[string]int64{}
	for i := 0; i < 40 && len(parity) < 2; i++ { // each run starts the round-robin at random
		out, errOut, code := run(t, nil, "lease", "--redis", both, "orders")
		if code != 0 {
			t.Fatalf("lease: %s", errOut)
		}
		wb := decodeBlock(t, out)
		blk, err := wb.ToBlock()
		if err != nil || blk.Step != 2 || blk.Size != 10 {
			t.Fatalf("block %+v: %v", wb, err)
		}
		parity[blk.Server] = blk.Start % 2
	}
	if len(parity) != 2 || parity[a.Addr()] != 1 || parity[b.Addr()] != 0 {
		t.Fatalf("parity by instance %v, want %s odd and %s even", parity, a.Addr(), b.Addr())
	}
	// The first instance served offset 1 of 2; alone it would be offset 1 of 1 and is refused.
	_, errOut, code := run(t, nil, "lease", "--redis", a.Addr(), "orders")
	if code != 1 || !strings.Contains(errOut, "serves offset 1 of stride 2") {
		t.Fatalf("one instance of a pair alone: exit %d, %s", code, errOut)
	}
}

func TestVolatileRedisNeedsTheFlag(t *testing.T) {
	r := testenv.PrivateRedis(t, testservers.RedisOptions{Volatile: true})
	_, errOut, code := run(t, nil, "namespace", "create", "--redis", r.Addr(), "orders")
	if code != 1 || !strings.Contains(errOut, "can lose acknowledged writes") || !strings.Contains(errOut, "--allow-volatile-redis") ||
		!strings.Contains(errOut, "appendfsync always") {
		t.Fatalf("volatile Redis without the flag: exit %d, %s", code, errOut)
	}
	_, errOut, code = run(t, nil, "namespace", "create", "--redis", r.Addr(), "--allow-volatile-redis", "orders")
	if code != 0 || !strings.Contains(errOut, "level=WARN") || !strings.Contains(errOut, "reissue IDs") {
		t.Fatalf("volatile Redis with --allow-volatile-redis: exit %d, want a warning: %s", code, errOut)
	}
	out, errOut, code := run(t, map[string]string{"TICKETD_ALLOW_VOLATILE_REDIS": "true"}, "lease", "--redis", r.Addr(), "orders", "-n", "3")
	if b := decodeBlock(t, out); code != 0 || b.Start != "1" || b.Size != 3 {
		t.Fatalf("lease with TICKETD_ALLOW_VOLATILE_REDIS: exit %d, %s %s", code, out, errOut)
	}
}

func TestRedisFlagMistakes(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"two backends", []string{"lease", "--mysql", "root@tcp(127.0.0.1:1)/x", "--redis", "127.0.0.1:1", "x"}, 2, "--mysql and --redis both given"},
		{"empty list", []string{"lease", "--redis", " , ", "x"}, 2, "names no instance"},
		{"no port", []string{"lease", "--redis", "redis-a", "x"}, 1, "want host:port or a redis:// URL"},
		{"unreachable", []string{"lease", "--redis", "127.0.0.1:1", "--lease-timeout", "500ms", "--attempt-timeout", "200ms", "x"}, 1, "no ticket server available"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := run(t, nil, tt.args...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if code != tt.code || !strings.HasPrefix(lines[len(lines)-1], "ticketd: ") || !strings.Contains(lines[len(lines)-1], tt.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want one line saying %q", code, tt.code, errOut, tt.want)
			}
		})
	}
	_, errOut, _ := run(t, nil, "lease", "--help")
	if !strings.Contains(errOut, "$TICKETD_REDIS") || !strings.Contains(errOut, "$TICKETD_ALLOW_VOLATILE_REDIS") {
		t.Fatalf("help does not name the Redis flags' environment variables: %s", errOut)
	}
}

// TestClientLogsDoNotPrecedeTheError: with the servers down, a command prints its own error and none of
// the client libraries' raw log lines ("redis: … pool.go:…") before it. A process of its own: the
// libraries' loggers are global, and this process's tests have set them already.
func TestClientLogsDoNotPrecedeTheError(t *testing.T) {
	port, err := testservers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("127.0.0.1:%d", port) // nothing listens there
	for _, args := range [][]string{
		{"doctor", "--redis", down},
		{"lease", "--redis", down, "x"},
		{"namespace", "create", "--redis", down, "x"},
		{"doctor", "--mysql", "root@tcp(" + down + ")/x"},
		{"migrate", "--mysql", "root@tcp(" + down + ")/x"},
	} {
		cmd := exec.Command(testenv.Ticketd(t), args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("%v: %v, want exit 1\n%s", args, err, stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			if strings.HasPrefix(line, "redis: ") || strings.HasPrefix(line, "[mysql] ") || strings.Contains(line, ".go:") {
				t.Errorf("%v printed a client library's own log line: %q\n%s", args, line, stderr.String())
			}
		}
		if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); !strings.HasPrefix(lines[len(lines)-1], "ticketd: ") {
			t.Errorf("%v: the last line is not ticketd's error:\n%s", args, stderr.String())
		}
	}
}
