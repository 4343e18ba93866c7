package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// The scaled-out form (README "Scaling out"): Temporal runs the deployments,
// API replicas and workers are separate processes over one Postgres database.
// Each NewApp here is one such process with its own data dir; they share only
// the database, the secrets and the Temporal dev server.

// scaleOut starts two API replicas and one worker over one fresh Postgres
// database and the dev server at temporalAddr, on a task queue of their own.
func scaleOut(t *testing.T, temporalAddr string) (a, b, worker *testServer) {
	t.Helper()
	dbURL := dbtest.PostgresURL(t)
	queue := "keelson-e2e-" + platformtest.Unique(8)
	role := func(r string) func(*Config) {
		return func(c *Config) {
			c.Engine, c.TemporalAddress, c.TemporalTaskQueue, c.Role = "temporal", temporalAddr, queue, r
		}
	}
	worker = startServer(t, dbURL, role(RoleWorker))
	a = startServer(t, dbURL, role(RoleAPI))
	b = startServer(t, dbURL, role(RoleAPI))
	return a, b, worker
}

// sseEvent is one event of a log stream.
type sseEvent struct {
	ID      string
	Type    string `json:"type"`
	Cursor  int64  `json:"cursor"`
	Message string `json:"message"`
}

// sseStream reads a deployment's log stream in the background.
type sseStream struct {
	events chan sseEvent
	cancel context.CancelFunc
	log    []sseEvent // log events received so far (by next)
}

func openLogStream(t *testing.T, ts *testServer, token, id string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/deployments/"+id+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		res.Body.Close()
		t.Fatalf("logs: status %d", res.StatusCode)
	}
	s := &sseStream{events: make(chan sseEvent, 1024), cancel: cancel}
	t.Cleanup(cancel)
	go func() {
		defer close(s.events)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var id string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "data: "):
				var ev sseEvent
				if json.Unmarshal([]byte(line[6:]), &ev) != nil {
					ev.Type = "undecodable: " + line
				}
				ev.ID, id = id, ""
				s.events <- ev
			}
		}
	}()
	return s
}

// next returns the stream's next event; the deadline only guards against a hang.
func (s *sseStream) next(t *testing.T, deadline time.Time) sseEvent {
	t.Helper()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("the stream ended without done after %d lines", len(s.log))
		}
		if ev.Type == "log" {
			s.log = append(s.log, ev)
		}
		return ev
	case <-timer.C:
		t.Fatalf("no stream event in time; %d lines so far", len(s.log))
		return sseEvent{}
	}
}

// until reads events until one satisfies stop (failing on done or error first
// unless stop accepts it).
func (s *sseStream) until(t *testing.T, what string, stop func(sseEvent) bool) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		ev := s.next(t, deadline)
		if stop(ev) {
			return
		}
		if ev.Type == "done" || ev.Type == "error" {
			t.Fatalf("stream %s (%q) before %s", ev.Type, ev.Message, what)
		}
	}
}

