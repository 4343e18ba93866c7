package plans

import "context"

// Seed is Start, reporting whether it created the plans (for tests).
func (s *Service) Seed(ctx context.Context) (bool, error) { return s.seed(ctx) }
