// Package deploytest holds test doubles for the deployments packages' unit
// tests: a scripted Runtime (the real process runtime is tested in its own
// package and in the server's end-to-end tests), an in-memory ProjectSource,
// a token Authenticator, and a polling helper. Test code only.
package deploytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Runtime is a scripted deployments.Runtime. By default a build logs a few
// lines (including the value of every env var, so masking can be checked) and
// succeeds with commit "abc1234"; an app starts at once. Holds and failures
// are set per project slug for the next build.
type Runtime struct {
	mu       sync.Mutex
	holds    map[string][]*Hold
	fails    map[string]error
	startErr map[string]error
	routes   map[string]string // slug -> deployment
	apps     map[string]bool   // deployment -> running
	builds   []string          // deployment IDs in build order
	stopped  map[string]int
	cleaned  map[string]int
	port     int
	// BuildLines is how many extra output lines each build logs.
	BuildLines int
}

// NewRuntime returns a Runtime with nothing scripted.
func NewRuntime() *Runtime {
	return &Runtime{holds: map[string][]*Hold{}, fails: map[string]error{}, startErr: map[string]error{},
		routes: map[string]string{}, apps: map[string]bool{}, stopped: map[string]int{}, cleaned: map[string]int{}, port: 40000}
}

var _ deployments.Runtime = (*Runtime)(nil)

// Hold pauses a build until released (or its context ends).
type Hold struct {
	entered chan struct{}
	release chan error
	id      string
	slug    string
}

// Entered is closed when the held build has started.
func (h *Hold) Entered() <-chan struct{} { return h.entered }

// WaitEntered waits until the held build has started, and fails t if it has
// not within a minute: a build that never comes fails the test, not hangs it.
func (h *Hold) WaitEntered(t testing.TB) {
	t.Helper()
	platformtest.Receive(t, h.entered, time.Minute, "the held build of "+h.slug+" to start")
}

// DeploymentID is the held build's deployment (valid after Entered).
func (h *Hold) DeploymentID() string { return h.id }

// Release lets the build finish with err (nil: success).
func (h *Hold) Release(err error) { h.release <- err }

// HoldBuild makes the next build of slug wait for Release.
func (r *Runtime) HoldBuild(slug string) *Hold {
	h := &Hold{entered: make(chan struct{}), release: make(chan error, 1), slug: slug}
	r.mu.Lock()
	r.holds[slug] = append(r.holds[slug], h)
	r.mu.Unlock()
	return h
}

// FailBuild makes the next build of slug fail with err after logging its output.
func (r *Runtime) FailBuild(slug string, err error) {
	r.mu.Lock()
	r.fails[slug] = err
	r.mu.Unlock()
}

// FailStart makes the next app start of slug fail.
func (r *Runtime) FailStart(slug string, err error) {
	r.mu.Lock()
	r.startErr[slug] = err
	r.mu.Unlock()
}

// Build logs its output and succeeds, unless held or told to fail.
func (r *Runtime) Build(ctx context.Context, job deployments.Job, logs deployments.LogSink) (string, error) {
	r.mu.Lock()
	r.builds = append(r.builds, job.DeploymentID)
	var h *Hold
	if hs := r.holds[job.ProjectSlug]; len(hs) > 0 {
		h, r.holds[job.ProjectSlug] = hs[0], hs[1:]
	}
	fail := r.fails[job.ProjectSlug]
	delete(r.fails, job.ProjectSlug)
	n := r.BuildLines
	r.mu.Unlock()
	logs.Log(deployments.StreamBuild, "cloning "+job.RepoURL)
	for _, e := range job.Env {
		logs.Log(deployments.StreamBuild, fmt.Sprintf("env %s=%s", e.Key, e.Value))
	}
	if job.GitAuth != nil {
		logs.Log(deployments.StreamBuild, "git auth "+job.GitAuth.Password)
	}
	for i := range n {
		logs.Log(deployments.StreamBuild, fmt.Sprintf("build line %d", i+1))
	}
	if h != nil {
		h.id = job.DeploymentID
		close(h.entered)
		select {
		case err := <-h.release:
			if err != nil {
				return "", err
			}
		case <-ctx.Done():
			logs.Log(deployments.StreamBuild, "build killed")
			return "", ctx.Err()
		}
	}
	if fail != nil {
		logs.Log(deployments.StreamBuild, "compile error: undefined: foo")
		return "", fail
	}
	return "abc1234", nil
}

