package logstream

import (
	"strconv"
	"sync"
)

// Direct delivery. A live stream on a taken-over connection that is idle
// (its goroutine waits in its loop's select, no event queued for it) and
// caught up (the event's first line follows its last) is written to by the
// log writer itself: the event's lines framed as one HTTP chunk, built once
// and written to every such stream's socket with one non-blocking write
// each, split over a few goroutines (one per CPU) when there are many
// (pass.go). No stream goroutine wakes for the line. A stream that is busy,
// behind, or whose socket does not take the whole chunk gets the event on
// its channel as before (the part of the chunk a socket did take is remembered, sent
// first, and its lines skipped by cursor), so a slow follower never delays
// the others and order is kept: the writer never writes to a stream while
// an event it queued for it is unprocessed.

const directMin = 256 // subscribers of a deployment past which its fan-out is split over goroutines

// sharedChunk is an event's lines framed as one HTTP/1.1 chunk, built by the
// first stream that needs it.
type sharedChunk struct {
	once  sync.Once
	lines []*Line
	b     []byte
}

func (c *sharedChunk) bytes() []byte {
	c.once.Do(func() {
		n := 0
		for _, ln := range c.lines {
			n += len(ln.frame)
		}
		b := make([]byte, 0, n+chunkHead+2)
		b = strconv.AppendInt(b, int64(n), 16)
		b = append(b, '\r', '\n')
		for _, ln := range c.lines {
			b = append(b, ln.frame...)
		}
		c.b = append(b, '\r', '\n')
	})
	return c.b
}

// fanOut hands ev to every subscription of deploymentID's subs and answers
// those that fell behind (their buffer full) and the event as published:
// past directMin subscribers, lines of the deployment stored while the
// fan-out ran join it (pass.go), so the event may end with more lines than
// ev. Called with l.mu held (let go of during a pass, see fanOutMany).
func (l *Hub) fanOut(deploymentID string, subs map[*Subscription]struct{}, ev Event) ([]*Subscription, Event) {
	var lagged []*Subscription
	switch {
	case ev.Done || len(ev.Lines) == 0:
		for s := range subs {
			if !s.send(ev, nil) {
				lagged = append(lagged, s)
			}
		}
	case len(subs) >= directMin:
		return l.fanOutMany(deploymentID, subs, ev)
	default:
		v := newPassLines(ev.Lines)
		for s := range subs {
			if !s.sendNew(v) {
				lagged = append(lagged, s)
			}
		}
	}
	return lagged, ev
}

// send delivers ev to s: written straight to its connection when it can
// be, else queued on its channel. False: the channel is full.
func (s *Subscription) send(ev Event, chunk *sharedChunk) bool {
	if s.st != nil && !ev.Done && len(ev.Lines) > 0 && s.st.deliver(ev, s, chunk) {
		return true
	}
	s.pending.Add(1)
	select {
	case s.ch <- ev:
		return true
	default:
		s.pending.Add(-1)
		return false
	}
}

// deliver writes ev's chunk to the stream's socket if the stream is idle and
// caught up and the socket takes it whole without waiting. When it took only
// part, the rest is kept to go first and s.last moves on (the queued event's
// lines are then skipped), and deliver answers false so that the event is
// queued to wake the stream.
func (s *stream) deliver(ev Event, sub *Subscription, chunk *sharedChunk) bool {
	if s.raw == nil || !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if !s.idle || sub.pending.Load() != 0 || s.failed || len(s.rest) > 0 {
		return false
	}
	last := s.last
	for _, ln := range ev.Lines {
		if ln.Seq != last+1 || ln.frame == nil || (!s.since.IsZero() && ln.Time.Before(s.since)) {
			return false // the stream's own path handles gaps, repeats and since
		}
		last = ln.Seq
	}
	// Whatever fails here (a full socket, a write deadline the stream's
	// goroutine set long ago and has passed, a closed connection) is left to
	// the stream's own path, which sets a deadline and sees real errors.
	b := chunk.bytes()
	n := s.tryWrite(b)
	if n == len(b) {
		s.last = last
		return true
	}
	if n > 0 {
		s.last = last
		s.rest = append([]byte(nil), b[n:]...)
	}
	return false
}
