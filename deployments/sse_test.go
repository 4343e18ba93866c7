package deployments_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
)

// sseEvent is one parsed event (or a comment line).
type sseEvent struct {
	ID      string
	Type    string
	Cursor  int64
	Message string
	Stream  string
	Time    string
	Comment string
}

type sseStream struct {
	t      *testing.T
	res    *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
}

// openLogs opens GET path as user (or with the query token already in path).
func (e *env) openLogs(path, user string, header http.Header) *sseStream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
	must(e.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer token-"+user)
	}
	res, err := http.DefaultClient.Do(req)
	must(e.t, err)
	s := &sseStream{t: e.t, res: res, rd: bufio.NewReader(res.Body), cancel: cancel}
	e.t.Cleanup(s.close)
	return s
}

func (s *sseStream) close() {
	s.cancel()
	s.res.Body.Close()
}

// next returns the next event or comment.
func (s *sseStream) next() sseEvent {
	s.t.Helper()
	var ev sseEvent
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			s.t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.Type != "" || ev.Comment != "" {
				return ev
			}
		case strings.HasPrefix(line, ":"):
			ev.Comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[4:]
		case strings.HasPrefix(line, "data: "):
			var d struct {
				Type      string `json:"type"`
				Cursor    int64  `json:"cursor"`
				Message   string `json:"message"`
				Stream    string `json:"stream"`
				Timestamp string `json:"timestamp"`
			}
			if err := json.Unmarshal([]byte(line[6:]), &d); err != nil {
				s.t.Fatalf("bad data line %q: %v", line, err)
			}
			ev.Type, ev.Cursor, ev.Message, ev.Stream, ev.Time = d.Type, d.Cursor, d.Message, d.Stream, d.Timestamp
		case strings.HasPrefix(line, "event:"):
			s.t.Fatalf("events must be unnamed, got %q", line)
		default:
			s.t.Fatalf("unexpected line %q", line)
		}
	}
}

// nextEvent skips comments.
func (s *sseStream) nextEvent() sseEvent {
	s.t.Helper()
	for {
		if ev := s.next(); ev.Comment == "" {
			return ev
		}
	}
}

// logsUntilDone reads log events until done and returns their cursors.
func (s *sseStream) logsUntilDone() []int64 {
	s.t.Helper()
	var cursors []int64
	for {
		ev := s.nextEvent()
		switch ev.Type {
		case "done":
			return cursors
		case "log":
			require.Equal(s.t, strconv.FormatInt(ev.Cursor, 10), ev.ID, "id: equals the cursor")
			cursors = append(cursors, ev.Cursor)
		default:
			s.t.Fatalf("unexpected event %+v", ev)
		}
	}
}

