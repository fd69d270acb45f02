package main

import (
	"encoding/json"
	"fmt"
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
	if _, errOut, code := run(t, nil, "repair", "orders", "--server", "x"); code != 2 || !strings.Contains(errOut, "give --mysql or --redis") {
		t.Fatalf("repair on the embedded store: %d %s", code, errOut)
	}
	nameB := mysql.ServerName(pair[1])
	// B is healthy: a repair is refused, and says how to force it.
	if _, errOut, code := run(t, env, "repair", "orders", "--server", nameB, "--margin", "1000"); code != 1 || !strings.Contains(errOut, "not fenced") || !strings.Contains(errOut, "--force") {
		t.Fatalf("repair of a healthy server: %d %s", code, errOut)
	}
	out, errOut, code := run(t, env, "repair", "orders", "--server", nameB, "--margin", "1000", "--force")
	if code != 0 {
		t.Fatal(errOut)
	}
	for _, want := range []string{"not fenced", "highest water mark", "margin 1000: given", "counter moved from"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("repair's report lacks %q:\n%s", want, errOut)
		}
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	after, _ := strconv.ParseInt(fmt.Sprint(res["after"]), 10, 64)
	before, _ := strconv.ParseInt(fmt.Sprint(res["before"]), 10, 64)
	if after < before+1000 || after%2 != 0 {
		t.Fatalf("repair moved %s's counter from %d to %d; want at least +1000 and still even", nameB, before, after)
	}
	if _, errOut, code := run(t, env, "lease", "orders", "-n", "1"); code != 0 {
		t.Fatalf("lease after repair: %s", errOut)
	}
}

// A forced repair's default margin stops at the namespace's ceiling: a server that would need more says
// that it has nothing left to issue safely, and a lease there names the real max_id.
func TestRepairMarginStopsAtMaxID(t *testing.T) {
	pair := testenv.Pair(t)
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList(pair), "TICKETD_AUTO_MIGRATE": "true"}
	if _, errOut, code := run(t, env, "namespace", "create", "orders", "--max-id", "1000000"); code != 0 {
		t.Fatal(errOut)
	}
	if _, errOut, code := run(t, env, "lease", "orders", "-n", "3"); code != 0 {
		t.Fatal(errOut)
	}
	nameB := mysql.ServerName(pair[1])
	out, errOut, code := run(t, env, "repair", "orders", "--server", nameB, "--force")
	if code != 0 {
		t.Fatal(errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	after, _ := strconv.ParseInt(fmt.Sprint(res["after"]), 10, 64)
	if after > 1000000+2 {
		t.Errorf("repair moved %s's counter to %d, past max_id 1000000 by more than a step", nameB, after)
	}
	if !strings.Contains(errOut, "nothing left to issue safely") || !strings.Contains(errOut, "1000000") {
		t.Errorf("repair's report does not say that %s has nothing left below max_id 1000000:\n%s", nameB, errOut)
	}
	// Server A still issues; once its IDs are gone too, the error names the namespace's ceiling.
	if _, errOut, code := run(t, env, "namespace", "update", "orders", "--start", "999990"); code != 0 {
		t.Fatal(errOut)
	}
	for range 10 {
		if _, errOut, code = run(t, env, "lease", "orders", "-n", "5"); code != 0 {
			break
		}
	}
	if code == 0 || !strings.Contains(errOut, "max_id 1000000") || strings.Contains(errOut, "9223372036854775807") {
		t.Fatalf("a lease past the ceiling: exit %d %s; want an exhausted error naming max_id 1000000", code, errOut)
	}
}
