// Package testservers starts throwaway MariaDB and Redis servers on loopback for ticketd's tests and
// benchmarks: own data directories under a temporary directory, free ports, stopped by pid.
package testservers

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver the readiness check connects with
)

// MariaDBOptions configures one ticket server.
type MariaDBOptions struct {
	// Dir holds the data directory, socket and logs. Keep it short: the socket path must stay under
	// about 100 characters.
	Dir string
	// Port is the loopback TCP port; zero picks a free one.
	Port int
	// Increment and Offset are auto_increment_increment and auto_increment_offset. Default 2 and 1.
	Increment, Offset int
	// ExtraArgs are appended to the mariadbd command line (for example a different
	// --innodb-flush-log-at-trx-commit to test that ticketd refuses it).
	ExtraArgs []string
	// Galera, when set, makes the server a node of a Galera cluster (see StartGalera).
	Galera *GaleraNode
}

// GaleraNode is one node's part in a Galera cluster on loopback.
type GaleraNode struct {
	// Cluster is the gcomm:// address of every node; Name this node's name.
	Cluster, Name string
	// GcommPort carries the cluster's messages, ISTPort incremental state transfers, SSTPort (rsync)
	// full ones.
	GcommPort, ISTPort, SSTPort int
	// Bootstrap starts a new cluster instead of joining one; it holds for the first start only.
	Bootstrap bool
}

// MariaDB is a running (or stopped) throwaway server. Not safe for concurrent use.
type MariaDB struct {
	opts MariaDBOptions
	Port int
	Pid  int
	cmd  *exec.Cmd
}

// StartMariaDB initialises a data directory (unless it exists) and starts mariadbd on it.
func StartMariaDB(ctx context.Context, opts MariaDBOptions) (*MariaDB, error) {
	if opts.Increment == 0 {
		opts.Increment = 2
	}
	if opts.Offset == 0 {
		opts.Offset = 1
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	m := &MariaDB{opts: opts}
	if _, err := os.Stat(m.DataDir()); errors.Is(err, os.ErrNotExist) {
		if err := m.install(ctx); err != nil {
			return nil, err
		}
	}
	err := onFreePort(opts.Port, func(port int) error {
		m.opts.Port, m.Port = port, port
		return m.Start(ctx)
	})
	return m, err
}

// onFreePort runs start on port, or, when port is 0, on a free port — again on another one if the
// first was taken between the check and the server binding it (by a program that does not reserve
// its ports with FreePort).
func onFreePort(port int, start func(port int) error) error {
	if port != 0 {
		return start(port)
	}
	var err error
	for range 5 {
		var p int
		if p, err = FreePort(); err != nil {
			return err
		}
		if err = start(p); err == nil || !strings.Contains(err.Error(), "in use") {
			return err
		}
	}
	return err
}

// DataDir is the server's data directory.
func (m *MariaDB) DataDir() string { return filepath.Join(m.opts.Dir, "data") }

func (m *MariaDB) tmpDir() string { return filepath.Join(m.opts.Dir, "tmp") }

// Socket is the server's unix socket.
func (m *MariaDB) Socket() string { return filepath.Join(m.opts.Dir, "s.sock") }

// DSN is a go-sql-driver DSN for root over TCP to database db (may be empty).
func (m *MariaDB) DSN(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", m.Port, db)
}

// Args are the mariadbd arguments used to start the server.
func (m *MariaDB) Args() []string {
	args := []string{
		"--no-defaults", // must come first
		"--datadir=" + m.DataDir(),
		"--socket=" + m.Socket(),
		"--pid-file=" + filepath.Join(m.opts.Dir, "mariadbd.pid"),
		"--log-error=" + filepath.Join(m.opts.Dir, "error.log"),
		"--tmpdir=" + m.tmpDir(),
		"--port=" + strconv.Itoa(m.opts.Port),
		"--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--auto-increment-increment=" + strconv.Itoa(m.opts.Increment),
		"--auto-increment-offset=" + strconv.Itoa(m.opts.Offset),
		"--innodb-flush-log-at-trx-commit=1",
		"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=48M",
		"--max-connections=1000",
		"--skip-log-bin",
	}
	if g := m.opts.Galera; g != nil {
		args = append(args,
			"--binlog-format=ROW",
			"--innodb-autoinc-lock-mode=2",
			"--wsrep-on=ON",
			"--wsrep-provider="+galeraProvider,
			"--wsrep-cluster-name=ticketd-test",
			"--wsrep-cluster-address="+g.Cluster,
			"--wsrep-node-name="+g.Name,
			fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", g.GcommPort),
			fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=32M;"+
				"evs.suspect_timeout=PT%dS;evs.inactive_timeout=PT%dS", g.GcommPort, g.ISTPort,
				int(GaleraSuspectTimeout.Seconds()), int(GaleraInactiveTimeout.Seconds())),
			"--wsrep-sst-method=rsync",
			fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", g.SSTPort),
			"--wsrep-auto-increment-control=OFF")
		if g.Bootstrap {
			args = append(args, "--wsrep-new-cluster")
		}
	}
	if u := m.user(); u != "" {
		args = append(args, "--user="+u)
	}
	return append(args, m.opts.ExtraArgs...)
}

