package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testenv"
)

func TestRepairCommand(t *testing.T) {
	pair := testenv.Pair(t)
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(pair), "TICKETD_AUTO_MIGRATE": "true"}
	if _, errOut, code := run(t, env, "namespace", "create", "orders"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := run(t, env, "repair", "orders"); code != 2 || !strings.Contains(errOut, "--server is required") {
		t.Fatalf("repair without --server: %d %s", code, errOut)
	}
	if _, errOut, code := run(t, env, "repair", "orders", "--server", "db:1"); code != 1 || !strings.Contains(errOut, "no ticket server named") {
		t.Fatalf("repair of an unknown server: %d %s", code, errOut)
	}
	if _, errOut, code := run(t, nil, "repair", "orders", "--server", "x"); code != 2 || !strings.Contains(errOut, "give --mysql") {
		t.Fatalf("repair on the embedded store: %d %s", code, errOut)
	}
	nameB := mysql.ServerName(pair[1])
	out, errOut, code := run(t, env, "repair", "orders", "--server", nameB, "--margin", "1000")
	if code != 0 {
		t.Fatal(errOut)
	}
	var res map[string]string
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	after, _ := strconv.ParseInt(res["after"], 10, 64)
	before, _ := strconv.ParseInt(res["before"], 10, 64)
	if after < before+1000 || after%2 != 0 {
		t.Fatalf("repair moved %s's counter from %d to %d; want at least +1000 and still even", nameB, before, after)
	}
	if _, errOut, code := run(t, env, "lease", "orders", "-n", "1"); code != 0 {
		t.Fatalf("lease after repair: %s", errOut)
	}
}
