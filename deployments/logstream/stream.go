package logstream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/deployments/logstream/internal/wire"
)

// The log stream (SPEC 6.1, DESIGN.md section 4).
//
// Every event is unnamed: a "data:" line with a JSON object whose "type" is
// ready, log, error or done; a log event also has an "id:" line holding its
// cursor (the per-deployment sequence number, also "cursor" in the JSON).
// Order: ready, the backlog, live lines, then done once the deployment is
// terminal and every line stored up to then was sent. ": ping" comments keep
// idle streams open.
//
// Where the backlog starts: the Last-Event-ID header (a reconnecting
// EventSource) wins, then since (an RFC 3339 time: lines at or after it), then
// after (a cursor); none means from the first line. A resume (Last-Event-ID or
// after) at or past the last line of a terminal deployment (LIVE, FAILED,
// CANCELLED) is answered 204 No Content: nothing more will come on this
// stream, and 204 is what makes a browser's EventSource stop reconnecting.
//
// LIVE is terminal for the stream: a stream of a LIVE deployment sends what
// the app logged so far, then done. Open it again (with after=<last cursor>)
// to read the app's newer lines.
//
// Authentication: a bearer token, or ?token= from POST /deployments/{id}/logs/token
// (browsers' EventSource cannot send headers).

// logEvent is the JSON of one SSE event.
type logEvent struct {
	Type      string     `json:"type" enum:"ready,log,error,done"`
	Cursor    int64      `json:"cursor,omitempty" doc:"log only: the line's cursor (also its SSE id)"`
	Timestamp *time.Time `json:"timestamp,omitempty" doc:"log only"`
	Message   string     `json:"message,omitempty" doc:"log and error"`
	Stream    string     `json:"stream,omitempty" enum:"system,build,app" doc:"log only"`
}

// EventSchema registers one schema per event type and returns a reference
// to DeploymentLogEvent, their oneOf with type as discriminator.
func EventSchema(r huma.Registry) *huma.Schema { return wire.EventSchema(r) }

// Start is where a stream's backlog begins.
type Start = wire.Start

// ParseStart reads a stream's after, since and Last-Event-ID parameters; a
// bad one is a 400 naming it.
func ParseStart(after, since, lastEventID string) (Start, error) {
	return wire.ParseStart(after, since, lastEventID)
}

// Streams serves the log streams of a Hub's deployments. Close ends them.
type Streams struct {
	hub       *Hub
	heartbeat time.Duration
	conns     *wire.Conns // taken-over log streams (conn.go)
}

// NewStreams serves hub's lines, sending a heartbeat every heartbeat.
func NewStreams(hub *Hub, heartbeat time.Duration) *Streams {
	return &Streams{hub: hub, heartbeat: heartbeat, conns: wire.NewConns()}
}

// Close ends every taken-over stream (the Hub, closed first, ended their
// subscriptions): it closes what is left of their connections (a stream
// blocked writing to a client that does not read) and waits, up to ctx, for
// their goroutines.
func (sv *Streams) Close(ctx context.Context) error { return sv.conns.Close(ctx) }

// Serve writes deploymentID's stream from start to hctx (headers included);
// end is called once the stream ends, in whichever goroutine (Serve may
// return while the stream goes on, on a taken-over connection).
func (sv *Streams) Serve(hctx huma.Context, deploymentID string, start Start, end func()) {
	s := &stream{sv: sv, id: deploymentID, since: start.Since, last: start.After}
	hctx.SetHeader("Content-Type", "text/event-stream")
	hctx.SetHeader("Cache-Control", "no-cache")
	hctx.SetHeader("X-Accel-Buffering", "no")
	if sv.takeOver(hctx, s, end) {
		return // the stream goes on in its own goroutine
	}
	defer end()
	if rw, ok := hctx.BodyWriter().(http.ResponseWriter); ok {
		s.rc = http.NewResponseController(rw)
	}
	s.w = hctx.BodyWriter()
	hctx.SetStatus(http.StatusOK)
	ctx := hctx.Context()
	sub, ok := s.begin(ctx)
	if ok {
		sub = s.loop(ctx, sub, ctx.Done())
	}
	sub.Close()
}

