package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// goApp is a small Go web app: it answers "version <v>" on $PORT, prints its
// secret at start (the log must mask it) and drains on SIGTERM.
func goApp(version string) map[string]string {
	return map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.21\n",
		"main.go": `package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	srv := &http.Server{Addr: "127.0.0.1:" + os.Getenv("PORT"), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "version ` + version + `")
	})}
	fmt.Println("starting with token", os.Getenv("API_TOKEN"))
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			panic(err)
		}
	}()
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	<-c
	srv.Shutdown(context.Background())
}
`,
	}
}

type e2eStatus struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Steps  []struct {
		Name       string     `json:"name"`
		Status     string     `json:"status"`
		StartedAt  *time.Time `json:"startedAt"`
		FinishedAt *time.Time `json:"finishedAt"`
	} `json:"steps"`
	DeployedURL   string   `json:"deployedUrl"`
	ErrorMessage  string   `json:"errorMessage"`
	BuildDuration *float64 `json:"buildDuration"`
	Region        string   `json:"region"`
}

// newRepo makes a bare repository holding files on main and returns (work, bare).
func newRepo(t testing.TB, files map[string]string) (string, string) {
	t.Helper()
	root := t.TempDir()
	work, bare := filepath.Join(root, "work"), filepath.Join(root, "app.git")
	gitRun(t, root, "init", "-q", "--bare", "-b", "main", bare)
	gitRun(t, root, "init", "-q", "-b", "main", work)
	commit(t, work, bare, "main", files, "first")
	return work, bare
}

// waitDeployment polls the status route until the deployment is terminal and
// returns the statuses it saw, in order, without repeats.
func waitDeployment(t *testing.T, ts *testServer, token, id string) (e2eStatus, []string) {
	t.Helper()
	var st e2eStatus
	var seen []string
	platformtest.Eventually(t, 4*time.Minute, "deployment "+id+" to end", func() bool {
		ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+id+"/status", token, nil, &st)
		if len(seen) == 0 || seen[len(seen)-1] != st.Status {
			seen = append(seen, st.Status)
		}
		return st.Status == "LIVE" || st.Status == "FAILED" || st.Status == "CANCELLED"
	})
	return st, seen
}

// streamLogs reads the deployment's SSE log stream until done and returns the messages.
func streamLogs(t *testing.T, ts *testServer, token, id string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/deployments/"+id+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("logs: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var msgs []string
	var types []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
			t.Fatalf("bad event %q", line)
		}
		types = append(types, ev.Type)
		if ev.Type == "log" {
			msgs = append(msgs, ev.Message)
		}
		if ev.Type == "done" {
			if types[0] != "ready" {
				t.Fatalf("first event %q, want ready", types[0])
			}
			return msgs
		}
	}
	t.Fatalf("stream ended without done (%v); got %d lines", sc.Err(), len(msgs))
	return nil
}

