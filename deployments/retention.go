package deployments

import (
	"context"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
)

// Log retention: Start runs purges at once and then every hour until Close.
// Logs of deployments that ended FAILED or CANCELLED more than
// Deps.LogRetention ago are deleted; LIVE deployments keep theirs (their app
// still logs). Then every account over the account log budget is brought
// within it (EnforceLogBudgets). SQLite's freed pages go back to the file
// system.

// retentionInterval is how often expired logs are looked for.
const retentionInterval = time.Hour

// PurgeLogs deletes the expired logs once and reclaims their space; it
// returns how many lines went. It does nothing when Deps.LogRetention is
// negative (logs kept forever).
func (s *Service) PurgeLogs(ctx context.Context) (int64, error) {
	if s.d.LogRetention < 0 {
		return 0, nil
	}
	n, err := s.store.LogDeleteFinished(ctx, s.clock.Now().Add(-s.d.LogRetention))
	if err != nil || n == 0 {
		return n, err
	}
	return n, db.ReclaimSpace(ctx, s.d.DB)
}

// startRetention runs PurgeLogs and EnforceLogBudgets now and hourly until
// stopRetention.
func (s *Service) startRetention() {
	if s.d.LogRetention < 0 && s.logs.Budget() < 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.retention = func() { cancel(); <-done }
	go func() {
		defer close(done)
		t := time.NewTicker(retentionInterval)
		defer t.Stop()
		for {
			if _, err := s.PurgeLogs(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("delete expired deployment logs", "err", err)
			}
			if _, err := s.EnforceLogBudgets(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("delete deployment logs over the account budget", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// stopRetention ends the purges (waiting for one under way to stop).
func (s *Service) stopRetention() {
	if s.retention != nil {
		s.retention()
		s.retention = nil
	}
}

// EnforceLogBudgets brings every account whose logs are over the account
// budget within it (see the package's log budget) and returns how many
// deployments' logs were deleted. The hourly retention pass runs it.
func (s *Service) EnforceLogBudgets(ctx context.Context) (int, error) {
	budget := s.logs.Budget()
	if budget < 0 {
		return 0, nil
	}
	owners, err := s.store.LogOwnersOver(ctx, budget)
	if err != nil {
		return 0, err
	}
	return s.logs.PruneOwners(ctx, owners)
}

// LogUsage returns the size of the owner's stored log messages and the
// account log budget (0: none), for GET /usage.
func (s *Service) LogUsage(ctx context.Context, owner string) (used, budget int64, err error) {
	used, err = s.store.LogBytesOwned(ctx, owner)
	return used, max(s.logs.Budget(), 0), err
}
