package deployments

import "context"

// Log retention (logstream.Retention): Start deletes the logs of deployments
// that ended FAILED or CANCELLED more than Deps.LogRetention ago, then those
// over the account log budget, at once and then hourly until Close.

// PurgeLogs deletes the expired logs once and reclaims their space; it
// returns how many lines went. It does nothing when Deps.LogRetention is
// negative (logs kept forever).
func (s *Service) PurgeLogs(ctx context.Context) (int64, error) { return s.retention.Purge(ctx) }

// EnforceLogBudgets brings every account whose logs are over the account
// budget within it and returns how many deployments' logs were deleted. The
// hourly retention pass runs it.
func (s *Service) EnforceLogBudgets(ctx context.Context) (int, error) {
	return s.retention.EnforceBudgets(ctx)
}

// LogUsage returns the size of the owner's stored log messages and the
// account log budget (0: none), for GET /usage.
func (s *Service) LogUsage(ctx context.Context, owner string) (used, budget int64, err error) {
	used, err = s.store.LogBytesOwned(ctx, owner)
	return used, max(s.logs.Budget(), 0), err
}
