package deployments

// StartListCache starts s's list cache listener (Postgres), which Start
// starts with the engine (the tests start the engine apart).
func StartListCache(s *Service) { s.lists.Start() }

// ListCacheLive reports whether s's list cache serves (on Postgres: once its
// listener has proven its connection).
func ListCacheLive(s *Service) bool { return s.lists.Live() }

// StatusCacheLive reports whether s's cache of finished deployments (kept
// with the list cache) serves.
func StatusCacheLive(s *Service) bool { return s.finished.Live() }
