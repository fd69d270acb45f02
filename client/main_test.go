package client

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/ticketd/ticketd/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.RunWithTicketd(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
