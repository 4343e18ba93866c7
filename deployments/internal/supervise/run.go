package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// waitHealthy polls http://<upstream>/ until the app answers anything. An
// answer on the port of a ListenerChecker counts only once the listener is
// confirmed to be the app's: another process's fails the wait at once
// (ErrForeignListener), and one that cannot be told keeps it waiting.
func (a *app) waitHealthy(ctx context.Context, inst Instance) error {
	timeout := a.s.cfg.HealthTimeout
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	url := "http://" + inst.Upstream() + "/"
	interval := 10 * time.Millisecond
	var unsure error // why the last answer could not be counted as the app's
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		unsure = nil
		if res, err := a.s.health.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
			unsure = checkListener(inst)
			if unsure == nil {
				return nil
			}
			if errors.Is(unsure, ErrForeignListener) {
				return fmt.Errorf("what answers HTTP on port %d is not the app: %w", inst.Port(), unsure)
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-inst.Exited():
			t.Stop()
			e := inst.Exit()
			if e.Err != nil {
				return e.Err
			}
			return fmt.Errorf("the app exited before answering HTTP (%s); last output:\n%s", e.Text, a.out.Tail())
		case <-a.stopCh:
			t.Stop()
			return errors.New("the app was stopped while starting")
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-deadline.C:
			t.Stop()
			if unsure != nil {
				return fmt.Errorf("something answers HTTP on port %d, but it could not be confirmed to be the app within %s (%v); it is not routed; last output:\n%s",
					inst.Port(), timeout, unsure, a.out.Tail())
			}
			return fmt.Errorf("the app did not answer HTTP on port %d within %s; last output:\n%s",
				inst.Port(), timeout, a.out.Tail())
		case <-t.C:
		}
		interval = min(2*interval, 250*time.Millisecond)
	}
}

// checkListener is inst's CheckListener, nil for an instance without one.
func checkListener(inst Instance) error {
	if c, ok := inst.(ListenerChecker); ok {
		return c.CheckListener()
	}
	return nil
}

// supervise launches the app again when it exits on its own, with backoff,
// until Stop or too many crashes within the window.
func (a *app) supervise(inst Instance) {
	defer close(a.done)
	var crashes []time.Time
	for {
		var attrs []any
		if inst != nil {
			select {
			case <-a.stopCh:
				return
			case <-inst.Exited():
			}
			if a.isStopping() {
				return
			}
			e := inst.Exit()
			a.out.System(cmp.Or(e.Line, "the app exited ("+e.Text+")"))
			attrs = e.Attrs
			// Nothing of the app listens on its upstream now; until a
			// restart answers, its route answers 503 rather than lead to
			// whatever binds that port meanwhile.
			a.s.cfg.Ingress.Down(a.getSlug(), a.id)
		}
		now := a.s.cfg.Clock.Now()
		crashes = slices.DeleteFunc(crashes, func(t time.Time) bool { return now.Sub(t) > a.s.cfg.RestartWindow })
		crashes = append(crashes, now)
		if len(crashes) > a.s.cfg.MaxRestarts {
			a.giveUp(len(crashes))
			return
		}
		if !a.backOff(len(crashes), attrs) {
			return
		}
		var ok bool
		if inst, ok = a.relaunch(); !ok {
			return
		}
	}
}

// giveUp stops restarting the app for good: its host no longer leads to a
// port it freed.
func (a *app) giveUp(crashes int) {
	cfg := a.s.cfg
	a.out.System(fmt.Sprintf("the app %s %d times within %s; not restarting it", cfg.GaveUp, crashes, cfg.RestartWindow))
	cfg.Logger.Error(cfg.Name+": app keeps crashing, gave up restarting it", "deployment", a.id, "crashes", crashes)
	if cfg.Ingress.Remove(a.getSlug(), a.id) {
		a.out.System("its route is removed")
	}
}

// backOff waits before the restart after the crashes-th crash in the
// window; false when the app is stopped meanwhile.
func (a *app) backOff(crashes int, attrs []any) bool {
	cfg := a.s.cfg
	delay := min(cfg.RestartBackoff<<(crashes-1), 30*time.Second)
	a.out.System(fmt.Sprintf("restarting the app in %s", delay))
	cfg.Logger.Warn(cfg.Name+": app exited, restarting", append([]any{"deployment", a.id, "in", delay}, attrs...)...)
	after, stop := a.s.after(delay)
	select {
	case <-a.stopCh:
		stop()
		return false
	case <-after:
	}
	return !a.isStopping()
}

