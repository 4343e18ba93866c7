// Package idlock serializes work on one deployment's workspace, for both
// runtimes (deployments/process and deployments/container).
package idlock

import "sync"

// Locks is a mutex per id, held only while someone holds or waits for it.
// The zero value is ready to use.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// Lock locks id and returns its unlock.
func (s *Locks) Lock(id string) (unlock func()) {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*idLock{}
	}
	l := s.locks[id]
	if l == nil {
		l = &idLock{}
		s.locks[id] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
}
