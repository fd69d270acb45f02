package mysql

import (
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// TestConfigRule: zero means the default, a negative field is ErrInvalidConfig naming it, and so is a
// configuration without servers or with a bad DSN.
func TestConfigRule(t *testing.T) {
	dsn := []string{"u:p@tcp(127.0.0.1:1)/ticketd"}
	check := func(c Config) error { // what Open does first, before it connects to anything
		p, err := build(c)
		if err == nil {
			p.closeDBs()
		}
		return err
	}
	allocatortest.ConfigRule(t, check, []allocatortest.ConfigCase[Config]{
		{Name: "zero", Config: Config{DSNs: dsn}, Want: ""},
		{Name: "no DSN", Config: Config{}, Want: "no ticket server DSN"},
		{Name: "names for other servers", Config: Config{DSNs: dsn, Names: []string{"a", "b"}}, Want: "2 names for 1 servers"},
		{Name: "bad DSN", Config: Config{DSNs: []string{"tcp(::"}}, Want: "bad DSN"},
		{Name: "AttemptTimeout", Config: Config{DSNs: dsn, Failover: allocator.Failover{AttemptTimeout: -time.Second}}, Want: "AttemptTimeout -1s"},
		{Name: "Timeout", Config: Config{DSNs: dsn, Failover: allocator.Failover{Timeout: -1}}, Want: "Timeout -1ns"},
		{Name: "MinBackoff", Config: Config{DSNs: dsn, Failover: allocator.Failover{MinBackoff: -time.Millisecond}}, Want: "MinBackoff -1ms"},
		{Name: "MaxBackoff", Config: Config{DSNs: dsn, Failover: allocator.Failover{MaxBackoff: -time.Second}}, Want: "MaxBackoff -1s"},
		{Name: "ProbeInterval", Config: Config{DSNs: dsn, Failover: allocator.Failover{ProbeInterval: -time.Second}}, Want: "ProbeInterval -1s"},
		{Name: "WatermarkInterval", Config: Config{DSNs: dsn, Failover: allocator.Failover{WatermarkInterval: -time.Second}}, Want: "WatermarkInterval -1s"},
		{Name: "SettingsTTL", Config: Config{DSNs: dsn, Failover: allocator.Failover{SettingsTTL: -time.Second}}, Want: "SettingsTTL -1s"},
		{Name: "MaxConns", Config: Config{DSNs: dsn, Failover: allocator.Failover{MaxConns: -1}}, Want: "MaxConns -1"},
	})
	c := Config{DSNs: dsn}.withDefaults()
	if c.AttemptTimeout != 2*time.Second || c.Timeout != 5*time.Second || c.MinBackoff != 100*time.Millisecond ||
		c.MaxBackoff != 5*time.Second || c.ProbeInterval != time.Second || c.WatermarkInterval != 2*time.Second ||
		c.SettingsTTL != 2*time.Second || c.MaxConns != 32 {
		t.Errorf("defaults %+v", c)
	}
}
