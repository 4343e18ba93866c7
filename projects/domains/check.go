package domains

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
)

// verdict is a check's outcome for one domain.
type verdict struct {
	status, lastError string
	verifiedNow       bool
}

// evaluate runs the checks row's status calls for: ownership while pending,
// then routing. A lookup that failed keeps the status, saying so.
func (s *Service) evaluate(ctx context.Context, row *domainRow) verdict {
	ctx, cancel := context.WithTimeout(ctx, s.d.LookupTimeout)
	defer cancel()
	v := verdict{status: row.Status}
	if row.Status == StatusPending {
		f := s.checkOwnership(ctx, row.Hostname, row.Token)
		if !f.ok {
			v.lastError = f.problem
			return v
		}
		v.status, v.verifiedNow = StatusVerified, true
	}
	f := s.checkRouting(ctx, row.Hostname, row.Slug)
	switch {
	case f.ok:
		v.status, v.lastError = StatusActive, ""
	case f.transient:
		v.lastError = f.problem
	case v.status == StatusActive || v.status == StatusError:
		v.status, v.lastError = StatusError, f.problem
	default:
		v.lastError = f.problem
	}
	return v
}

// checkNow checks row's records and stores what was found.
func (s *Service) checkNow(ctx context.Context, row *domainRow) (*Domain, error) {
	v := s.evaluate(ctx, row)
	return s.apply(ctx, row, v)
}

// apply stores verdict v for row, if row's status did not change meanwhile
// (another replica's check); it tells the owner when the domain stopped or
// started being served.
func (s *Service) apply(ctx context.Context, row *domainRow, v verdict) (*Domain, error) {
	now := s.now()
	q := s.d.DB.NewUpdate().Model((*domainRow)(nil)).
		Set("status = ?", v.status).Set("last_error = ?", v.lastError).
		Set("checked_at = ?", now).Set("updated_at = ?", now).
		Where("id = ? AND status = ?", row.ID, row.Status)
	if v.verifiedNow {
		q = q.Set("verified_at = ?", now)
	}
	res, err := q.Exec(ctx)
	if err != nil {
		return nil, db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		// Changed (or deleted) meanwhile: answer what is stored now.
		cur := new(domainRow)
		if err := s.d.DB.NewSelect().Model(cur).Where("id = ?", row.ID).Scan(ctx); err != nil {
			if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
				return nil, platform.NotFound("domain not found")
			}
			return nil, err
		}
		return s.out(cur), nil
	}
	old := row.Status
	row.Status, row.LastError, row.CheckedAt, row.UpdatedAt = v.status, v.lastError, now, now
	if v.verifiedNow {
		row.VerifiedAt = &now
	}
	s.tellTransition(row, old)
	if (old == StatusActive) != (row.Status == StatusActive) {
		s.activeChanged(ctx, row.ProjectID)
	}
	return s.out(row), nil
}

// tellTransition mails the owner when row stopped or started being served.
func (s *Service) tellTransition(row *domainRow, old string) {
	switch {
	case old == StatusActive && row.Status == StatusError:
		s.d.Log.Info("domains: domain deactivated", "hostname", row.Hostname, "project_id", row.ProjectID, "reason", row.LastError)
		s.notify(row.OwnerID, "Your custom domain "+row.Hostname+" is no longer served",
			fmt.Sprintf("Keelson checked the DNS records of %s and they no longer point at Keelson:\n\n  %s\n\n"+
				"Until they do, Keelson does not serve %s for your project %s (so nobody else's service can be reached through a stale record). "+
				"It is served again at the next check after the records are back.\n", row.Hostname, row.LastError, row.Hostname, row.ProjectID))
	case old == StatusError && row.Status == StatusActive:
		s.d.Log.Info("domains: domain reactivated", "hostname", row.Hostname, "project_id", row.ProjectID)
		s.notify(row.OwnerID, "Your custom domain "+row.Hostname+" is served again",
			fmt.Sprintf("The DNS records of %s point at Keelson again, and your project %s is served on it again.\n", row.Hostname, row.ProjectID))
	}
}

