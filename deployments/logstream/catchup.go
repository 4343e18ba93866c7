package logstream

import (
	"context"
	"slices"
	"time"
)

// Cross-process catch-up: lines other processes stored (LinesStored,
// DeploymentEnded, Resync from deployments/pgnotify) are read back from the
// table and published in sequence order, gaps filled.

// publishStored publishes lines this process stored (one deployment, in
// sequence order). Lines another process stored before them and that were not
// published yet are read and published first, so subscribers see no gap.
func (l *Hub) publishStored(ctx context.Context, lines []*Line) {
	id := lines[0].DeploymentID
	p, known, subscribed := l.publishedMark(id)
	if !subscribed {
		return
	}
	if known && lines[0].Seq > p+1 {
		l.fill(ctx, id, p, lines[0].Seq-1)
	}
	l.publishLines(id, lines)
}

// fill reads the deployment's stored lines after seq after (up to upTo when
// upTo > 0) and publishes them.
func (l *Hub) fill(ctx context.Context, id string, after, upTo int64) {
	for {
		rows, err := l.store.LogList(ctx, ListParams{DeploymentID: id, AfterSeq: after, Limit: l.cfg.BatchSize})
		if err != nil {
			// The streams refill from the database themselves on the next gap or at the end.
			l.log.Warn("read deployment log lines stored elsewhere", "deployment", id, "err", err)
			return
		}
		lines := make([]*Line, 0, len(rows))
		for i := range rows {
			if upTo > 0 && rows[i].Seq > upTo {
				break
			}
			rows[i].frame = appendLogFrame(nil, &rows[i])
			lines = append(lines, &rows[i])
		}
		if len(lines) > 0 {
			if !l.publishLines(id, lines) {
				return
			}
			after = lines[len(lines)-1].Seq
		}
		if len(lines) < len(rows) || len(rows) < l.cfg.BatchSize {
			return
		}
	}
}

// publishLines publishes the lines after the deployment's published mark and
// raises the mark. It reports whether the deployment still has subscribers.
func (l *Hub) publishLines(id string, lines []*Line) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.subs[id]) == 0 {
		return false
	}
	if p, known := l.published[id]; known {
		for len(lines) > 0 && lines[0].Seq <= p {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return true
	}
	ev := l.publishLocked(id, Event{Lines: slices.Clip(lines)})
	if len(l.subs[id]) == 0 {
		return false
	}
	lines = ev.Lines
	l.published[id] = lines[len(lines)-1].Seq
	return true
}

// LinesStored tells l that lines of the deployment up to seq are stored,
// possibly by another process (a Postgres NOTIFY). If the deployment has
// subscribers here, the writer reads the lines after the last one it
// published and publishes them in order. It never blocks.
func (l *Hub) LinesStored(deploymentID string, seq int64) {
	l.mu.Lock()
	p, known := l.published[deploymentID]
	// Lines already published (e.g. this process stored them) are owed nothing.
	owed := (!known || seq > p) && l.oweLocked(deploymentID, remoteWork{upTo: seq})
	l.mu.Unlock()
	if owed {
		l.poke()
	}
}

// DeploymentEnded tells l that the deployment reached a terminal status,
// possibly in another process: its subscribers here get the lines stored so
// far, then Done. It never blocks.
func (l *Hub) DeploymentEnded(deploymentID string) {
	l.mu.Lock()
	owed := l.oweLocked(deploymentID, remoteWork{end: true})
	l.mu.Unlock()
	if owed {
		l.poke()
	}
}

// Resync makes the writer re-read the stored lines of every deployment that
// has subscribers here (for notifications lost while a listener reconnected).
// It never blocks.
func (l *Hub) Resync() {
	l.mu.Lock()
	owed := false
	for id := range l.subs {
		owed = l.oweLocked(id, remoteWork{resync: true}) || owed
	}
	l.mu.Unlock()
	if owed {
		l.poke()
	}
}

// oweLocked adds work to what the writer owes the deployment's subscribers
// here and reports whether it has any (if not, nothing is owed). l.mu is held.
func (l *Hub) oweLocked(id string, work remoteWork) bool {
	if len(l.subs[id]) == 0 {
		return false
	}
	l.remote[id] = l.remote[id].and(work)
	return true
}

// publishedMark returns the deployment's published mark (known: there is
// one) and whether it has subscribers here.
func (l *Hub) publishedMark(id string) (p int64, known, subscribed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, known = l.published[id]
	return p, known, len(l.subs[id]) > 0
}

func (l *Hub) poke() {
	select {
	case l.wake <- struct{}{}:
	default: // already poked; the writer takes all remote work at once
	}
}

// catchUpRemote does the work LinesStored, DeploymentEnded and Resync queued.
func (l *Hub) catchUpRemote() {
	l.mu.Lock()
	work := l.remote
	l.remote = map[string]remoteWork{}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, w := range work {
		l.catchUp(ctx, id, w)
	}
}

func (l *Hub) catchUp(ctx context.Context, id string, w remoteWork) {
	p, known, subscribed := l.publishedMark(id)
	if !subscribed {
		return
	}
	switch {
	case known:
		l.fill(ctx, id, p, 0)
	case w.upTo > 0 || w.resync:
		// Nothing published here yet: each stream replayed the table when it
		// subscribed. Publishing the newest line is enough: a stream that
		// finds a gap before it fills it from the table (stream.live), and
		// later lines follow on from this one.
		upTo := w.upTo
		if upTo == 0 {
			m, err := l.store.LogMaxSeq(ctx, id)
			if err != nil {
				l.log.Warn("read deployment log sequence", "deployment", id, "err", err)
				break
			}
			upTo = m
		}
		if upTo > 0 {
			l.fill(ctx, id, upTo-1, 0)
		}
	}
	if w.end {
		l.publish(id, Event{Done: true, Gone: w.gone})
	}
}