func seqs(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestLogStreamBacklogAfterSinceAndLastEventID(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		e.rt.BuildLines = 30
		alice := platform.NewID()
		id := e.trigger(alice, e.project(alice, "logs"))
		e.waitStatus(id, deployments.StatusLive)
		stored := e.lines(id)
		n := int64(len(stored))
		require.Greater(t, n, int64(40))

		s := e.openLogs("/deployments/"+id+"/logs", alice, nil)
		assert.Equal(t, 200, s.res.StatusCode)
		assert.Equal(t, "text/event-stream", s.res.Header.Get("Content-Type"))
		assert.Equal(t, "no-cache", s.res.Header.Get("Cache-Control"))
		assert.Equal(t, "no", s.res.Header.Get("X-Accel-Buffering"))
		first := s.nextEvent()
		assert.Equal(t, "ready", first.Type)
		assert.Empty(t, first.ID)
		ev := s.nextEvent()
		assert.Equal(t, int64(1), ev.Cursor)
		assert.Equal(t, "deployment queued (manual)", ev.Message)
		assert.Equal(t, "system", ev.Stream)
		_, err := time.Parse(time.RFC3339Nano, ev.Time)
		assert.NoError(t, err)
		assert.Equal(t, seqs(2, n), s.logsUntilDone(), "every line once, in order, then done")

		s = e.openLogs("/deployments/"+id+"/logs?after=5", alice, nil)
		require.Equal(t, "ready", s.nextEvent().Type)
		assert.Equal(t, seqs(6, n), s.logsUntilDone())

		// Last-Event-ID (a reconnecting EventSource) wins over the URL's after and since.
		s = e.openLogs("/deployments/"+id+"/logs?after=2&since=2000-01-01T00:00:00Z", alice, http.Header{"Last-Event-ID": {"17"}})
		require.Equal(t, "ready", s.nextEvent().Type)
		assert.Equal(t, seqs(18, n), s.logsUntilDone())

		// since: the lines stamped at or after it.
		since := stored[20].Time
		var want []int64
		for _, l := range stored {
			if !l.Time.Before(since) {
				want = append(want, l.Seq)
			}
		}
		s = e.openLogs("/deployments/"+id+"/logs?after=40&since="+url.QueryEscape(since.Format(time.RFC3339Nano)), alice, nil)
		require.Equal(t, "ready", s.nextEvent().Type)
		assert.Equal(t, want, s.logsUntilDone(), "since wins over after")

		// A resume at or past the last line of a finished deployment is 204:
		// an EventSource stops reconnecting instead of replaying ready+done
		// every few seconds.
		for _, c := range []struct {
			query  string
			header http.Header
		}{
			{"after=" + strconv.FormatInt(n, 10), nil},
			{"after=" + strconv.FormatInt(n+1000, 10), nil},
			{"", http.Header{"Last-Event-ID": {strconv.FormatInt(n, 10)}}},
			{"after=1", http.Header{"Last-Event-ID": {strconv.FormatInt(n, 10)}}},
		} {
			s = e.openLogs("/deployments/"+id+"/logs?"+c.query, alice, c.header)
			assert.Equal(t, http.StatusNoContent, s.res.StatusCode, "%s %v", c.query, c.header)
			body, _ := io.ReadAll(s.res.Body)
			assert.Empty(t, body)
		}
		// One line short of the end still streams that line, then done.
		s = e.openLogs("/deployments/"+id+"/logs", alice, http.Header{"Last-Event-ID": {strconv.FormatInt(n-1, 10)}})
		require.Equal(t, 200, s.res.StatusCode)
		require.Equal(t, "ready", s.nextEvent().Type)
		assert.Equal(t, []int64{n}, s.logsUntilDone())

		for _, c := range []struct {
			query, header, want string
		}{
			{"after=-1", "", "query.after"},
			{"after=abc", "", "query.after"},
			{"since=yesterday", "", "query.since"},
			{"since=2025-01-02", "", "query.since"},
			{"", "x1", "header.Last-Event-ID"},
		} {
			h := http.Header{}
			if c.header != "" {
				h.Set("Last-Event-ID", c.header)
			}
			s := e.openLogs("/deployments/"+id+"/logs?"+c.query, alice, h)
			assert.Equal(t, 400, s.res.StatusCode, c.query)
			var body struct {
				Message string `json:"message"`
			}
			require.NoError(t, json.NewDecoder(s.res.Body).Decode(&body))
			assert.Contains(t, body.Message, c.want)
		}
	})
}

func TestLogStreamLiveLinesAndReconnectMidBuild(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "tail")
		hold := e.rt.HoldBuild("tail")
		id := e.trigger(alice, pid)
		hold.WaitEntered(t)
		sink, err := e.logs.Sink(context.Background(), id)
		require.NoError(t, err)
		backlog := int64(len(e.lines(id)))

		s := e.openLogs("/deployments/"+id+"/logs", alice, nil)
		require.Equal(t, "ready", s.nextEvent().Type)
		for i := int64(1); i <= backlog; i++ {
			require.Equal(t, i, s.nextEvent().Cursor)
		}
		// Live lines arrive while the build runs.
		for i := range 50 {
			sink.Log(deployments.StreamBuild, fmt.Sprintf("live %d", i))
		}
		var last int64
		for i := range 20 {
			ev := s.nextEvent()
			require.Equal(t, "log", ev.Type)
			require.Equal(t, backlog+int64(i)+1, ev.Cursor)
			require.Equal(t, fmt.Sprintf("live %d", i), ev.Message)
			last = ev.Cursor
		}
		s.close() // the client drops mid-build, having seen up to last

		for i := 50; i < 100; i++ {
			sink.Log(deployments.StreamBuild, fmt.Sprintf("live %d", i))
		}
		s = e.openLogs("/deployments/"+id+"/logs", alice, http.Header{"Last-Event-ID": {strconv.FormatInt(last, 10)}})
		require.Equal(t, "ready", s.nextEvent().Type)
		// Lines logged while connected and after the build resumes follow, then done.
		go func() {
			for i := 100; i < 150; i++ {
				sink.Log(deployments.StreamBuild, fmt.Sprintf("live %d", i))
			}
			hold.Release(nil)
		}()
		got := s.logsUntilDone()
		e.waitStatus(id, deployments.StatusLive)
		total := int64(len(e.lines(id)))
		assert.Equal(t, seqs(last+1, total), got, "every later line exactly once")
	})
}

func TestSlowStreamIsDroppedFromFanOutAndRefills(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		// A 2-line subscriber buffer: streams fall behind all the time.
		e := newEnv(t, bdb, envOpts{logsCfg: deployments.LogsConfig{SubscriberBuffer: 2}})
		alice := platform.NewID()
		hold := e.rt.HoldBuild("fast")
		id := e.trigger(alice, e.project(alice, "fast"))
		hold.WaitEntered(t)
		sink, err := e.logs.Sink(context.Background(), id)
		require.NoError(t, err)
		s := e.openLogs("/deployments/"+id+"/logs", alice, nil)
		require.Equal(t, "ready", s.nextEvent().Type)
		for i := range 3000 {
			sink.Log(deployments.StreamBuild, fmt.Sprintf("line %d", i))
		}
		hold.Release(nil)
		got := s.logsUntilDone()
		e.waitStatus(id, deployments.StatusLive)
		assert.Equal(t, seqs(1, int64(len(e.lines(id)))), got)
	})
}

