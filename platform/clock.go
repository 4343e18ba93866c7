package platform

import (
	"log/slog"
	"time"
)

// Clock tells the time. Tests inject a fixed or stepping clock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, in UTC.
type SystemClock struct{}

// Now returns the current UTC time.
func (SystemClock) Now() time.Time { return time.Now().UTC() }

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

// Defaults fills what a module's Deps left nil: clock with the system clock,
// logger with one that discards.
func Defaults(clock *Clock, logger **slog.Logger) {
	if *clock == nil {
		*clock = SystemClock{}
	}
	if *logger == nil {
		*logger = slog.New(slog.DiscardHandler)
	}
}
