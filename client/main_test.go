package client

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/ticketd/ticketd/internal/testenv"
)

// ticketd is the ticketd binary that the end-to-end tests and benchmarks run, built by the first of
// them that needs it, so that a run that needs none (no database, -short, fuzzing) does not build it.
var ticketd struct {
	once    sync.Once
	bin     string
	cleanup func()
	err     error
}

// ticketdBinary returns the ticketd binary, building it on first use.
func ticketdBinary(t testing.TB) string {
	t.Helper()
	ticketd.once.Do(func() { ticketd.bin, ticketd.cleanup, ticketd.err = testenv.BuildTicketd() })
	if ticketd.err != nil {
		t.Fatalf("no ticketd binary: %v", ticketd.err)
	}
	return ticketd.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ticketd.cleanup != nil {
		ticketd.cleanup()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
