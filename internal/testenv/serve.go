package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ticketd is the ticketd binary of this test binary, built by the first test that needs it, so that a
// run that needs none (no database, -short, fuzzing) does not build it.
var ticketd struct {
	once    sync.Once
	bin     string
	cleanup func()
	err     error
}

// Ticketd returns the ticketd command, built on the first call (without the race detector: it is the
// process under test, not the code under test) into a temporary directory that RunWithTicketd
// removes.
func Ticketd(t testing.TB) string {
	t.Helper()
	ticketd.once.Do(func() { ticketd.bin, ticketd.cleanup, ticketd.err = buildTicketd() })
	if ticketd.err != nil {
		t.Fatalf("no ticketd binary: %v", ticketd.err)
	}
	return ticketd.bin
}

func buildTicketd() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "ticketd-bin")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "ticketd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/ticketd/ticketd/cmd/ticketd").CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build cmd/ticketd: %v\n%s", err, out)
	}
	return bin, cleanup, nil
}

// RunWithTicketd is a TestMain body for tests that run ticketd as a process (Ticketd, StartServe): it
// runs the tests, removes the binary if one was built, and returns the exit code.
func RunWithTicketd(m *testing.M) int {
	code := m.Run()
	if ticketd.cleanup != nil {
		ticketd.cleanup()
	}
	return code
}

// ticketdEnv is this process's environment without its TICKETD_* settings (so that none of the
// caller's shell leaks in), with env added.
func ticketdEnv(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TICKETD_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// TicketdCommand returns `ticketd ARGS` with env added to this process's environment without its
// TICKETD_* settings, not started: for a test that runs several at once.
func TicketdCommand(t testing.TB, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Ticketd(t), args...)
	cmd.Env = ticketdEnv(env)
	return cmd
}

// RunTicketd runs `ticketd ARGS` (migrate, say) with env and fails the test unless it exits 0; it
// returns what the command wrote.
func RunTicketd(t testing.TB, env []string, args ...string) string {
	t.Helper()
	out, err := TicketdCommand(t, env, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ticketd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Log is a process's JSON log as it is written: it keeps the lines, may be read while it is written,
// and notes the address of the first "listening" line.
type Log struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	part      []byte // the line begun and not yet ended
	addr, url string
	heard     chan struct{}
}

// NewLog returns an empty Log.
func NewLog() *Log { return &Log{heard: make(chan struct{})} }

// Write adds p to the log.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		var line struct{ Msg, Addr, URL string }
		if l.addr == "" && json.Unmarshal(l.part[:i], &line) == nil && line.Msg == "listening" && line.Addr != "" {
			l.addr, l.url = line.Addr, line.URL
			close(l.heard)
		}
		l.part = l.part[i+1:]
	}
	return len(p), nil
}

// String returns what was written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Listening is closed once a "listening" line was written.
func (l *Log) Listening() <-chan struct{} { return l.heard }

// Addr is the address ("host:port") of the "listening" line; empty before one.
func (l *Log) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// URL is the URL of the "listening" line, or "http://" and its address when the line has none.
func (l *Log) URL() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.url == "" && l.addr != "" {
		return "http://" + l.addr
	}
	return l.url
}

// Serve is a `ticketd serve` process that StartServe started.
type Serve struct {
	// URL is where it listens: "http://host:port".
	URL string

	cmd    *exec.Cmd
	log    *Log
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// StartServe runs `ticketd serve --listen 127.0.0.1:0 ARGS` (a later --listen wins) with env added to
// this process's environment, less its TICKETD_* settings, and waits for its "listening" log line. The
// process is killed when the test ends; its log is shown if the test failed.
func StartServe(t testing.TB, env []string, args ...string) *Serve {
	t.Helper()
	cmd := exec.Command(Ticketd(t), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = ticketdEnv(env)
	s := &Serve{cmd: cmd, log: NewLog(), exited: make(chan struct{})}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("ticketd serve log:\n%s", s.log)
		}
	})
	select {
	case <-s.log.Listening():
		s.URL = s.log.URL()
	case <-s.exited:
		t.Fatalf("ticketd serve exited at start: %v\n%s", s.err, s.log)
	case <-time.After(60 * time.Second):
		t.Fatalf("ticketd serve did not listen within 60s:\n%s", s.log)
	}
	return s
}

// Log returns what the process has logged so far.
func (s *Serve) Log() string { return s.log.String() }

// Signal sends sig to the process.
func (s *Serve) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Exited is closed once the process has exited.
func (s *Serve) Exited() <-chan struct{} { return s.exited }

// Err is the process's exit error once Exited is closed: nil when it exited 0.
func (s *Serve) Err() error {
	<-s.exited
	return s.err
}

// Stop sends SIGTERM and returns the exit error once the process is gone; it fails the test if the
// process is still running 60s later.
func (s *Serve) Stop(t testing.TB) error {
	t.Helper()
	_ = s.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return s.err
	case <-time.After(60 * time.Second):
		t.Fatal("ticketd serve did not stop within 60s of SIGTERM")
		return nil
	}
}

// Kill ends the process at once (SIGKILL: no graceful shutdown) and waits for it.
func (s *Serve) Kill() {
	_ = s.Signal(syscall.SIGKILL)
	<-s.exited
}
