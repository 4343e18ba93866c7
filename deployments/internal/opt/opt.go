// Package opt turns stored zero values into the nulls of API answers (an
// empty string or a zero time is "not set": JSON null), in UTC. It is not
// where the answers are shaped (deployments.ViewOf).
package opt

import "time"

// Str is nil for "", else &s.
func Str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Time is nil for the zero time, else t in UTC.
func Time(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// UTC is nil for nil, else *t in UTC.
func UTC(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// EqualTime reports whether a and b are both nil or the same instant.
func EqualTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
