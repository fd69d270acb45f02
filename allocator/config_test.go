package allocator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
)

func TestCheckConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields []allocator.Field
		want   string // "" when valid
	}{
		{"none", nil, ""},
		{"zero and positive", []allocator.Field{allocator.Setting("Timeout", time.Duration(0)), allocator.Setting("MaxConns", 3),
			allocator.Setting("Rate", 0.5)}, ""},
		{"a negative duration", []allocator.Field{allocator.Setting("Timeout", -time.Second)}, "Timeout -1s"},
		{"a negative count", []allocator.Field{allocator.Setting("MaxConns", -2)}, "MaxConns -2"},
		{"a negative rate", []allocator.Field{allocator.Setting("Rate", -0.5)}, "Rate -0.5"},
		{"each negative named", []allocator.Field{allocator.Setting("A", int64(-1)), allocator.Setting("B", 1),
			allocator.Setting("C", -time.Millisecond)}, "A -1, C -1ms"},
	} {
		err := allocator.CheckConfig("x.Config", tc.fields...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, allocator.ErrInvalidConfig) || !strings.Contains(err.Error(), "x.Config: "+tc.want+":")):
			t.Errorf("%s: error %v, want ErrInvalidConfig naming %q", tc.name, err, tc.want)
		}
	}
}

func TestDefault(t *testing.T) {
	timeout, conns, name := time.Duration(0), 7, ""
	allocator.Default(&timeout, time.Second)
	allocator.Default(&conns, 32)
	allocator.Default(&name, "ticketd")
	if timeout != time.Second || conns != 7 || name != "ticketd" {
		t.Fatalf("timeout %s, conns %d, name %q: want the default only where the field was zero", timeout, conns, name)
	}
}
