package server

import (
	"errors"
	"testing"
	"time"

	"github.com/ticketd/ticketd/allocator"
	"github.com/ticketd/ticketd/allocator/allocatortest"
)

// TestConfigRule: zero means the default, a negative field is ErrInvalidConfig naming it, and New
// refuses it; a negative HedgeDelay means never hedge and is valid.
func TestConfigRule(t *testing.T) {
	check := func(c Config) error {
		err := c.withDefaults().validate()
		if err != nil {
			c.Backend, c.Auth = struct{ allocator.Backend }{}, Auth{Disabled: true}
			if _, nerr := New(c); !errors.Is(nerr, allocator.ErrInvalidConfig) {
				t.Errorf("New(%+v): %v, want ErrInvalidConfig", c, nerr)
			}
		}
		return err
	}
	allocatortest.ConfigRule(t, check, []allocatortest.ConfigCase[Config]{
		{Name: "zero", Config: Config{}, Want: ""},
		{Name: "never hedge", Config: Config{Cache: CacheConfig{HedgeDelay: -1}}, Want: ""},
		{Name: "RateLimit", Config: Config{RateLimit: -1}, Want: "RateLimit -1"},
		{Name: "RateBurst", Config: Config{RateBurst: -1}, Want: "RateBurst -1"},
		{Name: "AuthFailureBurst", Config: Config{AuthFailureBurst: -1}, Want: "AuthFailureBurst -1"},
		{Name: "AuthFailureRate", Config: Config{AuthFailureRate: -0.5}, Want: "AuthFailureRate -0.5"},
		{Name: "MaxConns", Config: Config{MaxConns: -1}, Want: "MaxConns -1"},
		{Name: "ReadHeaderTimeout", Config: Config{ReadHeaderTimeout: -time.Second}, Want: "ReadHeaderTimeout -1s"},
		{Name: "ReadTimeout", Config: Config{ReadTimeout: -time.Second}, Want: "ReadTimeout -1s"},
		{Name: "WriteTimeout", Config: Config{WriteTimeout: -time.Second}, Want: "WriteTimeout -1s"},
		{Name: "IdleTimeout", Config: Config{IdleTimeout: -time.Second}, Want: "IdleTimeout -1s"},
		{Name: "MaxHeaderBytes", Config: Config{MaxHeaderBytes: -1}, Want: "MaxHeaderBytes -1"},
		{Name: "ShutdownTimeout", Config: Config{ShutdownTimeout: -time.Second}, Want: "ShutdownTimeout -1s"},
		{Name: "Cache.Target", Config: Config{Cache: CacheConfig{Target: -time.Second}}, Want: "CacheConfig: Target -1s"},
		{Name: "Cache.MinSegment", Config: Config{Cache: CacheConfig{MinSegment: -1}}, Want: "MinSegment -1"},
		{Name: "Cache.MaxSegment", Config: Config{Cache: CacheConfig{MaxSegment: -1}}, Want: "MaxSegment -1"},
		{Name: "Cache.PrefetchAt", Config: Config{Cache: CacheConfig{PrefetchAt: -0.1}}, Want: "PrefetchAt -0.1"},
		{Name: "Cache.PrefetchAt of 1", Config: Config{Cache: CacheConfig{PrefetchAt: 1}}, Want: "PrefetchAt 1 must be below 1"},
		{Name: "Cache.SettingsTTL", Config: Config{Cache: CacheConfig{SettingsTTL: -time.Second}}, Want: "SettingsTTL -1s"},
		{Name: "Cache.FetchTimeout", Config: Config{Cache: CacheConfig{FetchTimeout: -time.Second}}, Want: "FetchTimeout -1s"},
		{Name: "Cache.MaxAhead", Config: Config{Cache: CacheConfig{MaxAhead: -1}}, Want: "MaxAhead -1"},
	})
	c := Config{}.withDefaults()
	if c.RateBurst != 1 || c.ReadHeaderTimeout != 5*time.Second || c.ReadTimeout != 10*time.Second ||
		c.WriteTimeout != 15*time.Second || c.IdleTimeout != 120*time.Second || c.MaxHeaderBytes != 16<<10 ||
		c.ShutdownTimeout != 30*time.Second || c.AuthFailureBurst != 30 || c.AuthFailureRate != 0.1 || c.MaxConns != 4096 {
		t.Errorf("defaults %+v", c)
	}
	cc := CacheConfig{}.withDefaults()
	if cc.Target != 10*time.Second || cc.MinSegment != 10_000 || cc.MaxSegment != 1<<24 || cc.PrefetchAt != 0.2 ||
		cc.SettingsTTL != 5*time.Second || cc.FetchTimeout != 30*time.Second || cc.MaxAhead != 8 {
		t.Errorf("cache defaults %+v", cc)
	}
}
