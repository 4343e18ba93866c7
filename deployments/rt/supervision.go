package rt

import (
	"cmp"
	"time"
)

// Supervision is how a runtime watches the apps it runs: the health wait,
// the stop grace and the crash window. Both runtimes' Config embed it and
// hand it to their supervisor as it is.
type Supervision struct {
	// HealthTimeout is how long a started app may take to answer HTTP. Default 60s.
	HealthTimeout time.Duration
	// StopGrace is how long an app has between SIGTERM and SIGKILL. Default 10s.
	StopGrace time.Duration
	// MaxRestarts is how many crashes within RestartWindow are restarted
	// before the runtime gives up on an app. Default 5.
	MaxRestarts int
	// RestartWindow, see MaxRestarts. Default 5m.
	RestartWindow time.Duration
	// RestartBackoff is the first delay before restarting a crashed app; it
	// doubles per crash in the window, up to 30s. Default 500ms.
	RestartBackoff time.Duration
}

// WithDefaults fills the fields left zero.
func (s Supervision) WithDefaults() Supervision {
	s.HealthTimeout = cmp.Or(s.HealthTimeout, 60*time.Second)
	s.StopGrace = cmp.Or(s.StopGrace, 10*time.Second)
	s.MaxRestarts = cmp.Or(s.MaxRestarts, 5)
	s.RestartWindow = cmp.Or(s.RestartWindow, 5*time.Minute)
	s.RestartBackoff = cmp.Or(s.RestartBackoff, 500*time.Millisecond)
	return s
}
