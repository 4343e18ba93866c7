package projects

// ListCacheLive reports whether s's list cache may serve (on Postgres: once
// its listener has proven its connection).
func ListCacheLive(s *Service) bool { return s.lists.Live() }

// RowCacheLive reports whether s's project row cache may serve.
func RowCacheLive(s *Service) bool { return s.rows.Live() }