// stream is one client's log stream. Frames are appended to out and sent by
// flush: on a taken-over connection (HTTP/1.1, see takeOver) as one chunk
// per flush written to the connection itself, else through the response
// writer.
type stream struct {
	sv    *Streams
	id    string
	since time.Time
	last  int64  // cursor of the last line sent (or the resume point)
	out   []byte // frames not sent yet (from outPool; nil when empty)

	// mu is held by the stream's goroutine except while it waits in its
	// live loop's select (idle); the log writer writes to raw directly only
	// when it gets mu at once (direct.go). rest is a chunk's part that such a
	// write left: it goes out before anything else.
	mu   sync.Mutex
	idle bool
	raw  syscall.RawConn
	rest []byte

	// A taken-over connection: frames go out as HTTP/1.1 chunks.
	conn     net.Conn
	gone     chan struct{} // closed when the client hung up (or the connection failed)
	failed   bool          // a write failed: no terminal chunk
	deadline time.Time     // the write deadline last set

	// Otherwise: the response writer.
	w  io.Writer
	rc *http.ResponseController // nil when w is not an http.ResponseWriter
}

// replayPage is how many stored lines a replay reads per query.
const replayPage = 500

// maxPending is how many bytes of frames a stream gathers before it writes
// them (in a replay, or live lines that queued up while it was writing).
const maxPending = 64 << 10

// begin subscribes, sends ready and the backlog, and reports whether the
// stream goes on to live lines (false: it ended or failed). The caller closes
// the returned subscription.
func (s *stream) begin(ctx context.Context) (*Subscription, bool) {
	// Held by the stream's goroutine from now on, except while it waits in
	// loop (direct.go).
	s.mu.Lock()
	// Subscribe first: a line stored while the backlog is read arrives here
	// too, and is skipped by cursor.
	sub := s.sv.hub.subscribe(s.id, s)
	s.event(logEvent{Type: "ready"}, 0)
	if s.flush() != nil {
		return sub, false
	}
	if s.replay(ctx) != nil {
		return sub, false
	}
	if end, err := s.ended(ctx); err != nil || end {
		return sub, false
	}
	return sub, true
}

// loop sends live lines and heartbeats until the deployment ends, the
// client goes (gone), a write fails or the log writer closes. It returns the
// subscription to close (a lagging stream subscribes again). It holds s.mu
// (taken by begin) except while it waits: only then may the log writer
// write to the connection itself (direct.go).
func (s *stream) loop(ctx context.Context, sub *Subscription, gone <-chan struct{}) *Subscription {
	tick := time.NewTicker(s.sv.heartbeat)
	defer tick.Stop()
	for {
		s.idle = true
		s.mu.Unlock()
		var ev Event
		var ok, woke, beat bool
		select {
		case <-gone:
		case <-ctx.Done():
		case ev, ok = <-sub.C:
			woke = true
		case <-tick.C:
			beat = true
		}
		s.mu.Lock()
		s.idle = false
		switch {
		case woke:
			var more bool
			if sub, more = s.events(ctx, sub, ev, ok); !more {
				return sub
			}
		case beat:
			// No query here: the log writer checks, for every stream of this
			// process at once, whether a deployment ended elsewhere
			// (Config.EndCheckEvery) and sends Done.
			if s.ping() != nil {
				return sub
			}
		default:
			return sub
		}
	}
}

// events sends ev and whatever else is queued on sub, and answers the
// subscription to go on with and whether the stream goes on.
func (s *stream) events(ctx context.Context, sub *Subscription, ev Event, ok bool) (*Subscription, bool) {
	got, taken := sub, int32(1)
	defer func() { got.pending.Add(-taken) }()
	for {
		if !ok {
			if !sub.Lagged() {
				return sub, false // the server is shutting down
			}
			// Dropped for falling behind: resubscribe, then refill from the
			// database (and see whether the end went by meanwhile).
			sub = s.sv.hub.subscribe(s.id, s)
			if s.replay(ctx) != nil {
				return sub, false
			}
			end, err := s.ended(ctx)
			return sub, err == nil && !end
		}
		if ev.Done {
			if ev.Gone {
				s.event(logEvent{Type: "error", Message: "the deployment was deleted"}, 0)
				_ = s.flush()
			} else if s.replay(ctx) == nil {
				_ = s.done()
			}
			return sub, false
		}
		for _, ln := range ev.Lines {
			if err := s.live(ctx, ln); err != nil {
				return sub, false
			}
		}
		// Lines that queued up meanwhile go out in the same write.
		if len(s.out) >= maxPending {
			break
		}
		select {
		case ev, ok = <-sub.C:
			taken++
			continue
		default:
		}
		break
	}
	return sub, s.flush() == nil
}

