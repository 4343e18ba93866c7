package runtimetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// healthWait: an app that never answers, or exits first, fails its start
// with its last output; then the app starts afresh and answers.
func (c *suite) healthWait(t *testing.T) {
	for _, tc := range []struct{ mode, err, output string }{
		{"silent", "the app did not answer HTTP on port", "staying silent"},
		{"exit", "the app exited before answering HTTP (exit", "exiting at once"},
	} {
		logs := &Sink{}
		_, err := c.Runtime.Start(context.Background(), c.withMode(tc.mode), logs)
		require.Error(t, err, tc.mode)
		assert.Contains(t, err.Error(), tc.err)
		assert.Contains(t, err.Error(), tc.output, "the error carries the app's last output")
		assert.True(t, logs.Has("system: "+tc.err), logs.All())
	}
	up, logs := c.start(t, "serve")
	assert.True(t, logs.Has("system: app answers HTTP on "+up), logs.All())
	c.answers(t)
}

// answers checks that the app answers through the ingress.
func (c *suite) answers(t *testing.T) {
	t.Helper()
	code, body, err := c.get("/")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "hello", body)
}

// crashBackoffAndGiveUp: each crash within the window is restarted after a
// backoff that doubles; one crash more than MaxRestarts is given up and the
// route goes; a Start brings the app back.
func (c *suite) crashBackoffAndGiveUp(t *testing.T) {
	up, logs := c.start(t, "serve")
	run := c.pid()
	require.NotEmpty(t, run)
	for i := range maxRestarts {
		run, up = c.crashAndRestart(t, logs, run, up, restartBackoff<<i)
	}
	_, _, _ = c.get("/crash")
	platformtest.Eventually(t, hang, "the supervisor to give up", func() bool { return logs.Has("its route is removed") })
	assert.True(t, logs.Has(fmt.Sprintf(" %d times within %s; not restarting it", maxRestarts+1, restartWindow)), logs.All())
	_, routed := c.router.Lookup(c.job.ProjectSlug)
	assert.False(t, routed, "a given-up app keeps no route")
	code, _, err := c.get("/")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNotFound, code)

	c.start(t, "serve")
	c.answers(t)
}

// crashWindow: a crash once the window has passed since the last is the
// first of a new window: the backoff starts over and nothing is given up.
func (c *suite) crashWindow(t *testing.T) {
	up, logs := c.start(t, "serve")
	run := c.pid()
	require.NotEmpty(t, run)
	run, up = c.crashAndRestart(t, logs, run, up, restartBackoff)
	for range maxRestarts + 1 {
		c.clock.Advance(restartWindow + time.Second)
		run, up = c.crashAndRestart(t, logs, run, up, restartBackoff)
	}
	assert.False(t, logs.Has("not restarting it"), logs.All())
}

// restartRoutedOnceAnswering: a restart that moves the app moves its route
// only once the new run answers there, never to a port it does not listen
// on yet (the app takes a second to listen).
func (c *suite) restartRoutedOnceAnswering(t *testing.T) {
	if !c.MovesOnRestart {
		t.Skip("the runtime keeps an app's upstream across restarts")
	}
	up, _ := c.start(t, "slow")
	_, _, _ = c.get("/crash")
	c.clock.Advance(c.clock.NextWait(t, hang))
	var moved string
	platformtest.Eventually(t, hang, "the route to move", func() bool {
		route, ok := c.router.Lookup(c.job.ProjectSlug)
		moved = route.Upstream
		return ok && moved != up
	})
	code, _, err := get(c.ingress.Client(), "http://"+moved+"/pid", "")
	require.NoError(t, err, "the route moved to %s before the app answered there", moved)
	assert.Equal(t, http.StatusOK, code)
}

