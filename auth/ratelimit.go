package auth

import (
	"context"

	"github.com/keelson-dev/keelson/auth/internal/ratelimit"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/uptrace/bun"
)

// Limit is a token bucket (Max attempts at once, refilled over Per; zero: the
// default; negative Max: unlimited), as auth/internal/ratelimit keeps it.
type Limit = ratelimit.Limit

// allow spends one attempt of key's bucket or answers 429. An empty key (no
// client address known, e.g. a direct call) is not limited.
func (s *Service) allow(ctx context.Context, key, prefix string, lim Limit) error {
	if key == "" {
		return nil
	}
	ok, wait, err := s.limiter.Allow(ctx, prefix+key, lim)
	if err != nil {
		return err
	}
	if !ok {
		return platform.RateLimited("too many attempts; try again later", wait)
	}
	return nil
}

// refund gives an attempt back; a failure only costs the user an attempt.
func (s *Service) refund(ctx context.Context, key, prefix string, lim Limit) {
	if key == "" {
		return
	}
	if err := s.limiter.Refund(ctx, prefix+key, lim); err != nil {
		s.log.WarnContext(ctx, "rate limit refund failed", "err", err)
	}
}

// record writes the audit row of an action on userID's account, in idb (the
// actor is the caller, or userID when nobody is signed in: a login).
func (s *Service) record(ctx context.Context, idb bun.IDB, userID, action, summary string) error {
	return audit.Record(ctx, s.d.Audit, idb, audit.Entry{Action: action, ResourceType: "account", ResourceID: userID,
		OwnerID: userID, ActorID: userID, Summary: summary})
}