func TestDeploymentsE2E(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		alice := ts.signup(t, "alice@example.com")
		work, bare := newRepo(t, goApp("v1"))

		var p struct {
			ID   string `json:"id"`
			Slug string `json:"slug"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "Hello App", "repoUrl": "file://" + bare, "framework": "go", "port": 8080,
		}, &p)
		const secret = "tok-e2e-5ecret-9a1"
		ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
			"region": "local", "planName": "free",
			"envVars": []any{map[string]any{"key": "API_TOKEN", "value": secret, "isSecret": true}},
		}, nil)

		// First deployment: QUEUED -> ... -> LIVE, logs to done, app answers.
		var tr struct {
			DeploymentID string `json:"deploymentId"`
			WorkflowName string `json:"workflowName"`
			Status       string `json:"status"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		if tr.Status != "QUEUED" || tr.WorkflowName == "" {
			t.Fatalf("trigger: %+v", tr)
		}
		first, seen := waitDeployment(t, ts, alice, tr.DeploymentID)
		if first.Status != "LIVE" {
			t.Fatalf("first deployment %s: %s", first.Status, first.ErrorMessage)
		}
		order := map[string]int{"QUEUED": 0, "BUILDING": 1, "PROVISIONING": 2, "CONFIGURING_DNS": 3, "LIVE": 4}
		for i := 1; i < len(seen); i++ {
			if order[seen[i]] <= order[seen[i-1]] {
				t.Fatalf("statuses went backwards: %v", seen)
			}
		}
		for _, s := range first.Steps {
			if s.Status != "SUCCEEDED" || s.StartedAt == nil || s.FinishedAt == nil {
				t.Fatalf("step %+v", s)
			}
		}
		if first.BuildDuration == nil || first.Region != "local" || !strings.Contains(first.DeployedURL, p.Slug+"."+ts.App.Cfg.AppsDomain) {
			t.Fatalf("status: %+v", first)
		}
		msgs := streamLogs(t, ts, alice, tr.DeploymentID)
		all := strings.Join(msgs, "\n")
		for _, want := range []string{"BUILD started", "BUILD succeeded", "starting with token ***", "deployment is LIVE at"} {
			if !strings.Contains(all, want) {
				t.Fatalf("logs lack %q:\n%s", want, all)
			}
		}
		if strings.Contains(all, secret) {
			t.Fatal("the secret reached the log stream")
		}
		if got := getApp(t, ts, first.DeployedURL, p.Slug); got != "version v1" {
			t.Fatalf("app says %q", got)
		}

		// Second deployment replaces the first with no failed request between.
		var failures, served atomic.Int64
		var lastFailure atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://"+ts.Ingress+"/", nil)
				req.Host = p.Slug + "." + ts.App.Cfg.AppsDomain
				res, err := client.Do(req)
				if err != nil {
					failures.Add(1)
					lastFailure.Store(err.Error())
					continue
				}
				b := make([]byte, 64)
				n, _ := res.Body.Read(b)
				res.Body.Close()
				if res.StatusCode != 200 || !strings.HasPrefix(string(b[:n]), "version v") {
					failures.Add(1)
					lastFailure.Store(res.Status + " " + string(b[:n]))
					continue
				}
				served.Add(1)
			}
		}()
		commit(t, work, bare, "main", goApp("v2"), "second")
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		second, _ := waitDeployment(t, ts, alice, tr.DeploymentID)
		if second.Status != "LIVE" {
			t.Fatalf("second deployment %s: %s", second.Status, second.ErrorMessage)
		}
		platformtest.Eventually(t, time.Minute, "the first deployment to be replaced", func() bool {
			var old struct {
				Status       string `json:"status"`
				SupersededBy string `json:"supersededBy"`
			}
			ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+first.ID, alice, nil, &old)
			return old.Status == "CANCELLED" && old.SupersededBy == second.ID
		})
		close(stop)
		wg.Wait()
		if failures.Load() != 0 || served.Load() == 0 {
			t.Fatalf("%d failed requests (last: %v), %d served during the swap", failures.Load(), lastFailure.Load(), served.Load())
		}
		if got := getApp(t, ts, second.DeployedURL, p.Slug); got != "version v2" {
			t.Fatalf("app says %q after the second deployment", got)
		}

		// A failing build ends FAILED with the compiler's error; v2 keeps serving.
		commit(t, work, bare, "main", map[string]string{"main.go": "package main\n\nfunc main() { undefinedThing() }\n"}, "broken")
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		failed, _ := waitDeployment(t, ts, alice, tr.DeploymentID)
		if failed.Status != "FAILED" || !strings.Contains(failed.ErrorMessage, "BUILD failed") || !strings.Contains(failed.ErrorMessage, "undefined: undefinedThing") {
			t.Fatalf("broken build: %s %q", failed.Status, failed.ErrorMessage)
		}
		if !strings.Contains(strings.Join(streamLogs(t, ts, alice, tr.DeploymentID), "\n"), "undefined: undefinedThing") {
			t.Fatal("the compiler's error is not in the log")
		}
		if got := getApp(t, ts, second.DeployedURL, p.Slug); got != "version v2" {
			t.Fatalf("app says %q after the failed build", got)
		}

		// Another user sees nothing; deleting the project tears everything down.
		bob := ts.signup(t, "bob@example.com")
		if st, _, _ := ts.do(t, "GET", "/deployments/"+second.ID+"/status", bob, nil); st != http.StatusNotFound {
			t.Fatalf("bob reads alice's deployment: %d", st)
		}
		ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+p.ID, alice, nil, nil)
		platformtest.Eventually(t, time.Minute, "the project's deployments to be gone", func() bool {
			st, _, _ := ts.do(t, "GET", "/deployments/"+second.ID, alice, nil)
			return st == http.StatusNotFound
		})
		req, _ := http.NewRequest("GET", "http://"+ts.Ingress+"/", nil)
		req.Host = p.Slug + "." + ts.App.Cfg.AppsDomain
		res, err := ts.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("the deleted project's app still answers")
		}
	})
}

