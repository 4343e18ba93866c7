package logstream

import (
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// Fan-out passes over many subscribers. Writing a chunk to each of a
// thousand sockets takes milliseconds (the write system calls, on loopback
// the receiving side's work too), so a line that is stored while a pass
// runs would wait for the rest of that pass and then for its own. Instead,
// while the pass's goroutines write, the log writer stores what producers
// queued meanwhile and appends the deployment's new lines to the pass:
// subscribers not written yet get them in the same chunk, and the next
// pass, started at once, gives those written earlier what they missed with
// whatever came since (each subscription knows the last line it was
// handed, and one that has them all costs no write). A line thus waits for
// about one pass, not the rest of the current one and then its own, and
// each subscriber still gets one write per pass, not one per batch.
//
// The goroutines take subscribers in small runs from a shared counter, not
// a fixed half each, so one whose thread the kernel stops does not hold up
// the pass while the other has nothing left to do, and yield between runs,
// so the goroutine reading a build's output gets to queue the next line
// (and the writer to store it) while the pass runs, not after it.

// passRun is how many subscribers a pass goroutine takes at a time.
const passRun = 32

// passLines is a pass's lines so far with their chunks, built once per
// first line a subscriber still needs (in a pass, a few at most).
type passLines struct {
	lines  []*Line
	mu     sync.Mutex
	chunks map[int]*sharedChunk // by the index of the chunk's first line
}

func newPassLines(lines []*Line) *passLines {
	return &passLines{lines: lines, chunks: map[int]*sharedChunk{}}
}

func (p *passLines) chunk(from int) *sharedChunk {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.chunks[from]
	if c == nil {
		c = &sharedChunk{lines: p.lines[from:]}
		p.chunks[from] = c
	}
	return c
}

// fanOutMany is fanOut for many subscribers: a pass that takes in the
// deployment's lines stored while it runs. Those the pass had written to
// before such lines came are owed them (afterFanOut). Called with l.mu held,
// it lets go of it while the pass runs on its list of subs: storing lines
// meanwhile may wait on the database, and Subscribe, Close, LinesStored and
// the rest must not (Close leaves the channel of one the pass may be
// writing to for it to close after; one subscribing meanwhile reads ev's
// lines from the table and is owed those that join the pass).
func (l *Hub) fanOutMany(id string, subs map[*Subscription]struct{}, ev Event) ([]*Subscription, Event) {
	all := l.scratch[:0]
	for s := range subs {
		all = append(all, s)
	}
	l.scratch = all[:0]
	defer clear(all) // no pointers kept past the fan-out
	l.published[id] = max(l.published[id], ev.Lines[len(ev.Lines)-1].Seq)
	l.passID = id
	l.mu.Unlock()
	var cur atomic.Pointer[passLines]
	cur.Store(newPassLines(ev.Lines))
	lagged := l.pass(all, &cur, id)
	l.mu.Lock()
	l.passID = ""
	for _, s := range l.closeAfterPass {
		close(s.ch)
	}
	l.closeAfterPass = nil
	lines := cur.Load().lines
	if len(lines) > len(ev.Lines) {
		l.owed = &owedLines{id: id, lines: lines[len(ev.Lines):]}
	}
	return lagged, Event{Lines: lines}
}

// owedLines are lines that joined a pass after it had written to some of
// the deployment's subscribers.
type owedLines struct {
	id    string
	lines []*Line
}

// pass hands every subscription of all the lines of cur it has not had,
// over one goroutine per CPU, while the caller's goroutine stores queued
// lines and adds those of deployment id to cur.
func (l *Hub) pass(all []*Subscription, cur *atomic.Pointer[passLines], id string) []*Subscription {
	parts := runtime.GOMAXPROCS(0)
	lagged := make([][]*Subscription, parts)
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(passRun)) - passRun
				if i >= len(all) {
					return
				}
				v := cur.Load()
				for _, s := range all[i:min(i+passRun, len(all))] {
					if !s.sendNew(v) {
						lagged[p] = append(lagged[p], s)
					}
				}
				// The pipe reader and the writer (absorbing lines) need a
				// turn too: a pass holds every P for milliseconds.
				runtime.Gosched()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	l.absorb(id, cur, done)
	<-done
	var out []*Subscription
	for _, ls := range lagged {
		out = append(out, ls...)
	}
	return out
}