// GaleraSuspectTimeout and GaleraInactiveTimeout are the test clusters' evs.suspect_timeout and
// evs.inactive_timeout. A node that dies is evicted after the first when the others agree, after the
// second at the latest (either plus up to evs.inactive_check_period, 1 s, and the view change), and
// the cluster's writes wait until then: 3 s instead of the default 5 s, still long enough that nodes
// starved of CPU on a busy test machine are not taken for dead.
const (
	GaleraSuspectTimeout  = 3 * time.Second
	GaleraInactiveTimeout = 6 * time.Second
)

// galeraProvider is where Debian's galera-4 package puts the replication library.
const galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// user is the system user mariadbd runs as when started by root: root for a standalone server, mysql
// for a Galera node, whose state transfers run an rsync daemon that would otherwise write as nobody.
func (m *MariaDB) user() string {
	switch {
	case os.Geteuid() != 0:
		return ""
	case m.opts.Galera != nil:
		return "mysql"
	}
	return "root"
}

func (m *MariaDB) install(ctx context.Context) error {
	// Its own tmpdir: concurrent installs sharing /tmp have been seen to remove each other's temporary tables.
	if err := m.ownDirs(); err != nil {
		return err
	}
	args := []string{"--no-defaults", "--datadir=" + m.DataDir(), "--tmpdir=" + m.tmpDir(),
		"--auth-root-authentication-method=normal", "--skip-test-db"}
	if u := m.user(); u != "" {
		args = append(args, "--user="+u)
	}
	out, err := exec.CommandContext(ctx, "mariadb-install-db", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mariadb-install-db in %s: %w\n%s", m.DataDir(), err, lastLines(string(out), 60))
	}
	return nil
}

// Start starts mariadbd on the existing data directory and waits until it answers on TCP.
func (m *MariaDB) Start(ctx context.Context) error {
	if m.Alive() {
		return fmt.Errorf("mariadbd on port %d already runs as pid %d", m.Port, m.Pid)
	}
	cmd := exec.Command("mariadbd", m.Args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a ^C to the test run is not sent to the server
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mariadbd: %w", err)
	}
	m.cmd, m.Pid = cmd, cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it, so a killed server does not linger as a zombie
	if err := m.waitReady(ctx, 90*time.Second); err != nil {
		_ = m.Kill()
		log, _ := os.ReadFile(filepath.Join(m.opts.Dir, "error.log"))
		return fmt.Errorf("mariadbd on port %d did not answer: %w\n%s", m.Port, err, lastLines(string(log), 20))
	}
	if m.opts.Galera != nil {
		m.opts.Galera.Bootstrap = false // from now on it rejoins the cluster
	}
	return nil
}

func (m *MariaDB) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if !m.Alive() {
			return errors.New("process exited")
		}
		db, err := sql.Open("mysql", m.DSN("")+"?timeout=1s")
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err = db.PingContext(pctx)
			if err == nil && m.opts.Galera != nil {
				// A node serves once it has caught up with the cluster.
				var name, state string
				if err = db.QueryRowContext(pctx, "SHOW STATUS LIKE 'wsrep_local_state_comment'").Scan(&name, &state); err == nil && state != "Synced" {
					err = fmt.Errorf("Galera node %s", state)
				}
			}
			cancel()
			db.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("timed out after %s: %v", limit, last)
}

// Client returns a command running prog — the mariadb client or mariadb-dump — against the server as
// root over TCP, with args after the connection options.
func (m *MariaDB) Client(ctx context.Context, prog string, args ...string) *exec.Cmd {
	base := []string{"--protocol=TCP", "--host=127.0.0.1", "--port=" + strconv.Itoa(m.Port), "--user=root"}
	return exec.CommandContext(ctx, prog, append(base, args...)...)
}

// Alive reports whether the server process runs (a zombie counts as dead).
func (m *MariaDB) Alive() bool { return m.Pid != 0 && PidAlive(m.Pid) }

