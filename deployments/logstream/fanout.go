package logstream

import "sync/atomic"

// Fan-out: live subscribers of a deployment's lines; publishing never
// blocks, a subscriber that falls behind is dropped and refills from the
// database.

func (l *Hub) publish(deploymentID string, ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.publishLocked(deploymentID, ev)
}

// publishLocked publishes ev and answers it as published (lines stored
// meanwhile may have joined it, see pass.go).
func (l *Hub) publishLocked(deploymentID string, ev Event) Event {
	lagged, ev := l.fanOut(deploymentID, l.subs[deploymentID], ev)
	for _, s := range lagged {
		if _, ok := l.subs[deploymentID][s]; !ok {
			continue // closed while a pass ran (pass.go)
		}
		// Never block the producer: drop the slow stream; it refills from the database.
		s.lagged = true
		delete(l.subs[deploymentID], s)
		close(s.ch)
	}
	if len(l.subs[deploymentID]) == 0 {
		delete(l.subs, deploymentID)
		delete(l.published, deploymentID)
	}
	return ev
}

// Event is what a Subscription receives: stored lines in sequence order,
// or Done when the deployment reached a terminal status.
type Event struct {
	Lines []*Line // read-only, shared between subscribers
	Done  bool
	Gone  bool // with Done: the deployment was deleted
}

// Subscription receives a deployment's lines as they are stored. C is closed
// when the subscription is dropped for lagging (Lagged), closed, or Logs closes.
type Subscription struct {
	C      <-chan Event
	ch     chan Event
	logs   *Hub
	id     string
	lagged bool // guarded by logs.mu

	st      *stream      // written to directly when idle (direct.go); nil: never
	pending atomic.Int32 // events queued on ch and not yet handled by st
	// sent is the last line handed over (published before it subscribed,
	// at first): a line at or before it is not handed over again (pass.go).
	// Only the fan-out touches it.
	sent int64
}

// Subscribe starts receiving the deployment's new lines.
func (l *Hub) Subscribe(deploymentID string) *Subscription { return l.subscribe(deploymentID, nil) }

// subscribe subscribes st (nil: a plain Subscription).
func (l *Hub) subscribe(deploymentID string, st *stream) *Subscription {
	ch := make(chan Event, l.cfg.SubscriberBuffer)
	s := &Subscription{C: ch, ch: ch, logs: l, id: deploymentID, st: st}
	l.qmu.RLock()
	closed := l.closed
	l.qmu.RUnlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if closed {
		close(ch)
		return s
	}
	if l.subs[deploymentID] == nil {
		l.subs[deploymentID] = map[*Subscription]struct{}{}
	}
	// Lines published so far are stored: a stream reads them from the table.
	s.sent = l.published[deploymentID]
	l.subs[deploymentID][s] = struct{}{}
	return s
}

// Lagged reports whether the subscription was dropped because it fell behind.
func (s *Subscription) Lagged() bool {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return s.lagged
}

// Close stops the subscription. Idempotent.
func (s *Subscription) Close() {
	l := s.logs
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.subs[s.id][s]; ok {
		delete(l.subs[s.id], s)
		if len(l.subs[s.id]) == 0 {
			delete(l.subs, s.id)
			delete(l.published, s.id)
		}
		if l.passID == s.id {
			// A pass may be writing to it: its channel is closed after.
			l.closeAfterPass = append(l.closeAfterPass, s)
		} else {
			close(s.ch)
		}
	}
}
