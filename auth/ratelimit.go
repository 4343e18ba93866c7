package auth

import (
	"context"

	"github.com/keelson-dev/keelson/auth/internal/ratelimit"
	"github.com/keelson-dev/keelson/platform"
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
