package client

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/ticketd/ticketd/internal/testenv"
)

// ticketdBin is the ticketd binary the end-to-end tests run, built once by TestMain; buildErr says why
// there is none.
var (
	ticketdBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	flag.Parse()
	cleanup := func() {}
	if skip := testenv.NoEndToEnd(); skip != "" {
		buildErr = fmt.Errorf("not built: %s", skip)
	} else {
		ticketdBin, cleanup, buildErr = testenv.BuildTicketd()
	}
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