// ended sends done (after a last replay) if the deployment is terminal.
func (s *stream) ended(ctx context.Context) (bool, error) {
	st, err := s.sv.hub.store.DeploymentsEnded(ctx, []string{s.id})
	if err != nil {
		_ = s.fail("could not read the deployment")
		return true, err
	}
	terminal, ok := st[s.id]
	if !ok {
		return true, s.fail("the deployment was deleted")
	}
	if !terminal {
		return false, nil
	}
	if err := s.replay(ctx); err != nil {
		return true, err
	}
	return true, s.done()
}

// live adds a line from the fan-out unless already sent; a gap (lines stored
// but not yet seen here) is filled from the database first.
func (s *stream) live(ctx context.Context, ln *Line) error {
	if ln.Seq <= s.last {
		return nil
	}
	if ln.Seq > s.last+1 {
		if err := s.replay(ctx); err != nil {
			return err
		}
		if ln.Seq <= s.last {
			return nil
		}
	}
	s.line(ln)
	return nil
}

// replay sends the stored lines after s.last (and at or after s.since).
func (s *stream) replay(ctx context.Context) error {
	for {
		lines, err := s.sv.hub.store.LogList(ctx, ListParams{DeploymentID: s.id, AfterSeq: s.last, Since: s.since, Limit: replayPage})
		if err != nil {
			_ = s.fail("could not read the deployment's logs")
			return err
		}
		for i := range lines {
			s.line(&lines[i])
			if len(s.out) >= maxPending {
				if err := s.flush(); err != nil {
					return err
				}
			}
		}
		if err := s.flush(); err != nil {
			return err
		}
		if len(lines) < replayPage {
			return nil
		}
	}
}

// line adds a log line's frame (the fan-out's shared one when it has it).
func (s *stream) line(ln *Line) {
	if !s.since.IsZero() && ln.Time.Before(s.since) {
		return
	}
	s.grow()
	if ln.frame != nil {
		s.out = append(s.out, ln.frame...)
	} else {
		s.out = appendLogFrame(s.out, ln)
	}
	s.last = ln.Seq
}

// appendLogFrame appends the SSE event of a log line: its id: line and its
// data: line (JSON keeps a message's newlines out of the framing).
func appendLogFrame(b []byte, ln *Line) []byte {
	ts := ln.Time.UTC()
	j, err := json.Marshal(logEvent{Type: "log", Cursor: ln.Seq, Timestamp: &ts, Message: ln.Message, Stream: ln.Stream})
	if err != nil { // cannot happen for these field types
		j = []byte(`{"type":"log"}`)
	}
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, ln.Seq, 10)
	b = append(b, "\ndata: "...)
	b = append(b, j...)
	return append(b, '\n', '\n')
}

func (s *stream) done() error {
	s.event(logEvent{Type: "done"}, 0)
	return s.flush()
}

func (s *stream) fail(msg string) error {
	s.event(logEvent{Type: "error", Message: msg}, 0)
	return s.flush()
}

// writeTimeout bounds a write to a client; a client that reads slower is
// dropped. The deadline is moved only when less than half of it is left, not
// on every write.
const writeTimeout = 10 * time.Second

// event adds one SSE event. JSON encoding keeps a message's newlines out of
// the data: framing.
func (s *stream) event(ev logEvent, id int64) {
	s.grow()
	if id > 0 {
		s.out = append(s.out, "id: "...)
		s.out = strconv.AppendInt(s.out, id, 10)
		s.out = append(s.out, '\n')
	}
	s.out = append(s.out, "data: "...)
	j, _ := json.Marshal(ev) // cannot fail for these field types
	s.out = append(s.out, j...)
	s.out = append(s.out, '\n', '\n')
}

func (s *stream) ping() error {
	s.grow()
	s.out = append(s.out, ": ping\n\n"...)
	return s.flush()
}

// extendDeadline moves the write deadline when less than half of
// writeTimeout is left: one deadline per few seconds, not one per write.
func (s *stream) extendDeadline(set func(time.Time) error) {
	now := time.Now()
	if s.deadline.Sub(now) < writeTimeout/2 {
		s.deadline = now.Add(writeTimeout)
		_ = set(s.deadline)
	}
}

// flush writes the frames gathered in out.
func (s *stream) flush() error {
	if s.conn != nil {
		return s.flushConn(false)
	}
	if len(s.out) > 0 {
		if s.rc != nil {
			s.extendDeadline(s.rc.SetWriteDeadline)
		}
		_, err := s.w.Write(s.out[chunkHead:])
		s.release()
		if err != nil {
			return err
		}
	}
	if s.rc == nil {
		if f, ok := s.w.(http.Flusher); ok {
			f.Flush()
		}
		return nil
	}
	err := s.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}
