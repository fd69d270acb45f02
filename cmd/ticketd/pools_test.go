package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator/mysql"
	"github.com/ticketd/ticketd/internal/testenv"
	"github.com/ticketd/ticketd/internal/testservers"
)

// TestServeExportsPoolsAndBuild: `ticketd serve` on the MariaDB pair, and on Redis, serves the
// connection pools' statistics of each ticket server, the lease latency per server and the build.
func TestServeExportsPoolsAndBuild(t *testing.T) {
	dsns := testenv.Pair(t)
	redisAddr := testenv.PrivateRedis(t, testservers.RedisOptions{}).Addr()
	pairEnv := preparePair(t, dsns)
	redisEnv := map[string]string{"TICKETD_REDIS": redisAddr, "TICKETD_ADMIN_TOKEN": e2eAdmin, "TICKETD_TOKENS": "orders=" + e2eToken}
	nameA := mysql.ServerName(dsns[0])
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"mysql", pairEnv, []string{
			fmt.Sprintf(`go_sql_open_connections{db_name="%s lease"}`, nameA),
			fmt.Sprintf(`go_sql_wait_count_total{db_name="%s control"}`, nameA),
			fmt.Sprintf(`go_sql_max_open_connections{db_name="%s lease"}`, mysql.ServerName(dsns[1])),
			fmt.Sprintf(`ticketd_lease_duration_seconds_count{result="ok",server="%s"}`, nameA),
		}},
		{"redis", redisEnv, []string{
			fmt.Sprintf(`ticketd_redis_pool_connections{server="%s"}`, redisAddr),
			fmt.Sprintf(`ticketd_redis_pool_hits_total{server="%s"}`, redisAddr),
			fmt.Sprintf(`ticketd_redis_pool_wait_seconds_total{server="%s"}`, redisAddr),
			fmt.Sprintf(`ticketd_lease_duration_seconds_count{result="ok",server="%s"}`, redisAddr),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startServe(t, tc.env, "--cache=false")
			mustCall(t, 201, "PUT", p.URL+"/v1/namespaces/orders", e2eAdmin, `{"block_size":100}`)
			for range 4 {
				mustCall(t, 200, "POST", p.URL+"/v1/namespaces/orders/blocks", e2eToken, "")
			}
			metrics := string(mustCall(t, 200, "GET", p.URL+"/metrics", e2eAdmin, ""))
			for _, want := range append(tc.want, `ticketd_build_info{commit=`) {
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}