func TestFanOutNeverBlocksTheProducer(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	store := deployments.NewStore(bdb)
	logs := deployments.NewLogs(store, deployments.LogsConfig{SubscriberBuffer: 4})
	defer logs.Close()
	id := platform.NewID()
	stuck := logs.Subscribe(id) // never read
	sink, err := logs.Sink(context.Background(), id)
	require.NoError(t, err)
	// Flushing after each line makes one event per line: 100 events for a
	// 4-event buffer. The producer finishes although nobody reads.
	for i := range 100 {
		sink.Log(deployments.StreamApp, fmt.Sprintf("line %d", i))
		require.NoError(t, logs.Flush(context.Background()))
	}
	n := 0
	for ev := range stuck.C {
		n++
		require.Len(t, ev.Lines, 1)
		require.Equal(t, int64(n), ev.Lines[0].Seq)
	}
	assert.Equal(t, 4, n, "the stuck subscriber got its buffer")
	assert.True(t, stuck.Lagged(), "then it was dropped")
	got, err := store.LogList(context.Background(), deployments.LogListParams{DeploymentID: id, Limit: 1000})
	require.NoError(t, err)
	assert.Len(t, got, 100, "every line stored regardless")

	// A new Logs (a restarted server) numbers on from the stored lines.
	logs2 := deployments.NewLogs(store, deployments.LogsConfig{})
	defer logs2.Close()
	sink2, err := logs2.Sink(context.Background(), id)
	require.NoError(t, err)
	sink2.Log(deployments.StreamApp, "after restart\x00 with NUL and \xff bad UTF-8")
	require.NoError(t, logs2.Flush(context.Background()))
	got, err = store.LogList(context.Background(), deployments.LogListParams{DeploymentID: id, AfterSeq: 100, Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, int64(101), got[0].Seq)
	assert.Equal(t, "after restart with NUL and \uFFFD bad UTF-8", got[0].Message)
}

func TestLogTokenOpensOneDeploymentsStream(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, envOpts{})
		alice := platform.NewID()
		pid := e.project(alice, "tok")
		id := e.trigger(alice, pid)
		other := e.trigger(alice, pid)
		e.waitStatus(other, deployments.StatusLive)

		var tok struct {
			Token     string    `json:"token"`
			ExpiresAt time.Time `json:"expiresAt"`
		}
		code, _, body := e.do("POST", "/deployments/"+id+"/logs/token", alice, nil, &tok)
		require.Equal(t, 201, code, string(body))
		assert.WithinDuration(t, time.Now().Add(5*time.Minute), tok.ExpiresAt, time.Minute)

		s := e.openLogs("/deployments/"+id+"/logs?token="+url.QueryEscape(tok.Token), "", nil)
		require.Equal(t, 200, s.res.StatusCode)
		require.Equal(t, "ready", s.nextEvent().Type)
		assert.NotEmpty(t, s.logsUntilDone())

		for _, path := range []string{
			"/deployments/" + other + "/logs?token=" + url.QueryEscape(tok.Token), // another deployment
			"/deployments/" + id + "/logs?token=" + url.QueryEscape(tok.Token+"x"),
			"/deployments/" + id + "/logs?token=garbage",
			"/deployments/" + id + "/logs",
		} {
			s := e.openLogs(path, "", nil)
			assert.Equal(t, 401, s.res.StatusCode, path)
		}
		// The token is for the logs route only.
		req, _ := http.NewRequest("GET", e.srv.URL+"/deployments/"+id+"?token="+url.QueryEscape(tok.Token), nil)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, 401, res.StatusCode)
	})
}

func TestLogStreamHeartbeats(t *testing.T) {
	t.Parallel()
	bdb := dbtest.SQLite(t, sets...)
	e := newEnv(t, bdb, envOpts{heartbeat: 10 * time.Millisecond})
	alice := platform.NewID()
	hold := e.rt.HoldBuild("idle")
	id := e.trigger(alice, e.project(alice, "idle"))
	hold.WaitEntered(t)
	s := e.openLogs("/deployments/"+id+"/logs", alice, nil)
	require.Equal(t, "ready", s.nextEvent().Type)
	for {
		if ev := s.next(); ev.Comment != "" {
			assert.Equal(t, "ping", ev.Comment)
			break
		}
	}
	hold.Release(nil)
	s.logsUntilDone()
}