func TestScaleOutTemporalE2E(t *testing.T) {
	t.Parallel()
	srv := temporaltest.StartDevServer(t)
	a, b, worker := scaleOut(t, srv.FrontendHostPort())

	// Roles: API replicas run no ingress; the worker serves health checks only.
	if a.Ingress != "" || b.Ingress != "" || worker.Ingress == "" {
		t.Fatalf("ingress: api %q %q, worker %q", a.Ingress, b.Ingress, worker.Ingress)
	}
	if st, _, _ := worker.do(t, "GET", "/healthz", "", nil); st != http.StatusOK {
		t.Fatalf("worker /healthz: %d", st)
	}
	if st, _, _ := worker.do(t, "GET", "/readyz", "", nil); st != http.StatusOK {
		t.Fatalf("worker /readyz: %d", st)
	}
	if st, _, _ := worker.do(t, "POST", "/auth/register", "", map[string]any{"email": "w@example.com"}); st != http.StatusNotFound {
		t.Fatalf("worker serves the API: POST /auth/register answered %d", st)
	}

	alice := a.signup(t, "alice@example.com")
	gates := t.TempDir()
	gate1, gate2 := filepath.Join(gates, "one"), filepath.Join(gates, "two")
	_, bare := newRepo(t, goApp("scaled"))
	var p struct {
		ID   string `json:"id"`
		Slug string `json:"slug"`
	}
	a.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
		"name": "Scaled App", "repoUrl": "file://" + bare, "framework": "go", "port": 8080,
	}, &p)
	const secret = "tok-scaled-5ecret-77"
	a.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
		"region": "local", "planName": "free",
		"envVars": []any{map[string]any{"key": "API_TOKEN", "value": secret, "isSecret": true}},
		// Output at two gates the test opens once replica B is streaming, so
		// these lines are produced (by the worker) while B's client listens.
		"buildCommand": "echo waiting for gate one; while [ ! -f " + gate1 + " ]; do sleep 0.1; done; " +
			"for i in $(seq 1 40); do echo build line $i; done; " +
			"while [ ! -f " + gate2 + " ]; do sleep 0.1; done; go build -o app .",
		"startCommand": "./app",
	}, nil)

	t.Run("logs of a worker's build stream live from another replica", func(t *testing.T) {
		var tr struct {
			DeploymentID string `json:"deploymentId"`
			WorkflowName string `json:"workflowName"`
			Status       string `json:"status"`
		}
		a.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		if tr.Status != "QUEUED" || tr.WorkflowName != "deploy-"+tr.DeploymentID {
			t.Fatalf("trigger: %+v", tr)
		}
		s := openLogStream(t, b, alice, tr.DeploymentID)
		if ev := s.next(t, time.Now().Add(time.Minute)); ev.Type != "ready" {
			t.Fatalf("first event %+v, want ready", ev)
		}
		if err := os.WriteFile(gate1, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		// The worker prints 40 lines, then waits at gate two: B's client
		// must get them while the deployment is still building.
		s.until(t, "build line 40", func(ev sseEvent) bool { return ev.Message == "build line 40" })
		var st e2eStatus
		a.doJSON(t, http.StatusOK, "GET", "/deployments/"+tr.DeploymentID+"/status", alice, nil, &st)
		if st.Status != "BUILDING" {
			t.Fatalf("status %s while the build waits at gate two", st.Status)
		}
		if err := os.WriteFile(gate2, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		s.until(t, "done", func(ev sseEvent) bool { return ev.Type == "done" })

		// Every stored line, in order, exactly once, each with its cursor as id.
		stored, err := b.App.Deployments.LogLines(context.Background(), ownerOf(t, b, alice), tr.DeploymentID, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		live := -1
		for i, ln := range stored {
			if strings.HasPrefix(ln.Message, "deployment is LIVE at") {
				live = i
			}
		}
		if live < 0 || len(s.log) < live+1 || len(s.log) > len(stored) {
			t.Fatalf("stream sent %d lines; %d stored, LIVE line at %d", len(s.log), len(stored), live)
		}
		for i, ev := range s.log {
			if ev.Cursor != int64(i+1) || ev.ID != strconv.Itoa(i+1) || ev.Cursor != stored[i].Seq || ev.Message != stored[i].Message {
				t.Fatalf("line %d: got cursor %d id %q %q, stored seq %d %q", i, ev.Cursor, ev.ID, ev.Message, stored[i].Seq, stored[i].Message)
			}
			if strings.Contains(ev.Message, secret) {
				t.Fatal("the secret reached the log stream")
			}
		}
		all := ""
		for _, ev := range s.log {
			all += ev.Message + "\n"
		}
		for _, want := range []string{"deployment queued", "BUILD started", "waiting for gate one", "build line 1\n", "starting with token ***"} {
			if !strings.Contains(all, want) {
				t.Fatalf("stream lacks %q:\n%s", want, all)
			}
		}

		final, _ := waitDeployment(t, b, alice, tr.DeploymentID)
		if final.Status != "LIVE" {
			t.Fatalf("deployment %s: %s", final.Status, final.ErrorMessage)
		}
		for _, step := range final.Steps {
			if step.Status != "SUCCEEDED" {
				t.Fatalf("step %+v", step)
			}
		}
		// The app answers through the worker's ingress.
		if got := getApp(t, worker, final.DeployedURL, p.Slug); got != "version scaled" {
			t.Fatalf("app says %q", got)
		}
		// The worker registered its host, which an API replica lists: one
		// host, active, on the queue the deployment recorded.
		hs, err := a.App.Hosts.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		row, err := deployments.NewStore(worker.App.DB).DeploymentGet(context.Background(), tr.DeploymentID)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != 1 || hs[0].State != "active" || hs[0].Queue != row.Host || hs[0].CPUs < 1 || a.App.localHost != nil {
			t.Fatalf("hosts: %+v; deployment's host %q; the API replica registers no host", hs, row.Host)
		}
	})

	t.Run("cancel mid-build through the API ends CANCELLED", func(t *testing.T) {
		a.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
			"region": "local", "planName": "free",
			"envVars":      []any{map[string]any{"key": "API_TOKEN", "value": secret, "isSecret": true}},
			"buildCommand": "echo building forever; exec sleep 600",
		}, nil)
		var tr struct {
			DeploymentID string `json:"deploymentId"`
		}
		b.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		s := openLogStream(t, a, alice, tr.DeploymentID)
		s.until(t, "the build runs", func(ev sseEvent) bool { return ev.Message == "building forever" })

		var got struct {
			Status string `json:"status"`
		}
		a.doJSON(t, http.StatusOK, "POST", "/deployments/"+tr.DeploymentID+"/cancel", alice, nil, &got)
		if got.Status != "CANCELLED" {
			t.Fatalf("cancel answered %s", got.Status)
		}
		var st e2eStatus
		b.doJSON(t, http.StatusOK, "GET", "/deployments/"+tr.DeploymentID+"/status", alice, nil, &st)
		if st.Status != "CANCELLED" {
			t.Fatalf("status after cancel: %s", st.Status)
		}
		for _, step := range st.Steps {
			want := map[string]string{"BUILD": "FAILED", "PROVISION": "SKIPPED", "DNS": "SKIPPED"}[step.Name]
			if want != "" && step.Status != want {
				t.Fatalf("step %s is %s, want %s", step.Name, step.Status, want)
			}
		}
		s.until(t, "done", func(ev sseEvent) bool { return ev.Type == "done" })
		// The live deployment keeps serving.
		if got := getApp(t, worker, "", p.Slug); got != "version scaled" {
			t.Fatalf("app says %q after the cancelled deployment", got)
		}
	})

	t.Run("start-up errors name the variable", func(t *testing.T) {
		check := func(mutate func(*Config), wantVar, wantText string) {
			t.Helper()
			cfg, err := LoadConfig(func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			cfg.DataDir = testDataDir(t)
			cfg.Runtime = "process"
			cfg.Engine, cfg.TemporalAddress = "temporal", srv.FrontendHostPort()
			mutate(&cfg)
			app, err := NewApp(context.Background(), cfg, a.App.Log)
			if err == nil {
				app.Close(context.Background())
				t.Fatalf("NewApp started with %+v", cfg)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Var != wantVar || !strings.Contains(err.Error(), wantText) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %q, want one line naming %s with %q", err, wantVar, wantText)
			}
		}
		check(func(c *Config) { c.TemporalNamespace = "no-such-namespace" }, "KEELSON_TEMPORAL_NAMESPACE", `"no-such-namespace" does not exist`)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := l.Addr().String()
		l.Close() // nothing listens there now
		check(func(c *Config) { c.TemporalAddress = closed }, "KEELSON_TEMPORAL_ADDRESS", "cannot reach Temporal at "+closed)
	})
}

func TestScaleOutConfigErrors(t *testing.T) {
	t.Parallel()
	pg := "postgres://u:p@db:5432/keelson"
	temporal := map[string]string{"KEELSON_ENGINE": "temporal", "KEELSON_TEMPORAL_ADDRESS": "temporal:7233", "KEELSON_DATABASE_URL": pg}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		env      map[string]string
		wantVar  string
		wantText string
	}{
		{map[string]string{"KEELSON_ROLE": "scheduler"}, "KEELSON_ROLE", `"scheduler" is not all, api or worker`},
		{map[string]string{"KEELSON_ROLE": "api"}, "KEELSON_ROLE", "needs KEELSON_ENGINE=temporal"},
		{map[string]string{"KEELSON_ROLE": "worker", "KEELSON_DATABASE_URL": pg}, "KEELSON_ROLE", "needs KEELSON_ENGINE=temporal"},
		{with(temporal, "KEELSON_ROLE", "api", "KEELSON_DATABASE_URL", ""), "KEELSON_ROLE", "Postgres"},
		{with(temporal, "KEELSON_ROLE", "worker", "KEELSON_DATABASE_URL", "sqlite:///tmp/k.db"), "KEELSON_ROLE", "Postgres"},
		{with(temporal, "KEELSON_TEMPORAL_ADDRESS", "temporal"), "KEELSON_TEMPORAL_ADDRESS", "host:port"},
		{with(temporal, "KEELSON_TEMPORAL_ADDRESS", ":7233"), "KEELSON_TEMPORAL_ADDRESS", "host:port"},
		{with(temporal, "KEELSON_TEMPORAL_ADDRESS", "temporal:0"), "KEELSON_TEMPORAL_ADDRESS", "port"},
		{with(temporal, "KEELSON_TEMPORAL_NAMESPACE", "my namespace"), "KEELSON_TEMPORAL_NAMESPACE", "not a namespace name"},
		{with(temporal, "KEELSON_TEMPORAL_NAMESPACE", "x"), "KEELSON_TEMPORAL_NAMESPACE", "not a namespace name"},
		{with(temporal, "KEELSON_TEMPORAL_TASK_QUEUE", "deploy queue"), "KEELSON_TEMPORAL_TASK_QUEUE", "spaces"},
		{with(temporal, "KEELSON_TEMPORAL_TASK_QUEUE", "/_sys/keelson"), "KEELSON_TEMPORAL_TASK_QUEUE", "reserved"},
		{with(temporal, "KEELSON_TEMPORAL_TASK_QUEUE", strings.Repeat("q", 201)), "KEELSON_TEMPORAL_TASK_QUEUE", "longer than 200"},
	}
	for _, c := range cases {
		_, err := LoadConfig(func(k string) string { return c.env[k] })
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Var != c.wantVar || !strings.Contains(err.Error(), c.wantText) {
			t.Errorf("%v: got %v, want an error naming %s with %q", c.env, err, c.wantVar, c.wantText)
		}
	}

	// Defaults, and the scaled-out settings that are valid.
	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Role != RoleAll || cfg.TemporalNamespace != "default" || cfg.TemporalTaskQueue != "keelson-deployments" ||
		!cfg.ServesAPI() || !cfg.RunsWorker() {
		t.Fatalf("defaults: role %q namespace %q queue %q", cfg.Role, cfg.TemporalNamespace, cfg.TemporalTaskQueue)
	}
	for _, role := range []string{"api", "worker", "all", "API"} {
		cfg, err := LoadConfig(func(k string) string {
			return with(temporal, "KEELSON_ROLE", role, "KEELSON_TEMPORAL_NAMESPACE", "prod.keelson", "KEELSON_TEMPORAL_TASK_QUEUE", "keelson/eu-west")[k]
		})
		if err != nil {
			t.Fatalf("role %s: %v", role, err)
		}
		if cfg.Role != strings.ToLower(role) || cfg.TemporalNamespace != "prod.keelson" || cfg.TemporalTaskQueue != "keelson/eu-west" {
			t.Fatalf("role %s: %+v", role, cfg)
		}
		if cfg.ServesAPI() != (cfg.Role != RoleWorker) || cfg.RunsWorker() != (cfg.Role != RoleAPI) {
			t.Fatalf("role %s: serves API %v, runs worker %v", role, cfg.ServesAPI(), cfg.RunsWorker())
		}
	}
}
