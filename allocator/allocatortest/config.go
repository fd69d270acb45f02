package allocatortest

import (
	"errors"
	"strings"
	"testing"

	"github.com/ticketd/ticketd/allocator"
)

// ConfigCase is one configuration for ConfigRule. Want is empty when the configuration is valid, and
// otherwise what the error must say (the field and its value, "Timeout -1s").
type ConfigCase[C any] struct {
	Name   string
	Config C
	Want   string
}

// ConfigRule checks the rule every configuration follows: zero means the default, and a negative field
// is refused with allocator.ErrInvalidConfig naming it. check validates one configuration the way its
// package does.
func ConfigRule[C any](t *testing.T, check func(C) error, cases []ConfigCase[C]) {
	t.Helper()
	for _, tc := range cases {
		err := check(tc.Config)
		switch {
		case tc.Want == "" && err != nil:
			t.Errorf("%s: %v", tc.Name, err)
		case tc.Want != "" && (!errors.Is(err, allocator.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.Want)):
			t.Errorf("%s: error %v, want ErrInvalidConfig naming %q", tc.Name, err, tc.Want)
		}
	}
}
