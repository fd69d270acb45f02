// Command testservers starts and stops the throwaway servers the test suite runs against: a MariaDB
// ticket pair (auto_increment_increment=2, offsets 1 and 2) and a Redis with appendfsync always.
//
//	testservers up --dir DIR [--galera]   starts them (and a 3-node Galera cluster) and prints shell
//	                                      exports for the tests
//	testservers down PID...    stops them and waits until each process is gone
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ticketd/ticketd/internal/testservers"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testservers up --dir DIR | testservers down PID...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want up or down)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testservers:", err)
		os.Exit(1)
	}
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for data dirs, sockets and logs (required; keep the path short)")
	galera := fs.Bool("galera", false, "also start a 3-node MariaDB Galera cluster (TICKETD_TEST_GALERA)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("--dir is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	servers, err := testservers.StartPair(ctx, *dir)
	if err != nil {
		return err
	}
	redis, err := testservers.StartRedis(ctx, testservers.RedisOptions{Dir: filepath.Join(*dir, "r")})
	if err != nil {
		for _, m := range servers {
			_ = m.Kill()
		}
		return err
	}
	pids := []string{strconv.Itoa(servers[0].Pid), strconv.Itoa(servers[1].Pid)}
	pids = append(pids, strconv.Itoa(redis.Pid))
	if *galera {
		gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer gcancel()
		nodes, err := testservers.StartGalera(gctx, *dir, 3)
		if err != nil {
			for _, m := range servers {
				_ = m.Kill()
			}
			_ = redis.Kill()
			return err
		}
		var dsns []string
		for _, n := range nodes {
			dsns = append(dsns, n.DSN(""))
			pids = append(pids, strconv.Itoa(n.Pid))
		}
		fmt.Printf("export TICKETD_TEST_GALERA='%s'\n", strings.Join(dsns, ","))
	}
	fmt.Printf("export TICKETD_TEST_MYSQL_A='%s'\n", servers[0].DSN(""))
	fmt.Printf("export TICKETD_TEST_MYSQL_B='%s'\n", servers[1].DSN(""))
	fmt.Printf("export TICKETD_TEST_REDIS='%s'\n", redis.Addr())
	fmt.Printf("export TICKETD_TEST_PIDS='%s'\n", strings.Join(pids, " "))
	fmt.Fprintf(os.Stderr, "testservers: MariaDB on %d (odd) and %d (even), Redis on %d, up in %s\n",
		servers[0].Port, servers[1].Port, redis.Port, time.Since(start).Round(time.Millisecond))
	return nil
}

func down(args []string) error {
	var failed []string
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil || pid <= 1 {
			return fmt.Errorf("bad pid %q", a)
		}
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(30 * time.Second)
		for testservers.PidAlive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if testservers.PidAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			failed = append(failed, a)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("killed %s after SIGTERM did not stop them", strings.Join(failed, ", "))
	}
	return nil
}
