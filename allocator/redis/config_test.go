package redis

import (
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// TestConfigRule: zero means the default, a negative field is ErrInvalidConfig naming it, and so is a
// configuration without instances or with a bad address.
func TestConfigRule(t *testing.T) {
	addrs := []string{"127.0.0.1:1"}
	check := func(c Config) error { // what Open does first, before it connects to anything
		c = c.withDefaults()
		if err := c.validate(); err != nil {
			return err
		}
		s, err := build(c)
		if err == nil {
			s.closeClients()
		}
		return err
	}
	allocatortest.ConfigRule(t, check, []allocatortest.ConfigCase[Config]{
		{Name: "zero", Config: Config{Addrs: addrs}, Want: ""},
		{Name: "no address", Config: Config{}, Want: "no instance address"},
		{Name: "bad address", Config: Config{Addrs: []string{"redis://h:1/x"}}, Want: "redis://h:1/x"},
		{Name: "listed twice", Config: Config{Addrs: []string{"127.0.0.1:1", "redis://127.0.0.1:1"}}, Want: "listed twice"},
		{Name: "AttemptTimeout", Config: Config{Addrs: addrs, Failover: allocator.Failover{AttemptTimeout: -time.Second}}, Want: "AttemptTimeout -1s"},
		{Name: "Timeout", Config: Config{Addrs: addrs, Failover: allocator.Failover{Timeout: -1}}, Want: "Timeout -1ns"},
		{Name: "MinBackoff", Config: Config{Addrs: addrs, Failover: allocator.Failover{MinBackoff: -time.Millisecond}}, Want: "MinBackoff -1ms"},
		{Name: "MaxBackoff", Config: Config{Addrs: addrs, Failover: allocator.Failover{MaxBackoff: -time.Second}}, Want: "MaxBackoff -1s"},
		{Name: "ProbeInterval", Config: Config{Addrs: addrs, Failover: allocator.Failover{ProbeInterval: -time.Second}}, Want: "ProbeInterval -1s"},
		{Name: "WatermarkInterval", Config: Config{Addrs: addrs, Failover: allocator.Failover{WatermarkInterval: -time.Second}}, Want: "WatermarkInterval -1s"},
		{Name: "SettingsTTL", Config: Config{Addrs: addrs, Failover: allocator.Failover{SettingsTTL: -time.Second}}, Want: "SettingsTTL -1s"},
		{Name: "MaxConns", Config: Config{Addrs: addrs, Failover: allocator.Failover{MaxConns: -1}}, Want: "MaxConns -1"},
	})
	c := Config{Addrs: addrs}.withDefaults()
	if c.AttemptTimeout != 2*time.Second || c.Timeout != 5*time.Second || c.MinBackoff != 100*time.Millisecond ||
		c.MaxBackoff != 5*time.Second || c.ProbeInterval != time.Second || c.WatermarkInterval != 2*time.Second ||
		c.SettingsTTL != 2*time.Second || c.MaxConns != 32 || c.Stride != 1 || c.KeyPrefix != DefaultKeyPrefix {
		t.Errorf("defaults %+v", c)
	}
}
