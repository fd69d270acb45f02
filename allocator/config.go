package allocator

import (
	"errors"
	"fmt"
	"strings"
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
