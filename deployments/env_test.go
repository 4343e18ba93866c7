package deployments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/deployments/local"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/uptrace/bun"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	dbtest.MainCheck(m, func() error {
		return platformtest.FindLeaks(
			// database/sql and the Postgres driver keep these until GC.
			goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
			goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		)
	})
}

var sets = []db.MigrationSet{deployments.Migrations()}

// env is a deployments module over a real database, the local engine and the
// scripted runtime, served over real HTTP.
type env struct {
	t        *testing.T
	db       *bun.DB
	store    *deployments.Store
	logs     *deployments.Logs
	acts     *deployments.Activities
	eng      *local.Engine
	svc      *deployments.Service
	rt       *deploytest.Runtime
	projects *deploytest.Projects
	srv      *httptest.Server
	closed   bool
}

type envOpts struct {
	rt        *deploytest.Runtime
	projects  *deploytest.Projects
	git       deployments.GitCredentials
	logsCfg   deployments.LogsConfig
	heartbeat time.Duration
	noStart   bool
	maxConc   int
	perUser   int
	shares    deployments.Shares
	metrics   deployments.Metrics
	streams   deployments.StreamGate
}

func newEnv(t *testing.T, bdb *bun.DB, o envOpts) *env {
	t.Helper()
	if o.rt == nil {
		o.rt = deploytest.NewRuntime()
	}
	if o.projects == nil {
		o.projects = deploytest.NewProjects()
	}
	e := &env{t: t, db: bdb, rt: o.rt, projects: o.projects}
	var err error
	e.svc, err = deployments.New(deployments.Deps{
		DB: bdb, Auth: deploytest.Authn{}, Projects: e.projects, Runtime: e.rt, Git: o.git, Logs: o.logsCfg,
		LogTokenKey: bytes.Repeat([]byte("k"), 32), Heartbeat: o.heartbeat, Metrics: o.metrics, Streams: o.streams,
		NewEngine: func(ed deployments.EngineDeps) (deployments.Engine, error) {
			e.acts = ed.Activities
			e.eng, err = local.New(local.Config{Store: ed.Store, Activities: ed.Activities, MaxConcurrent: o.maxConc, PerUser: o.perUser, Shares: o.shares})
			return e.eng, err
		},
	})
	must(t, err)
	e.store, e.logs = deployments.NewStore(bdb), e.svc.Logs()
	mux := http.NewServeMux()
	api := humago.New(mux, platform.APIConfig("test", "1"))
	must(t, e.svc.Register(api))
	e.srv = httptest.NewServer(mux)
	if !o.noStart {
		must(t, e.eng.Start(context.Background()))
	}
	t.Cleanup(e.close)
	return e
}

// close stops the server, the engine and the log writer (as a shutdown does).
func (e *env) close() {
	if e.closed {
		return
	}
	e.closed = true
	e.srv.CloseClientConnections()
	e.srv.Close()
	_ = e.svc.Close(context.Background()) // the engine, then the log writer
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// project adds a project of owner and returns its ID.
func (e *env) project(owner, slug string, mod ...func(*deployments.DeploySpec)) string {
	s := deployments.DeploySpec{OwnerID: owner, Slug: slug, Name: slug, RepoURL: "https://example.test/" + slug + ".git",
		Framework: "go", Port: 8080, Region: "local"}
	for _, m := range mod {
		m(&s)
	}
	return e.projects.Add(s)
}

// do sends a request as user ("" = no token) and decodes a JSON answer into out (if not nil).
func (e *env) do(method, path, user string, body any, out any) (int, http.Header, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	must(e.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+deploytest.Token(user))
	}
	res, err := http.DefaultClient.Do(req)
	must(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(e.t, err)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return res.StatusCode, res.Header, b
}

type triggered struct {
	DeploymentID string `json:"deploymentId"`
	WorkflowName string `json:"workflowName"`
	Status       string `json:"status"`
}

// trigger POSTs /deployments and expects 201.
func (e *env) trigger(user, projectID string) string {
	e.t.Helper()
	var tr triggered
	code, _, b := e.do("POST", "/deployments", user, map[string]string{"projectId": projectID}, &tr)
	if code != 201 {
		e.t.Fatalf("trigger: %d %s", code, b)
	}
	return tr.DeploymentID
}

// get reads a deployment from the store.
func (e *env) get(id string) *deployments.Deployment {
	e.t.Helper()
	d, err := e.store.DeploymentGet(context.Background(), id)
	must(e.t, err)
	return d
}

// waitStatus waits until the deployment has status s.
func (e *env) waitStatus(id string, s deployments.Status) *deployments.Deployment {
	e.t.Helper()
	var d *deployments.Deployment
	platformtest.Eventually(e.t, 20*time.Second, "deployment "+id+" to be "+string(s), func() bool {
		var err error
		d, err = e.store.DeploymentGet(context.Background(), id)
		must(e.t, err)
		if (d.Status == deployments.StatusFailed || d.Status == deployments.StatusCancelled) && d.Status != s {
			e.t.Fatalf("deployment %s ended %s (%s), want %s", id, d.Status, d.ErrorMessage, s)
		}
		return d.Status == s
	})
	return d
}

// lines returns the stored log lines of a deployment (after a flush).
func (e *env) lines(id string) []deployments.LogLine {
	e.t.Helper()
	must(e.t, e.logs.Flush(context.Background()))
	ls, err := e.store.LogList(context.Background(), deployments.LogListParams{DeploymentID: id, Limit: 100000})
	must(e.t, err)
	return ls
}
