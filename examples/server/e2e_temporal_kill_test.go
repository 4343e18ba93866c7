package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// A deployment reported LIVE is always served (issue 29): on the Temporal
// engine over Postgres, one all-in-one server with a LIVE project gets a new
// deployment, is killed with SIGKILL (a second later, or at one of its
// steps) and started again. The
// new deployment goes LIVE and its host answers with it within 10 s, and
// keeps answering: the replaced deployment's release, run once Temporal finds
// the old worker gone, must not take the route with it. Five rounds in a row.
func TestTemporalLiveIsServedAfterKill(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	temporalAddr := temporaltest.StartDevServer(t).FrontendHostPort()
	data := testDataDir(t)
	api, ingress := freeAddr(t), freeAddr(t)
	env := []string{
		"KEELSON_ADDR=" + api, "KEELSON_INGRESS_ADDR=" + ingress, "KEELSON_DATA_DIR=" + data,
		"KEELSON_ALLOW_LOCAL_REPOS=true", "KEELSON_DATABASE_URL=" + dbtest.PostgresURL(t),
		"KEELSON_JWT_SECRET=" + strings.Repeat("j", 40), "KEELSON_SECRET_KEY=" + strings.Repeat("k", 40),
		"KEELSON_ENGINE=temporal", "KEELSON_TEMPORAL_ADDRESS=" + temporalAddr,
		"KEELSON_TEMPORAL_TASK_QUEUE=keelson-kill-" + platformtest.Unique(8), "KEELSON_RUNTIME=process",
	}
	ts := &testServer{URL: "http://" + api, Client: &http.Client{Timeout: 30 * time.Second}}
	srv := startHealthy(t, bin, env, ts)

	alice := ts.signup(t, "alice@example.com")
	work, bare := newRepo(t, goApp("v0"))
	var p struct{ ID, Slug string }
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
		"name": "Killed Live", "repoUrl": "file://" + bare, "framework": "go", "port": 8080,
	}, &p)
	ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", alice, map[string]any{
		"region": "local", "planName": "free", "envVars": []any{},
		"buildCommand": "go build -o app .", "startCommand": "./app",
	}, nil)
	deploy := func(version string) string {
		var tr struct {
			DeploymentID string `json:"deploymentId"`
		}
		ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
		return tr.DeploymentID
	}
	if st, _ := waitDeployment(t, ts, alice, deploy("v0")); st.Status != "LIVE" {
		t.Fatalf("first deployment: %s %q", st.Status, st.ErrorMessage)
	}

	// Rounds kill the server a second in (BUILD, which Temporal retries), as
	// soon as the new deployment is seen PROVISIONING (the restarted server
	// stops the app PROVISION started; its DNS step must then build again,
	// not route to it: before that, the deployment read LIVE and answered
	// 502), or as soon as it is seen LIVE (its workflow may not have recorded
	// the DNS step's end yet; before the host id, the restarted server left
	// it LIVE and unserved).
	killAt := []string{"", "PROVISIONING", "LIVE", "", "PROVISIONING", "LIVE"}
	for round := 1; round <= len(killAt); round++ {
		version := fmt.Sprintf("v%d", round)
		commit(t, work, bare, "main", goApp(version), version)
		id := deploy(version)
		if at := killAt[round-1]; at == "" {
			time.Sleep(time.Second)
		} else {
			seen := map[string]int{"PROVISIONING": 1, "CONFIGURING_DNS": 2, "LIVE": 3}
			platformtest.Eventually(t, 2*time.Minute, "round "+version+": "+at, func() bool {
				var st e2eStatus
				ts.doJSON(t, http.StatusOK, "GET", "/deployments/"+id+"/status", alice, nil, &st)
				return seen[st.Status] >= seen[at]
			})
		}
		srv.kill()
		srv = startHealthy(t, bin, env, ts)
		st, _ := waitDeployment(t, ts, alice, id)
		if st.Status != "LIVE" {
			t.Fatalf("round %d: %s %q\n%s", round, st.Status, st.ErrorMessage, srv.logs.String())
		}
		// Answers within 10 s, then for 15 s more (the route was lost 12 s
		// after LIVE when the issue was filed).
		want := "version " + version
		var got string
		for end := time.Now().Add(10 * time.Second); got != want; time.Sleep(200 * time.Millisecond) {
			if got = appAnswer(ingress, p.Slug); got != want && time.Now().After(end) {
				t.Fatalf("round %d: LIVE deployment %s not served within 10 s: %q\n%s", round, id, got, srv.logs.String())
			}
		}
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			if got := appAnswer(ingress, p.Slug); got != want {
				t.Fatalf("round %d: LIVE deployment %s stopped being served: %q\n%s", round, id, got, srv.logs.String())
			}
		}
	}
}

// startHealthy starts the server binary and waits until it answers /healthz.
func startHealthy(t *testing.T, bin string, env []string, ts *testServer) *proc {
	t.Helper()
	p := startProc(t, bin, env)
	platformtest.Eventually(t, time.Minute, "the server to answer /healthz", func() bool {
		resp, err := http.Get(ts.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	return p
}

// appAnswer is what the ingress answers for the slug's host (status and body
// when it is not a 200).
func appAnswer(ingress, slug string) string {
	req, _ := http.NewRequest("GET", "http://"+ingress+"/", nil)
	req.Host = slug + ".localhost"
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	return string(body)
}
