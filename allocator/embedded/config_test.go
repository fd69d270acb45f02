package embedded_test

import (
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator/allocatortest"
	"github.com/ticketd/ticketd/allocator/embedded"
)

// TestConfigRule: a zero LockTimeout means the default, a negative one is ErrInvalidConfig naming it.
func TestConfigRule(t *testing.T) {
	check := func(c embedded.Config) error {
		s, err := embedded.Open(c)
		if err == nil {
			err = s.Close()
		}
		return err
	}
	allocatortest.ConfigRule(t, check, []allocatortest.ConfigCase[embedded.Config]{
		{Name: "zero", Config: embedded.Config{Dir: t.TempDir()}, Want: ""},
		{Name: "LockTimeout", Config: embedded.Config{Dir: t.TempDir(), LockTimeout: -time.Second}, Want: "LockTimeout -1s"},
	})
}