// Start "starts" the app: it is marked running and given an upstream address.
func (r *Runtime) Start(ctx context.Context, job deployments.Job, logs deployments.LogSink) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.startErr[job.ProjectSlug]; err != nil {
		delete(r.startErr, job.ProjectSlug)
		return "", err
	}
	r.apps[job.DeploymentID] = true
	r.port++
	logs.Log(deployments.StreamApp, "listening")
	return fmt.Sprintf("127.0.0.1:%d", r.port), nil
}

// Route points slug at the deployment.
func (r *Runtime) Route(_ context.Context, slug, deploymentID, upstream string) (string, error) {
	if upstream == "" {
		return "", errors.New("no upstream")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes[slug] = deploymentID
	return "http://" + slug + ".apps.test", nil
}

// Unroute removes slug's route if it points at the deployment.
func (r *Runtime) Unroute(_ context.Context, slug, deploymentID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes[slug] == deploymentID {
		delete(r.routes, slug)
	}
	return nil
}

// Stop stops the deployment's app.
func (r *Runtime) Stop(_ context.Context, deploymentID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.apps, deploymentID)
	r.stopped[deploymentID]++
	return nil
}

// Cleanup removes the workspace.
func (r *Runtime) Cleanup(_ context.Context, deploymentID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleaned[deploymentID]++
	return nil
}

// RouteOf returns the deployment slug routes to ("" if none).
func (r *Runtime) RouteOf(slug string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes[slug]
}

// Running reports whether the deployment's app runs.
func (r *Runtime) Running(deploymentID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apps[deploymentID]
}

// Cleaned reports whether the deployment's workspace was removed.
func (r *Runtime) Cleaned(deploymentID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cleaned[deploymentID] > 0
}

// Builds returns the deployment IDs in the order their builds started.
func (r *Runtime) Builds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.builds...)
}

// Projects is an in-memory ProjectSource.
type Projects struct {
	mu sync.Mutex
	m  map[string]*deployments.DeploySpec
}

// NewProjects returns an empty source.
func NewProjects() *Projects { return &Projects{m: map[string]*deployments.DeploySpec{}} }

// Add stores spec under a new project ID and returns the ID.
func (p *Projects) Add(spec deployments.DeploySpec) string {
	id := platform.NewID()
	p.mu.Lock()
	p.m[id] = &spec
	p.mu.Unlock()
	return id
}

// SetOwner moves a project to another owner account (as if moved to or
// from a team).
func (p *Projects) SetOwner(id, owner string) {
	p.mu.Lock()
	p.m[id].OwnerID = owner
	p.mu.Unlock()
}

// Pin pins a project to host id, whose task queue is queue ("" for none).
func (p *Projects) Pin(id, host, queue string) {
	p.mu.Lock()
	p.m[id].PinnedHost, p.m[id].PinnedQueue = host, queue
	p.mu.Unlock()
}

// Remove forgets a project (as if deleted).
func (p *Projects) Remove(id string) {
	p.mu.Lock()
	delete(p.m, id)
	p.mu.Unlock()
}

// ProjectForDeploy implements deployments.ProjectSource.
func (p *Projects) ProjectForDeploy(_ context.Context, id string) (*deployments.DeploySpec, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.m[id]
	if !ok {
		return nil, platform.ErrNotFound
	}
	c := *s
	return &c, nil
}

// Authn authenticates "token-<userID>" bearer tokens.
type Authn struct{}

// Authenticate implements platform.Authenticator.
func (Authn) Authenticate(_ context.Context, token string) (platform.Principal, error) {
	const prefix = "token-"
	if len(token) <= len(prefix) || token[:len(prefix)] != prefix {
		return platform.Principal{}, platform.ErrUnauthorized
	}
	return platform.Principal{UserID: token[len(prefix):], Role: platform.RoleUser}, nil
}

// Token is the bearer token Authn accepts for userID.
func Token(userID string) string { return "token-" + userID }