// sendNew hands s the lines of v after the last it was handed (none: it
// has them all). False: its channel is full.
func (s *Subscription) sendNew(v *passLines) bool {
	from := sort.Search(len(v.lines), func(i int) bool { return v.lines[i].Seq > s.sent })
	if from == len(v.lines) {
		return true
	}
	if !s.send(Event{Lines: v.lines[from:]}, v.chunk(from)) {
		return false
	}
	s.sent = v.lines[len(v.lines)-1].Seq
	return true
}

// absorb stores what producers queue until done is closed, adding the
// lines of deployment id that follow cur's last to cur; other stored
// lines wait in l.stash to be published after the fan-out, and a marker
// (Flush, End, a trim) waits in l.held (what was queued after it stays
// queued); either ends the absorbing, so that other work waits for one
// pass at most. Runs on the writer goroutine.
func (l *Hub) absorb(id string, cur *atomic.Pointer[passLines], done <-chan struct{}) {
	for l.held == nil && !l.queueDone && len(l.stash) == 0 {
		var batch []logItem
		select {
		case <-done:
			return
		case it, ok := <-l.queue:
			if !ok {
				l.queueDone = true
				return
			}
			batch = l.take(it, batch)
		}
	drain: // take what is already waiting, up to a batch
		for len(batch) < l.cfg.BatchSize && l.held == nil {
			select {
			case it, ok := <-l.queue:
				if !ok {
					l.queueDone = true
					break drain
				}
				batch = l.take(it, batch)
			default:
				break drain
			}
		}
		if len(batch) == 0 {
			continue
		}
		v := cur.Load()
		if lines := l.extend(id, v.lines, l.storeBatch(batch)); len(lines) > len(v.lines) {
			cur.Store(newPassLines(lines))
		}
	}
}

// extend answers lines with the stored lines of deployment id that follow
// them appended (a copy); the others go to l.stash, as do all of id's after
// a gap (another process's lines, read from the table after the fan-out).
func (l *Hub) extend(id string, lines []*Line, stored []logItem) []*Line {
	gap := slices.ContainsFunc(l.stash, func(it logItem) bool { return it.line.DeploymentID == id })
	for _, it := range stored {
		if !gap && it.line.DeploymentID == id && it.line.Seq == lines[len(lines)-1].Seq+1 {
			lines = append(lines[:len(lines):len(lines)], it.line)
			continue
		}
		gap = gap || it.line.DeploymentID == id
		l.stash = append(l.stash, it)
	}
	return lines
}

// take adds a queued line to batch, or holds a marker for after the
// fan-out.
func (l *Hub) take(it logItem, batch []logItem) []logItem {
	if it.line != nil {
		return append(batch, it)
	}
	l.held = &it
	return batch
}

// afterFanOut gives the subscribers a pass wrote to early the lines that
// joined it later (with whatever joins this pass), then publishes what
// absorb stored and did not add to a pass, then handles the marker it
// held: queue order, per deployment.
func (l *Hub) afterFanOut() {
	for l.owed != nil || len(l.stash) > 0 || l.held != nil {
		switch {
		case l.owed != nil:
			o := l.owed
			l.owed = nil
			l.publishOwed(o)
		case len(l.stash) > 0:
			stash := l.stash
			l.stash = nil
			l.publishItems(stash)
		default:
			it := *l.held
			l.held = nil
			l.mark(it)
		}
	}
}

// publishOwed publishes owed lines again; subscribers that have them skip
// them (Subscription.sent), so only those written early get a write.
func (l *Hub) publishOwed(o *owedLines) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.subs[o.id]) == 0 {
		return
	}
	ev := l.publishLocked(o.id, Event{Lines: o.lines})
	if len(l.subs[o.id]) > 0 {
		l.published[o.id] = max(l.published[o.id], ev.Lines[len(ev.Lines)-1].Seq)
	}
}
