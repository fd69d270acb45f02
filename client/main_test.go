package client

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// ticketdBin is the ticketd binary the end-to-end tests run, built once by TestMain; buildErr says why
// there is none.
var (
	ticketdBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "client-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if skip := noEndToEnd(); skip != "" {
		buildErr = fmt.Errorf("not built: %s", skip)
	} else {
		bin := filepath.Join(dir, "ticketd")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ticketd").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ../cmd/ticketd: %v\n%s", err, out)
		} else {
			ticketdBin = bin
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// noEndToEnd says why this run cannot include the end-to-end tests, so TestMain need not build
// ticketd: -short, -run '^$' (benchmarks or fuzzing only), or a fuzzing worker process.
func noEndToEnd() string {
	if testing.Short() {
		return "-short"
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "^$" {
		return "-run '^$'"
	}
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return "fuzzing worker"
	}
	return ""
}
