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

// TestFailoverDefaultsAndCheck: every zero field of the shared part of the backends' configurations
// takes its default, a set field stays, and each negative field is named.
func TestFailoverDefaultsAndCheck(t *testing.T) {
	got := allocator.Failover{Timeout: 9 * time.Second}.WithDefaults()
	want := allocator.Failover{AttemptTimeout: 2 * time.Second, Timeout: 9 * time.Second, MinBackoff: 100 * time.Millisecond,
		MaxBackoff: 5 * time.Second, ProbeInterval: time.Second, WatermarkInterval: 2 * time.Second, SettingsTTL: 2 * time.Second,
		MaxConns: 32}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	if err := got.Check("x.Config"); err != nil {
		t.Fatalf("Check of the defaults: %v", err)
	}
	bad := allocator.Failover{AttemptTimeout: -1, Timeout: -1, MinBackoff: -1, MaxBackoff: -1, ProbeInterval: -1,
		WatermarkInterval: -1, SettingsTTL: -1, MaxConns: -1}
	err := bad.Check("x.Config")
	if !errors.Is(err, allocator.ErrInvalidConfig) {
		t.Fatalf("Check of negative fields: %v, want ErrInvalidConfig", err)
	}
	for _, name := range []string{"AttemptTimeout", "Timeout", "MinBackoff", "MaxBackoff", "ProbeInterval",
		"WatermarkInterval", "SettingsTTL", "MaxConns"} {
		if !strings.Contains(err.Error(), name+" -1") {
			t.Errorf("Check did not name %s: %v", name, err)
		}
	}
}