// Kill sends SIGKILL, as a crash would, and waits until the process is gone and its port free.
func (m *MariaDB) Kill() error { return m.signal(syscall.SIGKILL) }

// Stop shuts the server down cleanly (SIGTERM) and waits until the process is gone and its port free.
func (m *MariaDB) Stop() error { return m.signal(syscall.SIGTERM) }

func (m *MariaDB) signal(sig syscall.Signal) error {
	if !m.Alive() {
		return nil
	}
	if err := syscall.Kill(m.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for m.Alive() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(m.Pid, syscall.SIGKILL)
			return fmt.Errorf("mariadbd pid %d did not exit after %v", m.Pid, sig)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return awaitPortFree(m.Port)
}

// RedisOptions configures a throwaway Redis.
type RedisOptions struct {
	Dir  string
	Port int
	// Volatile turns the append-only file off (for testing that ticketd refuses such an instance).
	Volatile bool
}

// Redis is a running throwaway Redis.
type Redis struct {
	opts RedisOptions
	Port int
	Pid  int
}

// StartRedis starts redis-server with AOF and appendfsync always (unless Volatile) and waits for PONG.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	r := &Redis{opts: opts}
	err := onFreePort(opts.Port, func(port int) error {
		r.opts.Port, r.Port = port, port
		return r.Start(ctx)
	})
	return r, err
}

// Addr is host:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.Port) }

// Dir is the server's directory: its append-only files live in Dir()/appendonlydir.
func (r *Redis) Dir() string { return r.opts.Dir }

