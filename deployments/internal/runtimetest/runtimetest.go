// Package runtimetest is the supervisor contract every runtime keeps, written
// once: an app that does not answer or exits fails its start with its
// output; a crashed app is restarted after a backoff that doubles within the
// crash window and is given up (and unrouted) after too many crashes, all on
// a fake clock; a crashed app's route answers 503 until it answers again,
// never from another process on its port; a restart's route follows the app; Stop drains the requests
// in flight before it stops the app. Each runtime's tests call Run with a
// real runtime (real processes, real containers).
package runtimetest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// Settings are what the suite sets of the runtime under test; the runtime
// must use them as they are.
type Settings struct {
	Clock   *Clock
	Ingress *ingress.Router
	rt.Supervision
}

// Target is one runtime under test.
type Target struct {
	Runtime rt.Runtime
	// Job deploys the Go app of repo (the framework "go" preset), with what
	// the runtime needs added: environment, limits. The app listens on
	// $HOST:$PORT; Job sets HOST when the app must not listen on every
	// interface.
	Job func(repo string) rt.Job
	// MovesOnRestart: every restart gets another upstream (the process
	// runtime's tests make every port look taken), so the route must move.
	MovesOnRestart bool
}

// The suite's settings: a health wait of real seconds; restarts on the fake clock.
const (
	healthTimeout  = 10 * time.Second // a container restarted on a loaded machine answers within it
	stopGrace      = 30 * time.Second
	maxRestarts    = 2
	restartWindow  = 5 * time.Minute
	restartBackoff = 500 * time.Millisecond
	hang           = 2 * time.Minute // bounds a wait that should end much sooner
)

// Run runs the contract against the runtime newTarget makes with s. The app
// is built once; the cases start and stop it in turn.
func Run(t *testing.T, newTarget func(t *testing.T, s Settings) Target) {
	router, err := ingress.New(ingress.Config{PublicPort: 8081})
	require.NoError(t, err)
	srv := httptest.NewServer(router)
	t.Cleanup(func() {
		srv.Close()
		router.Close()
	})
	s := Settings{Clock: NewClock(), Ingress: router, Supervision: rt.Supervision{HealthTimeout: healthTimeout,
		StopGrace: stopGrace, MaxRestarts: maxRestarts, RestartWindow: restartWindow, RestartBackoff: restartBackoff}}
	target := newTarget(t, s)
	c := &suite{Target: target, clock: s.Clock, router: router, ingress: srv}
	c.job = target.Job(newRepo(t))
	logs := &Sink{}
	_, err = target.Runtime.Build(context.Background(), c.job, logs)
	require.NoError(t, err, logs.All())

	t.Run("HealthWait", c.healthWait)
	t.Run("CrashBackoffAndGiveUp", c.crashBackoffAndGiveUp)
	t.Run("CrashWindow", c.crashWindow)
	t.Run("RestartRoutedOnceAnswering", c.restartRoutedOnceAnswering)
	t.Run("CrashedPortTaken", c.crashedPortTaken)
	t.Run("Drain", c.drain)
}

type suite struct {
	Target
	clock   *Clock
	router  *ingress.Router
	ingress *httptest.Server
	job     rt.Job
}

// start starts the app with MODE=mode, routes it and returns its logs.
func (c *suite) start(t *testing.T, mode string) (string, *Sink) {
	t.Helper()
	logs := &Sink{}
	up, err := c.Runtime.Start(context.Background(), c.withMode(mode), logs)
	require.NoError(t, err, logs.All())
	_, err = c.Runtime.Route(context.Background(), c.job.ProjectSlug, c.job.DeploymentID, up)
	require.NoError(t, err)
	t.Cleanup(func() { c.stop(t) })
	return up, logs
}

func (c *suite) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	require.NoError(t, c.Runtime.Stop(ctx, c.job.DeploymentID))
	require.NoError(t, c.Runtime.Unroute(ctx, c.job.ProjectSlug, c.job.DeploymentID))
}

func (c *suite) withMode(mode string) rt.Job {
	job := c.job
	job.Env = append(append([]rt.EnvVar(nil), job.Env...), rt.EnvVar{Key: "MODE", Value: mode})
	return job
}

// get requests path through the ingress; err is a transport error.
func (c *suite) get(path string) (int, string, error) {
	return get(c.ingress.Client(), c.ingress.URL+path, c.job.ProjectSlug+".localhost")
}

func get(client *http.Client, url, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// pid names the app run answering through the ingress, "" when none does.
func (c *suite) pid() string {
	code, body, err := c.get("/pid")
	if err != nil || code != http.StatusOK {
		return ""
	}
	return body
}

// Sink collects log lines as "stream: line".
type Sink struct {
	mu    sync.Mutex
	lines []string
}

// Log implements rt.LogSink.
func (s *Sink) Log(stream, line string) {
	s.mu.Lock()
	s.lines = append(s.lines, stream+": "+line)
	s.mu.Unlock()
}

// All is every line so far.
func (s *Sink) All() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// Has reports whether a line so far contains sub.
func (s *Sink) Has(sub string) bool { return strings.Contains(s.All(), sub) }

// newRepo is a git repository of the test app.
func newRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"go.mod": "module example.com/contract\n\ngo 1.21\n", "main.go": appMain}
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "app"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	return dir
}

// appMain answers HTTP (MODE=serve), after a second (MODE=slow), stays
// silent (MODE=silent) or exits at once (MODE=exit). /crash exits with status 3; /hold answers once /release
// was requested.
const appMain = `package main

import (
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

func main() {
	switch os.Getenv("MODE") {
	case "exit":
		fmt.Println("exiting at once")
		os.Exit(4)
	case "silent":
		fmt.Println("staying silent")
		time.Sleep(time.Hour)
	case "slow":
		fmt.Println("listening in a second")
		time.Sleep(time.Second)
	}
	started := time.Now().UnixNano()
	release := make(chan struct{})
	var once sync.Once
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	http.HandleFunc("/pid", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, os.Getpid(), "-", started) })
	http.HandleFunc("/crash", func(w http.ResponseWriter, r *http.Request) { os.Exit(3) })
	http.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("holding a request")
		<-release
		fmt.Fprint(w, "released")
	})
	http.HandleFunc("/release", func(w http.ResponseWriter, r *http.Request) { once.Do(func() { close(release) }) })
	if err := http.ListenAndServe(os.Getenv("HOST")+":"+os.Getenv("PORT"), nil); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
`
