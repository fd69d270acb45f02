package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testenv"
)

// TestNamespaceTokenSeesNoServerAddresses: GET /v1/namespaces/{ns} with the namespace's token shows
// each ticket server's counter and health, but neither its address nor its raw error, also while one
// is down; the admin sees both.
func TestNamespaceTokenSeesNoServerAddresses(t *testing.T) {
	pair := testenv.Pair(t)
	addrOf := regexp.MustCompile(`tcp\(([^)]*)\)`)
	gate := testenv.StartGate(t, addrOf.FindStringSubmatch(pair[1])[1])
	gated := addrOf.ReplaceAllString(pair[1], "tcp("+gate.Addr()+")")
	env := map[string]string{"TICKETD_MYSQL": testenv.DSNList([]string{pair[0], gated}), "TICKETD_ADMIN_TOKEN": e2eAdmin, "TICKETD_TOKENS": "orders=" + e2eToken}
	if _, errOut, code := run(t, env, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	p := startServe(t, env)
	ns := p.URL + "/v1/namespaces/orders"
	mustCall(t, 201, "PUT", ns, e2eAdmin, `{"block_size":10}`)
	names := []string{mysql.ServerName(pair[0]), mysql.ServerName(gated)}
	check := func(when string) {
		t.Helper()
		admin := string(mustCall(t, 200, "GET", ns, e2eAdmin, ""))
		for _, n := range names {
			if !strings.Contains(admin, n) {
				t.Fatalf("%s: the admin does not see server %s: %s", when, n, admin)
			}
		}
		own := string(mustCall(t, 200, "GET", ns, e2eToken, ""))
		for _, n := range names {
			if strings.Contains(own, n) {
				t.Fatalf("%s: the namespace token sees server %s: %s", when, n, own)
			}
		}
		if !strings.Contains(own, `"server":"server 1"`) || !strings.Contains(own, `"next":`) {
			t.Fatalf("%s: the namespace token sees no server state: %s", when, own)
		}
		for _, raw := range []string{"dial", "connect", "refused", "tcp", "EOF", "replication"} {
			if strings.Contains(own, raw) {
				t.Fatalf("%s: the namespace token sees %q: %s", when, raw, own)
			}
		}
	}
	check("both servers up")
	gate.Set(testenv.Refuse)
	for range 3 { // a lease finds the refused server down
		call("POST", ns+"/blocks", e2eToken, `{"size":1}`)
	}
	if admin := string(mustCall(t, 200, "GET", ns, e2eAdmin, "")); !strings.Contains(admin, `"healthy":false`) {
		t.Fatalf("the refused server is not reported down: %s", admin)
	}
	check("one server down")
}