// Start starts redis-server and waits until it answers PING.
func (r *Redis) Start(ctx context.Context) error {
	aof := []string{"--appendonly", "yes", "--appendfsync", "always"}
	if r.opts.Volatile {
		aof = []string{"--appendonly", "no"}
	}
	args := append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", r.opts.Dir,
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(r.opts.Dir, "redis.log")}, aof...)
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.Pid = cmd.Process.Pid
	go func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := redisPing(r.Addr()); err == nil {
			return nil
		} else if time.Now().After(deadline) || !PidAlive(r.Pid) {
			_ = r.Kill()
			log, _ := os.ReadFile(filepath.Join(r.opts.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", r.Addr(), err, lastLines(string(log), 20))
		}
		select {
		case <-ctx.Done():
			_ = r.Kill()
			return ctx.Err()
		case <-time.After(30 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL and waits until the process is gone and its port free.
func (r *Redis) Kill() error {
	if r.Pid == 0 || !PidAlive(r.Pid) {
		return nil
	}
	_ = syscall.Kill(r.Pid, syscall.SIGKILL)
	for PidAlive(r.Pid) {
		time.Sleep(10 * time.Millisecond)
	}
	return awaitPortFree(r.Port)
}

// awaitPortFree waits until a server's port on 127.0.0.1 can be bound again. The kernel can release a
// killed server's listening socket a moment after the process is reaped (seen here: about a
// millisecond), and a server started on the port in that moment fails with "address already in use".
func awaitPortFree(port int) error {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return l.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testservers: port %s still in use 10s after its server exited: %w", addr, err)
		}
		time.Sleep(time.Millisecond)
	}
}

func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// PidAlive reports whether pid names a running process. It reads /proc/PID/stat because a killed
// process can linger as a zombie that kill(pid, 0) still reports. A zombie counts as dead only once its
// other threads have exited too: the main thread of a killed server can be a zombie while the others
// still hold its files, its listening socket among them.
func PidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	if state := s[i+2]; state != 'Z' && state != 'X' {
		return true
	}
	threads, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err == nil && len(threads) > 1
}

// FreePort returns a free loopback port that stays this process's for as long as it runs: a server
// killed and started again on it finds it free. It is picked below the range the kernel hands to
// outgoing connections (net.ipv4.ip_local_port_range), so no client socket takes it while the server
// is down, and reserved with a lock file that every process using FreePort honours, so no other test
// server picks it either.
func FreePort() (int, error) {
	low := ephemeralLow()
	const first = 10000
	if low <= first+1000 {
		return 0, fmt.Errorf("testservers: the kernel hands out ports from %d for outgoing connections, leaving none below it", low)
	}
	dir := filepath.Join(os.TempDir(), "ticketd-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, err
	}
	for range 200 {
		port := first + rand.IntN(low-first)
		if reservePort(dir, port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("testservers: no free port found between %d and %d", first, low-1)
}

// reservedPorts keeps the lock files of this process's ports open: the locks last until it exits.
var reservedPorts struct {
	sync.Mutex
	files []*os.File
}

// reservePort takes port if no process holds its lock file and nothing listens on it.
func reservePort(dir string, port int) bool {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		f.Close()
		return false
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		f.Close() // in use by something else; its lock goes with the file
		return false
	}
	l.Close()
	reservedPorts.Lock()
	reservedPorts.files = append(reservedPorts.files, f)
	reservedPorts.Unlock()
	return true
}

// ephemeralLow is the first port the kernel hands to outgoing connections (32768 when unreadable).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StartPair starts the Flickr ticket pair in dir/a and dir/b, in parallel: auto_increment_increment 2,
// server a at offset 1 (odd IDs) and server b at offset 2 (even IDs). If either fails, both are
// stopped.
func StartPair(ctx context.Context, dir string) ([2]*MariaDB, error) {
	return StartPairWith(ctx, dir, nil)
}

// StartPairWith is StartPair with extra mariadbd arguments for server i (0 or 1) from extra, when it
// is not nil.
func StartPairWith(ctx context.Context, dir string, extra func(i int) []string) ([2]*MariaDB, error) {
	var pair [2]*MariaDB
	var errs [2]error
	var wg sync.WaitGroup
	for i := range pair {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := MariaDBOptions{Dir: filepath.Join(dir, string(rune('a'+i))), Increment: 2, Offset: i + 1}
			if extra != nil {
				opts.ExtraArgs = extra(i)
			}
			pair[i], errs[i] = StartMariaDB(ctx, opts)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		for _, m := range pair {
			if m != nil {
				_ = m.Kill()
			}
		}
		return [2]*MariaDB{}, err
	}
	return pair, nil
}

// Binlog are the mariadbd arguments of a server that keeps a binary log a replica can follow, as
// ticketd requires it (sync_binlog=1), with the given server_id.
func Binlog(serverID int) []string {
	return []string{"--log-bin", "--sync-binlog=1", "--binlog-format=ROW", fmt.Sprintf("--server-id=%d", serverID)}
}

// Options are the options the server was started with.
func (m *MariaDB) Options() MariaDBOptions { return m.opts }

// ownDirs gives the server's directories to the user it runs as (a Galera node run by root runs as
// mysql), and lets that user through the temporary directories above them.
func (m *MariaDB) ownDirs() error {
	if err := os.MkdirAll(m.tmpDir(), 0o755); err != nil {
		return err
	}
	if m.user() != "mysql" {
		return nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return fmt.Errorf("a Galera node runs as the mysql user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(filepath.Clean(m.opts.Dir)); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil {
			_ = os.Chmod(d, fi.Mode().Perm()|0o111)
		}
	}
	return filepath.Walk(m.opts.Dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// WipeData stops the server and empties its data directory, as a lost disk would. A Galera node
// started again on it rejoins its cluster by a full state transfer.
func (m *MariaDB) WipeData() error {
	if err := m.Kill(); err != nil {
		return err
	}
	if err := os.RemoveAll(m.DataDir()); err != nil {
		return err
	}
	if err := os.MkdirAll(m.DataDir(), 0o755); err != nil {
		return err
	}
	return m.ownDirs()
}

// StartGalera starts a Galera cluster of n nodes on loopback in dir/g1, dir/g2, …: automatic increment
// control off, auto_increment_increment n+1 (room for one more node), node i at offset i. The first
// node bootstraps the cluster; the others join it one after another by state transfer. If any fails,
// every node is stopped.
func StartGalera(ctx context.Context, dir string, n int) ([]*MariaDB, error) {
	if _, err := os.Stat(galeraProvider); err != nil {
		return nil, fmt.Errorf("Galera needs the galera-4 package (%s): %w", galeraProvider, err)
	}
	nodes := make([]*GaleraNode, n)
	var addrs []string
	for i := range nodes {
		var ports [3]int
		for j := range ports {
			p, err := FreePort()
			if err != nil {
				return nil, err
			}
			ports[j] = p
		}
		nodes[i] = &GaleraNode{Name: fmt.Sprintf("g%d", i+1), GcommPort: ports[0], ISTPort: ports[1], SSTPort: ports[2], Bootstrap: i == 0}
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	}
	var out []*MariaDB
	for i, g := range nodes {
		g.Cluster = "gcomm://" + strings.Join(addrs, ",")
		m, err := StartMariaDB(ctx, MariaDBOptions{Dir: filepath.Join(dir, g.Name), Increment: n + 1, Offset: i + 1, Galera: g})
		if err != nil {
			for _, o := range out {
				_ = o.Kill()
			}
			return nil, fmt.Errorf("Galera node %d: %w", i+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}