func TestDeploymentsE2EServerStopsMidBuild(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, nil)
		alice := ts.signup(t, "alice@example.com")
		// The server is stopped while the build waits at the gate.
		p, gate := gatedGoProject(t, ts, alice, "Slow Build", "resumed")
		var tr struct {
			DeploymentID string `json:"deploymentId"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		platformtest.Eventually(t, 2*time.Minute, "the build to wait at the gate", func() bool {
			d, err := ts.App.Deployments.Get(context.Background(), ownerOf(t, ts, alice), tr.DeploymentID)
			if err != nil {
				t.Fatal(err)
			}
			return d.Status == "BUILDING" && strings.Contains(logText(t, ts, alice, tr.DeploymentID), "waiting for the gate")
		})
		cfg := ts.App.Cfg
		ts.stop() // the server goes away mid-build

		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ts2 := startServerWith(t, cfg, nil)
		st, _ := waitDeployment(t, ts2, alice, tr.DeploymentID)
		if st.Status != "LIVE" {
			t.Fatalf("after restart: %s %q", st.Status, st.ErrorMessage)
		}
		if !strings.Contains(logText(t, ts2, alice, tr.DeploymentID), "server restarted during BUILD; deployment queued again from BUILD") {
			t.Fatal("the log does not say the deployment was resumed")
		}
		if got := getApp(t, ts2, st.DeployedURL, p.Slug); got != "version resumed" {
			t.Fatalf("app says %q", got)
		}
	})
}

// gatedGoProject creates a project of a local repo holding goApp(version)
// whose build prints "waiting for the gate" and waits until the returned gate
// file exists, so a test can act while a deployment is mid-BUILD.
func gatedGoProject(t *testing.T, ts *testServer, token, name, version string) (p struct{ ID, Slug string }, gate string) {
	t.Helper()
	gate = filepath.Join(t.TempDir(), "gate")
	_, bare := newRepo(t, goApp(version))
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", token, map[string]any{
		"name": name, "repoUrl": "file://" + bare, "framework": "go", "port": 8080,
	}, &p)
	ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", token, map[string]any{
		"region": "local", "planName": "free", "envVars": []any{},
		"buildCommand": "echo waiting for the gate; while [ ! -f " + gate + " ]; do sleep 0.1; done; go build -o app .",
		"startCommand": "./app",
	}, nil)
	return p, gate
}

// ownerOf returns the user id behind token.
func ownerOf(t *testing.T, ts *testServer, token string) string {
	t.Helper()
	var me struct {
		ID string `json:"id"`
	}
	ts.doJSON(t, http.StatusOK, "GET", "/auth/me", token, nil, &me)
	return me.ID
}

// logText is the deployment's stored log so far.
func logText(t *testing.T, ts *testServer, token, id string) string {
	t.Helper()
	lines, err := ts.App.Deployments.LogLines(context.Background(), ownerOf(t, ts, token), id, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.Message + "\n")
	}
	return b.String()
}