// notify mails userID in the background (the caller does not wait on mail);
// Close waits for mails in flight.
func (s *Service) notify(userID, subject, text string) {
	s.mu.Lock()
	life, closed := s.life, s.closed
	if !closed {
		s.bg.Add(1)
	}
	s.mu.Unlock()
	if closed {
		s.d.Log.Warn("domains: shutting down; notice not mailed", "user_id", userID, "subject", subject)
		return
	}
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(life), time.Minute)
		defer cancel()
		if err := s.d.Notifier.Notify(ctx, userID, subject, text); err != nil {
			s.d.Log.WarnContext(ctx, "domains: notify owner", "user_id", userID, "subject", subject, "err", err)
		}
	}()
}

// CheckDue checks again every domain not checked for Deps.CheckInterval (on
// the injected clock) and returns how many it checked. Domains of projects
// that are gone are deleted; active domains of projects whose plan no longer
// includes custom domains go to error. Expired claim tokens are dropped.
func (s *Service) CheckDue(ctx context.Context) (int, error) {
	checked := 0
	for ctx.Err() == nil {
		var rows []domainRow
		due := s.now().Add(-s.d.CheckInterval)
		if err := s.d.DB.NewSelect().Model(&rows).Where("checked_at <= ?", due).
			Order("checked_at", "id").Limit(checkBatch).Scan(ctx); err != nil {
			return checked, db.Translate(err)
		}
		for i := range rows {
			if err := s.recheck(ctx, &rows[i]); err != nil {
				if ctx.Err() != nil {
					return checked, ctx.Err()
				}
				s.d.Log.WarnContext(ctx, "domains: re-check", "hostname", rows[i].Hostname, "err", err)
			}
			checked++
		}
		if len(rows) < checkBatch {
			break
		}
	}
	_, err := s.d.DB.NewDelete().Model((*claimRow)(nil)).Where("created_at < ?", s.now().Add(-claimTTL)).Exec(ctx)
	return checked, db.Translate(err)
}

// recheck is CheckDue's work on one domain.
func (s *Service) recheck(ctx context.Context, row *domainRow) error {
	p, err := s.d.Projects.Project(ctx, row.OwnerID, row.ProjectID)
	if errors.Is(err, platform.ErrNotFound) {
		s.d.Log.InfoContext(ctx, "domains: project gone; deleting its domain", "hostname", row.Hostname, "project_id", row.ProjectID)
		if _, err := s.d.DB.NewDelete().Model((*domainRow)(nil)).Where("id = ?", row.ID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		if row.Status == StatusActive {
			s.activeChanged(ctx, row.ProjectID)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !p.CustomDomains {
		v := verdict{status: row.Status, lastError: fmt.Sprintf("the plan %q of this project does not include custom domains; choose a plan with customDomains", p.PlanName)}
		if row.Status == StatusActive {
			v.status = StatusError
		}
		_, err := s.apply(ctx, row, v)
		return err
	}
	_, err = s.checkNow(ctx, row)
	return err
}

// Start runs the periodic re-check (every Deps.PollEvery, real time, it
// checks the domains due on the injected clock) until Close. ctx is the
// module's lifetime.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loop != nil {
		return errors.New("domains: already started")
	}
	s.life = ctx
	s.loop = platform.Every(ctx, s.d.PollEvery, false, nil, func(ctx context.Context) {
		if _, err := s.CheckDue(ctx); err != nil && ctx.Err() == nil {
			s.d.Log.ErrorContext(ctx, "domains: periodic check", "err", err)
		}
	})
	return nil
}

// Close stops the re-check and waits for it and for mails in flight (or ctx).
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	loop := s.loop
	s.closed = true // no notice starts after this: bg.Wait below sees them all
	s.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		loop.Stop()
		s.bg.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
