// Package wire holds the parts of the log stream's HTTP surface that need
// none of its state: the event schema, where a stream starts, the set of
// taken-over connections and the log tokens. It is not the stream (deployments/logstream).
package wire

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/keelson-dev/keelson/platform"
)

// EventSchema registers one schema per event type and returns a reference
// to DeploymentLogEvent, their oneOf with type as discriminator.
func EventSchema(r huma.Registry) *huma.Schema {
	const prefix = "#/components/schemas/"
	typ := func(v string) *huma.Schema {
		return &huma.Schema{Type: huma.TypeString, Enum: []any{v}, Description: "Event type"}
	}
	events := []struct {
		name, typ, doc string
		props          map[string]*huma.Schema
	}{
		{"DeploymentLogReady", "ready", "The stream is open; the backlog follows.", nil},
		{"DeploymentLogLine", "log", "One log line. Its SSE id: line is the cursor.", map[string]*huma.Schema{
			"cursor":    {Type: huma.TypeInteger, Format: "int64", Minimum: ptrFloat(1), Description: "The line's cursor (per-deployment sequence number), also its SSE id"},
			"timestamp": {Type: huma.TypeString, Format: "date-time", Description: "When the line was logged (RFC 3339, UTC)"},
			"stream":    {Type: huma.TypeString, Enum: []any{"system", "build", "app"}, Description: "Where the line came from"},
			"message":   {Type: huma.TypeString, Description: "The line (absent when empty); secret env values are replaced by ***"},
		}},
		{"DeploymentLogError", "error", "The stream failed and ends.", map[string]*huma.Schema{
			"message": {Type: huma.TypeString, Description: "What went wrong"},
		}},
		{"DeploymentLogDone", "done", "The deployment is terminal and every line was sent; the stream ends.", nil},
	}
	m := r.Map()
	one := &huma.Schema{
		Description:   "One event of a deployment's log stream (the JSON of its data: line).",
		Discriminator: &huma.Discriminator{PropertyName: "type", Mapping: map[string]string{}},
	}
	for _, e := range events {
		props := map[string]*huma.Schema{"type": typ(e.typ)}
		required := []string{"type"}
		for k, v := range e.props {
			props[k] = v
			if k != "message" || e.typ == "error" { // an empty log line has no message
				required = append(required, k)
			}
		}
		slices.Sort(required)
		m[e.name] = &huma.Schema{Type: huma.TypeObject, Description: e.doc, Properties: props, Required: required,
			AdditionalProperties: false}
		ref := prefix + e.name
		one.OneOf = append(one.OneOf, &huma.Schema{Ref: ref})
		one.Discriminator.Mapping[e.typ] = ref
	}
	m["DeploymentLogEvent"] = one
	return &huma.Schema{Ref: prefix + "DeploymentLogEvent"}
}

func ptrFloat(f float64) *float64 { return &f }

// Start is where a stream's backlog begins.
type Start struct {
	After  int64     // the cursor of the last line the client has
	Since  time.Time // lines at or after this time (with After 0)
	Resume bool      // After comes from after= or Last-Event-ID (not since)
}

// ParseStart reads a stream's after, since and Last-Event-ID parameters; a
// bad one is a 400 naming it.
func ParseStart(after, since, lastEventID string) (Start, error) {
	var st Start
	in := struct{ After, Since, LastEventID string }{after, since, lastEventID}
	cursor := func(v, name string) (int64, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return 0, platform.Invalidf("%s: must be a log cursor (a non-negative integer)", name)
		}
		return n, nil
	}
	// Validate every parameter given, even one that precedence ignores.
	var afterN, last int64
	var err error
	if in.After != "" {
		if afterN, err = cursor(in.After, "query.after"); err != nil {
			return st, err
		}
	}
	if in.LastEventID != "" {
		if last, err = cursor(in.LastEventID, "header.Last-Event-ID"); err != nil {
			return st, err
		}
	}
	var sinceT time.Time
	if in.Since != "" {
		if sinceT, err = time.Parse(time.RFC3339Nano, in.Since); err != nil {
			return st, platform.Invalid("query.since: must be an RFC 3339 time, e.g. 2025-01-02T15:04:05Z")
		}
	}
	switch {
	case in.LastEventID != "":
		st.After, st.Resume = last, true
	case in.Since != "":
		st.Since = sinceT.UTC()
	default:
		st.After, st.Resume = afterN, in.After != ""
	}
	return st, nil
}

// Conns tracks the taken-over connections of log streams.
type Conns struct {
	Ctx    context.Context // for the streams' database reads; cancelled by Close
	cancel context.CancelFunc
	WG     sync.WaitGroup // every stream's goroutines

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// NewConns returns an empty set.
func NewConns() *Conns {
	ctx, cancel := context.WithCancel(context.Background())
	return &Conns{Ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
}

// Add registers a taken-over connection and counts its two goroutines; false
// once closing.
func (c *Conns) Add(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.conns[conn] = struct{}{}
	c.WG.Add(2)
	return true
}

// Remove forgets conn.
func (c *Conns) Remove(conn net.Conn) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
}

// closeGrace is how long close lets streams end on their own (their last
// chunk written) before it closes their connections.
const closeGrace = 2 * time.Second

// Close ends every taken-over stream and waits, up to ctx, for their
// goroutines: each stream ends its body and closes its connection; one still
// stuck writing after closeGrace has its connection closed under it.
func (c *Conns) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() { c.WG.Wait(); close(done) }()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	for conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
