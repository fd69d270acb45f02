package allocator

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalidConfig means a configuration cannot be used: a required field is missing, or a field holds
// a value it cannot take. Every configuration in ticketd follows one rule: the zero value of a field
// means its default, and a negative value is an error that names the field.
var ErrInvalidConfig = errors.New("allocator: invalid configuration")

// Field is one numeric field of a configuration, for CheckConfig.
type Field struct {
	name     string
	negative bool
	shown    string
}

// Setting is the field name holding v: a duration, a count or a rate.
func Setting[T ~int | ~int64 | ~float64](name string, v T) Field {
	return Field{name: name, negative: v < 0, shown: fmt.Sprint(v)}
}

// CheckConfig applies the rule to the fields of owner's configuration (owner names it in the error,
// e.g. "mysql.Config"): ErrInvalidConfig naming each negative field, or nil when none is.
func CheckConfig(owner string, fields ...Field) error {
	var bad []string
	for _, f := range fields {
		if f.negative {
			bad = append(bad, fmt.Sprintf("%s %s", f.name, f.shown))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s: must not be negative (zero means the default)", ErrInvalidConfig, owner, strings.Join(bad, ", "))
}

// Default sets *field to def when it holds its zero value: the first half of the rule.
func Default[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Failover is the part of a configuration that every backend of several servers shares (mysql.Config
// and redis.Config embed it): how long one server and a whole call are tried, how long a failed server
// is skipped, how often servers are checked again, and what is cached. Like every configuration, the
// zero value of each field means its default and a negative value is refused.
type Failover struct {
	// AttemptTimeout bounds one attempt on one server. Default 2s.
	AttemptTimeout time.Duration
	// Timeout bounds a whole lease, failover included: until it passes, a lease that every server
	// failed waits and tries them again. Default 5s.
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound how long a failed server is skipped before it is tried again; the
	// wait doubles with each failure. Default 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// ProbeInterval is how often a background check retries servers that are down. Default 1s.
	ProbeInterval time.Duration
	// WatermarkInterval is how often each server's high-water marks are written to its peers and read
	// back (the restored-state guard); they are also written on Close. Default 2s.
	WatermarkInterval time.Duration
	// SettingsTTL is how long namespace settings (default size, TTL) are cached. Default 2s.
	SettingsTTL time.Duration
	// MaxConns bounds each server's connection pool. Default 32.
	MaxConns int
}

// WithDefaults fills the zero fields with their defaults.
func (f Failover) WithDefaults() Failover {
	Default(&f.AttemptTimeout, 2*time.Second)
	Default(&f.Timeout, 5*time.Second)
	Default(&f.MinBackoff, 100*time.Millisecond)
	Default(&f.MaxBackoff, 5*time.Second)
	Default(&f.ProbeInterval, time.Second)
	Default(&f.WatermarkInterval, 2*time.Second)
	Default(&f.SettingsTTL, 2*time.Second)
	Default(&f.MaxConns, 32)
	return f
}

// Check refuses a negative field with ErrInvalidConfig naming it; owner names the configuration
// ("mysql.Config").
func (f Failover) Check(owner string) error {
	return CheckConfig(owner,
		Setting("AttemptTimeout", f.AttemptTimeout), Setting("Timeout", f.Timeout),
		Setting("MinBackoff", f.MinBackoff), Setting("MaxBackoff", f.MaxBackoff),
		Setting("ProbeInterval", f.ProbeInterval), Setting("WatermarkInterval", f.WatermarkInterval),
		Setting("SettingsTTL", f.SettingsTTL), Setting("MaxConns", f.MaxConns))
}