// crashAndRestart crashes the app through the ingress: the supervisor waits
// backoff on the clock, and only then runs the app again; its route leads to
// the new run (moved when the runtime moves it). It returns the new run and
// upstream.
func (c *suite) crashAndRestart(t *testing.T, logs *Sink, run, up string, backoff time.Duration) (string, string) {
	t.Helper()
	_, _, _ = c.get("/crash")
	require.Equal(t, backoff, c.clock.NextWait(t, hang), "the backoff")
	assert.True(t, logs.Has("system: the app exited (exit"), logs.All())
	assert.True(t, logs.Has(fmt.Sprintf("system: restarting the app in %s", backoff)), logs.All())
	assert.Empty(t, c.pid(), "nothing runs before the backoff has passed on the clock")
	c.restarting(t)

	c.clock.Advance(backoff)
	var next string
	platformtest.Eventually(t, hang, "the app to run again", func() bool {
		next = c.pid()
		return next != ""
	})
	assert.NotEqual(t, run, next)
	route, ok := c.router.Lookup(c.job.ProjectSlug)
	require.True(t, ok)
	if c.MovesOnRestart {
		assert.NotEqual(t, up, route.Upstream, "the restart moved the app and its route followed")
	}
	code, direct, err := get(c.ingress.Client(), "http://"+route.Upstream+"/pid", "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, next, direct, "the route leads to the new run")
	return next, route.Upstream
}

// restarting checks that the crashed app's route answers 503, naming the
// restart, without a dial to its upstream.
func (c *suite) restarting(t *testing.T) {
	t.Helper()
	route, ok := c.router.Lookup(c.job.ProjectSlug)
	require.True(t, ok, "a crashed app keeps its route while it restarts")
	assert.True(t, route.Down, "the crashed app's route is down")
	code, body, err := c.get("/pid")
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Equal(t, fmt.Sprintf("the app %q is restarting\n", c.job.ProjectSlug), body)
}

// crashedPortTaken: another process binds the port a crashed app freed
// before the app is restarted (the process runtime's apps share the host's
// ports); no request reaches it, and the restarted app answers elsewhere.
func (c *suite) crashedPortTaken(t *testing.T) {
	if !c.MovesOnRestart {
		t.Skip("the runtime's apps do not share ports with other processes")
	}
	up, logs := c.start(t, "serve")
	_, _, _ = c.get("/crash")
	backoff := c.clock.NextWait(t, hang)
	reached := make(chan string, 16)
	foreign := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.Path
		_, _ = w.Write([]byte("not the app"))
	}))
	ln, err := net.Listen("tcp", up)
	require.NoError(t, err, "binding the port the crashed app freed")
	foreign.Listener.Close()
	foreign.Listener = ln
	foreign.Start()
	t.Cleanup(foreign.Close)
	for range 3 {
		c.restarting(t)
	}

	c.clock.Advance(backoff)
	platformtest.Eventually(t, hang, "the app to answer again", func() bool { return c.pid() != "" })
	c.answers(t)
	select {
	case path := <-reached:
		t.Fatalf("a request for the app (%s) reached the process on its old port; logs:\n%s", path, logs.All())
	default:
	}
}

// drain: Stop lets a request in flight through the ingress finish before
// it stops the app (within StopGrace).
func (c *suite) drain(t *testing.T) {
	up, logs := c.start(t, "serve")
	type answer struct {
		code int
		body string
		err  error
	}
	held := make(chan answer, 1)
	go func() {
		code, body, err := c.get("/hold")
		held <- answer{code, body, err}
	}()
	platformtest.Eventually(t, hang, "the request to reach the app", func() bool { return logs.Has("app: holding a request") })
	stopped := make(chan error, 1)
	go func() { stopped <- c.Runtime.Stop(context.Background(), c.job.DeploymentID) }()

	// Stop drains first: the app still runs to be told to answer, and the
	// answer is not cut off (a Stop that stopped the app at once would).
	code, _, err := get(c.ingress.Client(), "http://"+up+"/release", "")
	require.NoError(t, err, "the app runs while a request to it is in flight")
	assert.Equal(t, http.StatusOK, code)
	a := <-held
	require.NoError(t, a.err)
	assert.Equal(t, http.StatusOK, a.code)
	assert.Equal(t, "released", a.body)
	require.NoError(t, <-stopped)
	_, _, err = get(c.ingress.Client(), "http://"+up+"/", "")
	assert.Error(t, err, "nothing answers once Stop returned")
}