// after is a timer on the clock: a fake clock's when it has one.
func (s *Supervisor) after(d time.Duration) (<-chan time.Time, func()) {
	if c, ok := s.cfg.Clock.(interface {
		After(time.Duration) <-chan time.Time
	}); ok {
		return c.After(d), func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// relaunch launches the app again and, once it answers (the same health
// wait as a start: on a shared port, from the app's own socket), routes it
// again, moved when its upstream changed; until then the route stays down
// (supervise) rather than lead to a port nothing of the app answers on. It returns
// the new instance (nil when none could be launched: a crash at once; one
// that did not answer is stopped and returned, so its end counts as a crash)
// and false when the app was stopped meanwhile.
func (a *app) relaunch() (Instance, bool) {
	cfg := a.s.cfg
	inst, err := a.l.Launch(context.Background(), true)
	if err != nil {
		a.out.System(err.Error())
		return inst, true
	}
	if a.adopt(inst, false) != nil { // stopping
		inst.Stop(context.Background(), cfg.StopGrace)
		return nil, false
	}
	if err := a.waitHealthy(context.Background(), inst); err != nil {
		inst.Stop(context.Background(), cfg.StopGrace)
		if a.isStopping() {
			return nil, false
		}
		a.out.System("the restarted app is not routed: " + err.Error())
		return inst, true
	}
	a.mu.Lock()
	up := inst.Upstream()
	moved := up != a.upstream
	a.upstream = up
	slug := a.slug
	a.mu.Unlock()
	if _, err := cfg.Ingress.Update(slug, a.id, up); err != nil {
		cfg.Logger.Error(cfg.Name+": rerouting a restarted app", "deployment", a.id, "err", err)
	}
	if line := cfg.Relaunched(up, moved); line != "" {
		a.out.System(line)
	}
	return inst, true
}

// Stop stops the app of deploymentID: it waits (up to StopGrace) for
// requests the ingress still has in flight to it, stops its instance, waits
// until its supervision ended and releases it. found is false when no app of
// deploymentID was starting or running.
func (s *Supervisor) Stop(ctx context.Context, deploymentID string) (found bool, err error) {
	s.mu.Lock()
	a := s.apps[deploymentID]
	s.mu.Unlock()
	if a == nil {
		return false, nil
	}
	a.mu.Lock()
	if !a.stopping {
		a.stopping = true
		close(a.stopCh)
	}
	inst := a.inst
	a.mu.Unlock()

	grace := s.cfg.StopGrace
	dctx, cancel := context.WithTimeout(ctx, grace)
	_ = s.cfg.Ingress.Drain(dctx, deploymentID)
	cancel()
	if inst != nil {
		inst.Stop(ctx, grace)
	}
	// The supervision ends first: a restart in flight finishes, then sees
	// stopCh, so nothing launches the app again once it is released.
	select {
	case <-a.done:
	case <-ctx.Done():
		return true, fmt.Errorf("stopping deployment %s: %w", deploymentID, context.Cause(ctx))
	}
	err = a.l.Release(ctx)
	s.forget(a)
	return true, err
}

// Shut refuses new apps and returns the ids of those starting or running.
func (s *Supervisor) Shut() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	ids := make([]string, 0, len(s.apps))
	for id := range s.apps {
		ids = append(ids, id)
	}
	return ids
}

// Route points the slug's host at upstream and returns the public URL.
func (s *Supervisor) Route(ctx context.Context, slug, deploymentID, upstream string) (string, error) {
	if err := s.cfg.Ingress.Set(slug, deploymentID, upstream); err != nil {
		return "", err
	}
	s.mu.Lock()
	a := s.apps[deploymentID]
	s.mu.Unlock()
	if a != nil {
		a.mu.Lock()
		a.slug = slug // a restart elsewhere must move this route
		a.mu.Unlock()
	}
	return s.cfg.Ingress.URL(slug), nil
}

// Unroute removes the slug's route if it still points at deploymentID.
func (s *Supervisor) Unroute(ctx context.Context, slug, deploymentID string) error {
	s.cfg.Ingress.Remove(slug, deploymentID)
	return nil
}
