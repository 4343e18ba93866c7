package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/examples/apiclient"
	"github.com/keelson-dev/keelson/platform/platformtest"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
)

// clientFile is the Go client oapi-codegen generates from the served
// OpenAPI 3.0 document, checked in so that users (and the test below) can
// import it.
const clientFile = "../apiclient/client.gen.go"

// generateClient runs oapi-codegen (as a library) on doc.
func generateClient(doc []byte) (string, error) {
	spec, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		return "", err
	}
	return codegen.Generate(spec, codegen.Configuration{
		PackageName: "apiclient",
		Generate:    codegen.GenerateOptions{Client: true, Models: true},
	})
}

// TestGeneratedClientUpToDate regenerates the client from the document the
// server serves and compares it with the checked-in one.
// KEELSON_UPDATE_CLIENT=1 rewrites examples/apiclient/client.gen.go.
func TestGeneratedClientUpToDate(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	status, doc, _ := ts.do(t, "GET", "/openapi-3.0.json", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /openapi-3.0.json: %d", status)
	}
	code, err := generateClient(doc)
	if err != nil {
		t.Fatalf("oapi-codegen: %v", err)
	}
	if os.Getenv("KEELSON_UPDATE_CLIENT") == "1" {
		if err := os.WriteFile(clientFile, []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(filepath.Clean(clientFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, []byte(code)) {
		t.Fatalf("%s is not what oapi-codegen generates from the served document: run KEELSON_UPDATE_CLIENT=1 go test ./examples/server -run TestGeneratedClientUpToDate", clientFile)
	}
}

// TestGeneratedClientDeploys drives the server through the checked-in client
// only: register, log in, create a project (a local git repository of a Go
// app), deploy it to LIVE (process runtime) and read its logs, decoding each
// event by the document's discriminator.
func TestGeneratedClientDeploys(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	ctx := context.Background()
	c, err := apiclient.NewClientWithResponses(ts.URL, apiclient.WithHTTPClient(ts.Client))
	if err != nil {
		t.Fatal(err)
	}
	const pw = "correct horse battery"
	reg, err := c.AuthRegisterWithResponse(ctx, apiclient.RegisterRequest{Email: "gen@example.com", Password: pw, ConfirmPassword: pw})
	if err != nil || reg.JSON201 == nil {
		t.Fatalf("register: %v %s", err, body(reg))
	}
	login, err := c.AuthLoginWithResponse(ctx, apiclient.LoginRequest{Email: "gen@example.com", Password: pw})
	if err != nil || login.JSON200 == nil || login.JSON200.AccessToken == "" {
		t.Fatalf("login: %v %s", err, body(login))
	}
	bearer := apiclient.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+login.JSON200.AccessToken)
		return nil
	})
	c, err = apiclient.NewClientWithResponses(ts.URL, apiclient.WithHTTPClient(ts.Client), bearer)
	if err != nil {
		t.Fatal(err)
	}
	// An error answer decodes as APIError with a typed message.
	bad, err := c.CreateProjectWithResponse(ctx, apiclient.CreateProjectRequest{Name: "x", RepoUrl: "x", Framework: "go", Port: 70000})
	if err != nil || bad.StatusCode() != http.StatusBadRequest || bad.JSONDefault == nil {
		t.Fatalf("invalid project: %v %s", err, body(bad))
	}
	if msgs, err := bad.JSONDefault.Message.AsAPIErrorMessage1(); err != nil || len(msgs) == 0 {
		t.Fatalf("validation message is not an array of strings: %v %s", err, bad.Body)
	}

	_, bare := newRepo(t, goApp("gen"))
	proj, err := c.CreateProjectWithResponse(ctx, apiclient.CreateProjectRequest{
		Name: "Generated", RepoUrl: "file://" + bare, Framework: "go", Port: 8080})
	if err != nil || proj.JSON201 == nil {
		t.Fatalf("create project: %v %s", err, body(proj))
	}
	got, err := c.GetProjectWithResponse(ctx, proj.JSON201.Id)
	if err != nil || got.JSON200 == nil || got.JSON200.PlanName == "" || got.JSON200.EnvVars == nil {
		t.Fatalf("get project: %v %s", err, body(got))
	}
	// The settings GET answers go back to PATCH unchanged.
	p := got.JSON200
	env := []apiclient.EnvVarInput{}
	for _, e := range p.EnvVars {
		env = append(env, apiclient.EnvVarInput{Key: e.Key, Value: e.Value, IsSecret: &e.IsSecret})
	}
	set, err := c.UpdateProjectSettingsWithResponse(ctx, p.Id, apiclient.ProjectSettings{
		Region: p.Region, PlanName: p.PlanName, EnvVars: env, StartCommand: &p.StartCommand,
		BuildCommand: &p.BuildCommand, IsPrivate: &p.IsPrivate, AutoDeploy: &p.AutoDeploy,
		AutoDeployBranch: &p.AutoDeployBranch, CodehostRepositoryId: &p.CodehostRepositoryId})
	if err != nil || set.JSON200 == nil {
		t.Fatalf("settings round trip: %v %s %s", err, body(set), set.Body)
	}

	tr, err := c.CreateDeploymentWithResponse(ctx, apiclient.CreateDeploymentJSONRequestBody{ProjectId: p.Id})
	if err != nil || tr.JSON201 == nil || tr.JSON201.Status != "QUEUED" {
		t.Fatalf("deploy: %v %s", err, body(tr))
	}
	id := tr.JSON201.DeploymentId
	var st *apiclient.DeploymentStatusReport
	platformtest.Eventually(t, 3*time.Minute, "the deployment to end", func() bool {
		r, err := c.GetDeploymentStatusWithResponse(ctx, id)
		if err != nil || r.JSON200 == nil {
			t.Fatalf("status: %v %s", err, body(r))
		}
		st = r.JSON200
		return st.Status == "LIVE" || st.Status == "FAILED" || st.Status == "CANCELLED"
	})
	if st.Status != "LIVE" || len(st.Steps) != 3 {
		t.Fatalf("deployment: %+v", st)
	}

	logs, err := c.StreamDeploymentLogsWithResponse(ctx, id, &apiclient.StreamDeploymentLogsParams{})
	if err != nil || logs.StatusCode() != http.StatusOK {
		t.Fatalf("logs: %v %s", err, body(logs))
	}
	var kinds []string
	var lines []string
	var last int64
	for _, ln := range strings.Split(string(logs.Body), "\n") {
		data, ok := strings.CutPrefix(ln, "data: ")
		if !ok {
			continue
		}
		var ev apiclient.DeploymentLogEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		v, err := ev.ValueByDiscriminator()
		if err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		switch v := v.(type) {
		case apiclient.DeploymentLogReady:
			kinds = append(kinds, "ready")
		case apiclient.DeploymentLogLine:
			kinds = append(kinds, "log")
			if v.Cursor < 1 || v.Timestamp.IsZero() {
				t.Fatalf("log event %s", data)
			}
			last = v.Cursor
			if v.Message != nil {
				lines = append(lines, *v.Message)
			}
		case apiclient.DeploymentLogDone:
			kinds = append(kinds, "done")
		default:
			t.Fatalf("event %s decoded as %T", data, v)
		}
	}
	if len(kinds) < 3 || kinds[0] != "ready" || kinds[len(kinds)-1] != "done" {
		t.Fatalf("event kinds: %v", kinds)
	}
	if all := strings.Join(lines, "\n"); !strings.Contains(all, "BUILD succeeded") || !strings.Contains(all, "deployment is LIVE at") {
		t.Fatalf("log lines:\n%s", all)
	}
	// A resume at the last line of a LIVE deployment: the declared 204, no body.
	after := strconv.FormatInt(last, 10)
	end, err := c.StreamDeploymentLogsWithResponse(ctx, id, &apiclient.StreamDeploymentLogsParams{After: &after})
	if err != nil || end.StatusCode() != http.StatusNoContent || len(end.Body) != 0 {
		t.Fatalf("resume at the end: %v %s", err, body(end))
	}
}

// body is a response's body for a failure message.
func body(r any) (s string) {
	defer func() {
		if recover() != nil {
			s = "(no response)"
		}
	}()
	if sc, ok := r.(interface{ StatusCode() int }); ok {
		return fmt.Sprintf("HTTP %d", sc.StatusCode())
	}
	return "(no response)"
}
