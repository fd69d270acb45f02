package failover

import (
	"time"

	"github.com/ticketd/ticketd/allocator"
)

// Fields are the fields of a backend's configuration that every backend of several servers has, by
// address: one place for their defaults and their check.
type Fields struct {
	AttemptTimeout, Timeout, MinBackoff, MaxBackoff, ProbeInterval, WatermarkInterval, SettingsTTL *time.Duration
	MaxConns                                                                                       *int
}

// Defaults fills the zero fields: an attempt 2s, a call 5s, backoff from 100ms to 5s, a probe every
// second, water marks every 2s, settings cached 2s, 32 connections a server.
func (f Fields) Defaults() {
	allocator.Default(f.AttemptTimeout, 2*time.Second)
	allocator.Default(f.Timeout, 5*time.Second)
	allocator.Default(f.MinBackoff, 100*time.Millisecond)
	allocator.Default(f.MaxBackoff, 5*time.Second)
	allocator.Default(f.ProbeInterval, time.Second)
	allocator.Default(f.WatermarkInterval, 2*time.Second)
	allocator.Default(f.SettingsTTL, 2*time.Second)
	allocator.Default(f.MaxConns, 32)
}

// Check refuses a negative field with allocator.ErrInvalidConfig naming it; owner names the
// configuration ("mysql.Config").
func (f Fields) Check(owner string) error {
	return allocator.CheckConfig(owner,
		allocator.Setting("AttemptTimeout", *f.AttemptTimeout), allocator.Setting("Timeout", *f.Timeout),
		allocator.Setting("MinBackoff", *f.MinBackoff), allocator.Setting("MaxBackoff", *f.MaxBackoff),
		allocator.Setting("ProbeInterval", *f.ProbeInterval), allocator.Setting("WatermarkInterval", *f.WatermarkInterval),
		allocator.Setting("SettingsTTL", *f.SettingsTTL), allocator.Setting("MaxConns", *f.MaxConns))
}
