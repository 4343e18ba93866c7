package logstream

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/keelson-dev/keelson/platform"
)

// Numbering and storage: the writer goroutine that numbers queued lines per
// deployment, stores them in batches (renumbering after lines another process
// stored) and only then publishes them.

func (l *Hub) run() {
	defer close(l.done)
	batch := make([]logItem, 0, l.cfg.BatchSize)
	check := time.NewTicker(l.cfg.EndCheckEvery)
	defer check.Stop()
	handle := func(it logItem) {
		if it.line != nil {
			batch = append(batch, it)
			return
		}
		// A marker: everything before it is stored and published first.
		batch = l.write(batch)
		l.mark(it)
		l.afterFanOut() // what came after the marker during the write
	}
	for {
		select {
		case it, ok := <-l.queue:
			if !ok {
				return
			}
			handle(it)
		drain: // take what is already waiting, up to a batch
			for len(batch) < l.cfg.BatchSize {
				select {
				case it, ok := <-l.queue:
					if !ok {
						break drain
					}
					handle(it)
				default:
					break drain
				}
			}
			batch = l.write(batch)
		case <-l.wake:
			l.catchUpRemote()
		case <-check.C:
			l.checkEnded()
			l.catchUpRemote()
		}
		l.afterFanOut()
	}
}

// endCheckPage is how many deployment ids one end check reads per query.
const endCheckPage = 500

// checkEnded marks, for catchUpRemote, the deployments with subscribers here
// that are terminal (their streams get the stored lines, then Done) or gone.
func (l *Hub) checkEnded() {
	l.mu.Lock()
	ids := slices.Collect(maps.Keys(l.subs))
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for page := range slices.Chunk(ids, endCheckPage) {
		st, err := l.store.DeploymentsEnded(ctx, page)
		if err != nil {
			l.log.Warn("check which deployments ended", "err", err)
			return
		}
		l.mu.Lock()
		for _, id := range page {
			ended, ok := st[id]
			if ok && !ended {
				continue
			}
			l.remote[id] = l.remote[id].and(remoteWork{end: true, gone: !ok})
		}
		l.mu.Unlock()
	}
}

func (l *Hub) mark(it logItem) {
	if it.trim > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := l.store.LogTrimApp(ctx, it.sink.id, it.trim); err != nil {
			l.log.Warn("delete old app log lines", "deployment", it.sink.id, "err", err)
		}
		cancel()
	}
	if it.flush != nil {
		close(it.flush)
	}
	if it.end != "" {
		l.publish(it.end, Event{Done: true})
		l.grew(it.end) // its logs may go for the budget now
	}
}

// write numbers and stores lines, then publishes them, and returns an empty
// batch to fill next (subscribers keep the published lines).
func (l *Hub) write(batch []logItem) []logItem {
	if len(batch) == 0 {
		return batch
	}
	l.publishItems(l.storeBatch(batch))
	return make([]logItem, 0, l.cfg.BatchSize)
}

// storeBatch numbers and stores lines and answers those stored, framed for the
// fan-out. A batch that collides with lines another process stored for the
// same deployment is numbered again after them. A batch the database
// refuses otherwise is retried line by line so one bad line cannot lose its
// neighbours; a line that cannot be stored is logged and skipped (its
// number is reused).
func (l *Hub) storeBatch(batch []logItem) []logItem {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := make(map[*Sink]int64, 1)
	for _, it := range batch {
		if _, ok := base[it.sink]; !ok {
			base[it.sink] = it.sink.stored
		}
	}
	number := func() []Line {
		rows := make([]Line, len(batch))
		for i, it := range batch {
			it.sink.stored++
			it.line.Seq = it.sink.stored
			rows[i] = *it.line
		}
		return rows
	}
	stored := batch
	err := l.store.LogInsert(ctx, number())
	// Another process stored lines of one of these deployments: number on
	// after them. Each lost race means the other writer stored its lines, so
	// this ends; the context bounds it all the same.
	for err != nil && errors.Is(err, platform.ErrConflict) && ctx.Err() == nil {
		if rerr := l.renumberFrom(ctx, base); rerr != nil {
			break
		}
		err = l.store.LogInsert(ctx, number())
	}
	if err != nil {
		stored = l.writeEach(ctx, batch, base)
	}
	if len(stored) > 0 {
		l.cfg.Metrics.LogLinesStored(len(stored))
	}
	for i, it := range stored {
		if i == 0 || it.line.DeploymentID != stored[i-1].line.DeploymentID {
			l.grew(it.line.DeploymentID)
		}
		it.line.frame = appendLogFrame(nil, it.line)
	}
	return stored
}

// publishItems publishes stored lines: one event per deployment per run of
// its lines. A channel send (or a socket write) per subscriber per batch,
// not per line, is what lets one producer feed a thousand streams.
func (l *Hub) publishItems(stored []logItem) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := 0
	for i := 1; i <= len(stored); i++ {
		if i == len(stored) || stored[i].line.DeploymentID != stored[start].line.DeploymentID {
			group := make([]*Line, i-start)
			for j := range group {
				group[j] = stored[start+j].line
			}
			l.publishStored(ctx, group)
			start = i
		}
	}
}

// renumberFrom sets each sink's counter to its deployment's highest stored
// seq (at least base), so the next numbering follows what others stored.
func (l *Hub) renumberFrom(ctx context.Context, base map[*Sink]int64) error {
	for s, b := range base {
		m, err := l.store.LogMaxSeq(ctx, s.id)
		if err != nil {
			l.log.Error("read deployment log sequence", "deployment", s.id, "err", err)
			return err
		}
		s.stored = max(m, b)
		base[s] = s.stored
	}
	return nil
}

// writeEach stores lines one at a time and returns those stored.
func (l *Hub) writeEach(ctx context.Context, batch []logItem, base map[*Sink]int64) []logItem {
	for s, b := range base {
		s.stored = b
	}
	stored := batch[:0:0]
	for _, it := range batch {
		var err error
		for {
			it.line.Seq = it.sink.stored + 1
			err = l.store.LogInsert(ctx, []Line{*it.line})
			if !errors.Is(err, platform.ErrConflict) || ctx.Err() != nil {
				break
			}
			m, rerr := l.store.LogMaxSeq(ctx, it.sink.id)
			if rerr != nil {
				break
			}
			it.sink.stored = max(m, it.sink.stored)
		}
		if err != nil {
			l.log.Error("store deployment log line", "deployment", it.line.DeploymentID, "seq", it.line.Seq, "err", err)
			continue
		}
		it.sink.stored = it.line.Seq
		stored = append(stored, it)
	}
	return stored
}
