package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// dockerServer starts the reference server with KEELSON_RUNTIME=docker and
// the preset images (containertest.Images builds them when missing), or skips.
func dockerServer(t *testing.T) (*testServer, *client.Client) {
	t.Helper()
	imgs, docker := containertest.Images(t)
	ts := startServer(t, "", func(c *Config) {
		c.Runtime = "docker"
		c.ImageGo, c.ImageGoRun, c.ImageStatic = imgs.Go, imgs.GoRun, imgs.Static
	})
	return ts, docker
}

// probe asks an app a question through the ingress and returns its answer.
func probe(t *testing.T, ts *testServer, slug, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+ts.Ingress+path, nil)
	req.Host = slug + "." + ts.App.Cfg.AppsDomain
	res, err := ts.Client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// keelsonObjects lists containers, networks and images with Keelson's label
// key=value, as readable lines.
func keelsonObjects(t *testing.T, docker *client.Client, key, value string) []string {
	t.Helper()
	ctx := context.Background()
	f := client.Filters{}.Add("label", key+"="+value)
	var out []string
	cs, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs.Items {
		out = append(out, "container "+c.ID[:12])
	}
	ns, err := docker.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns.Items {
		out = append(out, "network "+n.Name)
	}
	is, err := docker.ImageList(ctx, client.ImageListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range is.Items {
		out = append(out, "image "+i.ID)
	}
	// Images the builder left unlabelled are found by name: a deployment's
	// tag, a project's stage caches.
	var ref string
	switch key {
	case container.LabelDeployment:
		ref = "keelson/*:" + strings.ToLower(value)
	case container.LabelProject:
		ref = "keelson/*-" + strings.ToLower(value)
	}
	if ref != "" {
		named, err := docker.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", ref)})
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range named.Items {
			out = append(out, "image "+i.ID+" "+strings.Join(i.RepoTags, ","))
		}
	}
	return out
}

// appRoutes lists the ingress routes of a deployment.
func appRoutes(t *testing.T, ts *testServer, deploymentID string) []string {
	t.Helper()
	router, ok := ts.App.Ingress.(*ingress.Router)
	if !ok {
		t.Fatalf("the app's ingress is a %T", ts.App.Ingress)
	}
	var out []string
	for _, r := range router.Routes() {
		if r.DeploymentID == deploymentID {
			out = append(out, "route "+r.Slug)
		}
	}
	return out
}

type dockerProject struct{ ID, Slug string }

func createHostileProject(t *testing.T, ts *testServer, token, name, secret string, files map[string]string, framework string) dockerProject {
	t.Helper()
	_, bare := newRepo(t, files)
	var p dockerProject
	ts.doJSON(t, http.StatusCreated, "POST", "/projects", token, map[string]any{
		"name": name, "repoUrl": "file://" + bare, "framework": framework, "port": 8080,
	}, &p)
	ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+p.ID+"/settings", token, map[string]any{
		"region": "local", "planName": "free",
		"envVars": []any{map[string]any{"key": "API_TOKEN", "value": secret, "isSecret": true}},
	}, nil)
	return p
}

func deployLive(t *testing.T, ts *testServer, token, projectID string) string {
	t.Helper()
	var tr struct {
		DeploymentID string `json:"deploymentId"`
	}
	ts.doJSON(t, http.StatusCreated, "POST", "/deployments", token, map[string]any{"projectId": projectID}, &tr)
	st, _ := waitDeployment(t, ts, token, tr.DeploymentID)
	if st.Status != "LIVE" {
		t.Fatalf("deployment %s: %s\n%s", st.Status, st.ErrorMessage, logText(t, ts, token, tr.DeploymentID))
	}
	return tr.DeploymentID
}

// Two tenants on the docker runtime; Alice's app probes as an attacker would.
func TestDockerRuntimeE2E_HostileTenant(t *testing.T) {
	ts, docker := dockerServer(t)
	ctx := context.Background()
	alice := ts.signup(t, "alice@example.com")
	bob := ts.signup(t, "bob@example.com")
	pa := createHostileProject(t, ts, alice, "Alice App", "alice-5ecret-0f", containertest.HostileApp("alice"), "go")
	pb := createHostileProject(t, ts, bob, "Bob App", "bob-5ecret-77", containertest.HostileApp("bob"), "go")
	da := deployLive(t, ts, alice, pa.ID)
	db := deployLive(t, ts, bob, pb.ID)
	if _, body := probe(t, ts, pa.Slug, "/"); body != "hello alice" {
		t.Fatalf("alice's app says %q", body)
	}

	// The server's data dir and environment are not there.
	dataDir := ts.App.Cfg.DataDir
	for _, path := range []string{"/ls?p=" + url.QueryEscape(dataDir), "/read?p=" + url.QueryEscape(dataDir+"/keelson.db"),
		"/read?p=" + url.QueryEscape(fmt.Sprintf("/proc/%d/environ", os.Getpid()))} {
		_, body := probe(t, ts, pa.Slug, path)
		if !strings.HasPrefix(body, "ERR") || strings.Contains(body, ts.App.Cfg.JWTSecret) {
			t.Errorf("%s answered %q", path, body)
		}
	}
	for _, pid := range []string{"1", "self"} {
		_, body := probe(t, ts, pa.Slug, "/read?p=/proc/"+pid+"/environ")
		for _, leak := range []string{ts.App.Cfg.JWTSecret, ts.App.Cfg.SecretKey, "bob-5ecret-77", "KEELSON_"} {
			if strings.Contains(body, leak) {
				t.Errorf("/proc/%s/environ of alice's app holds %q", pid, leak)
			}
		}
	}

	// Bob's container is out of reach: by its address, and through the
	// bridge's gateway (it publishes no port: the ingress reaches it on the
	// app network).
	bc, err := docker.ContainerList(ctx, client.ContainerListOptions{Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+db)})
	if err != nil || len(bc.Items) != 1 {
		t.Fatalf("bob's containers: %v %v", bc.Items, err)
	}
	bins, err := docker.ContainerInspect(ctx, bc.Items[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, n := range bins.Container.NetworkSettings.Networks {
		if n.IPAddress.IsValid() {
			targets = append(targets, n.IPAddress.String()+":8080")
		}
	}
	for _, b := range bins.Container.NetworkSettings.Ports {
		if len(b) > 0 {
			t.Errorf("bob's container publishes a port: %v", bins.Container.NetworkSettings.Ports)
		}
	}
	_, gw := probe(t, ts, pa.Slug, "/gateway")
	targets = append(targets, gw+":8080")
	if len(targets) < 2 || gw == "" {
		t.Fatalf("could not find bob's addresses: %v (gateway %q)", targets, gw)
	}
	for _, a := range targets {
		if _, body := probe(t, ts, pa.Slug, "/dial?a="+url.QueryEscape(a)); body == "OPEN" {
			t.Errorf("alice's app reached bob's app at %s", a)
		}
	}
	if _, body := probe(t, ts, pb.Slug, "/"); body != "hello bob" {
		t.Fatalf("bob's app says %q", body)
	}

	// The cgroup holds the plan's limits (free: 512 MiB, 500 millicores).
	_, mem := probe(t, ts, pa.Slug, "/read?p=/sys/fs/cgroup/memory/memory.limit_in_bytes")
	_, quota := probe(t, ts, pa.Slug, "/read?p=/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	_, period := probe(t, ts, pa.Slug, "/read?p=/sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if strings.HasPrefix(mem, "ERR") { // cgroup v2
		_, mem = probe(t, ts, pa.Slug, "/read?p=/sys/fs/cgroup/memory.max")
		_, cpu := probe(t, ts, pa.Slug, "/read?p=/sys/fs/cgroup/cpu.max")
		if f := strings.Fields(cpu); len(f) == 2 {
			quota, period = f[0], f[1]
		}
	}
	if strings.TrimSpace(mem) != fmt.Sprint(512<<20) || strings.TrimSpace(quota) != "50000" || strings.TrimSpace(period) != "100000" {
		t.Fatalf("cgroup: memory %q, cpu quota %q per period %q; want 512 MiB and 50000/100000", mem, quota, period)
	}

	// Past the limit it is OOM-killed, the log says so, and it answers again.
	probe(t, ts, pa.Slug, "/alloc?mb=900")
	platformtest.Eventually(t, 2*time.Minute, "the OOM kill in alice's log", func() bool {
		return strings.Contains(logText(t, ts, alice, da), "app killed: out of memory (limit 512 MiB)")
	})
	platformtest.Eventually(t, 2*time.Minute, "alice's app to answer again", func() bool {
		code, body := probe(t, ts, pa.Slug, "/")
		return code == 200 && body == "hello alice"
	})
	if strings.Contains(logText(t, ts, alice, da), "alice-5ecret-0f") {
		t.Fatal("the secret reached the log")
	}

	// Cancel mid-build leaves no build container running.
	marker := fmt.Sprintf("keelson-e2e-cancel-%d", time.Now().UnixNano())
	pc := createHostileProject(t, ts, alice, "Slow Build", "x-secret-1", map[string]string{
		"Dockerfile": "FROM " + ts.App.Cfg.ImageStatic + "\nRUN echo " + marker + " && sleep 600\n",
	}, "docker")
	var tr struct {
		DeploymentID string `json:"deploymentId"`
	}
	ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": pc.ID}, &tr)
	platformtest.Eventually(t, 2*time.Minute, "the slow build to run", func() bool {
		return strings.Contains(logText(t, ts, alice, tr.DeploymentID), marker)
	})
	ts.doJSON(t, http.StatusOK, "POST", "/deployments/"+tr.DeploymentID+"/cancel", alice, nil, nil)
	if st, _ := waitDeployment(t, ts, alice, tr.DeploymentID); st.Status != "CANCELLED" {
		t.Fatalf("cancelled build ended %s", st.Status)
	}
	platformtest.Eventually(t, time.Minute, "the cancelled build's container to go", func() bool {
		res, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Items {
			if strings.Contains(c.Command, marker) {
				return false
			}
		}
		return true
	})
	if left := append(keelsonObjects(t, docker, container.LabelDeployment, tr.DeploymentID), appRoutes(t, ts, tr.DeploymentID)...); len(left) > 0 {
		t.Fatalf("the cancelled deployment left %v", left)
	}

	// Deleting a deployment, then a project, leaves nothing labelled with them.
	if len(appRoutes(t, ts, db)) != 1 {
		t.Fatalf("bob's live deployment has routes %v", appRoutes(t, ts, db))
	}
	ts.doJSON(t, http.StatusOK, "DELETE", "/deployments/"+db, bob, nil, nil)
	if left := append(keelsonObjects(t, docker, container.LabelDeployment, db), appRoutes(t, ts, db)...); len(left) > 0 {
		t.Fatalf("the deleted deployment left %v", left)
	}
	for _, p := range []struct {
		token string
		p     dockerProject
	}{{alice, pa}, {alice, pc}, {bob, pb}} {
		ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+p.p.ID, p.token, nil, nil)
		platformtest.Eventually(t, time.Minute, "project "+p.p.Slug+" to leave nothing", func() bool {
			return len(keelsonObjects(t, docker, container.LabelProject, p.p.ID)) == 0
		})
	}
	if left := appRoutes(t, ts, da); len(left) > 0 {
		t.Fatalf("alice's deleted project left %v", left)
	}
}

// A server killed with SIGKILL leaves its app containers running; the
// restarted server adopts them instead of starting a second copy.
func TestDockerRuntimeE2E_KillAdopts(t *testing.T) {
	imgs, docker := containertest.Images(t)
	bin := buildServer(t)
	data := t.TempDir()
	api, ingress := freeAddr(t), freeAddr(t)
	env := []string{
		"KEELSON_ADDR=" + api, "KEELSON_INGRESS_ADDR=" + ingress, "KEELSON_DATA_DIR=" + data,
		"KEELSON_ALLOW_LOCAL_REPOS=true", "KEELSON_DATABASE_URL=",
		"KEELSON_JWT_SECRET=", "KEELSON_SECRET_KEY=", "KEELSON_ENGINE=local", "KEELSON_RUNTIME=docker",
		"KEELSON_IMAGE_GO=" + imgs.Go, "KEELSON_IMAGE_GO_RUN=" + imgs.GoRun, "KEELSON_IMAGE_STATIC=" + imgs.Static,
	}
	healthy := func() bool {
		resp, err := http.Get("http://" + api + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}
	srv := startProc(t, bin, env)
	platformtest.Eventually(t, time.Minute, "the server to answer /healthz", healthy)
	ts := &testServer{URL: "http://" + api, Ingress: ingress, Client: &http.Client{Timeout: 30 * time.Second}}
	ts.App = &App{Cfg: Config{AppsDomain: "localhost"}}
	alice := ts.signup(t, "alice@example.com")
	p := createHostileProject(t, ts, alice, "Adopted", "adopt-5ecret", containertest.HostileApp("adopted"), "go")
	var tr struct {
		DeploymentID string `json:"deploymentId"`
	}
	ts.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
	if st, _ := waitDeployment(t, ts, alice, tr.DeploymentID); st.Status != "LIVE" {
		t.Fatalf("deployment %s: %s\n%s", st.Status, st.ErrorMessage, srv.logs.String())
	}
	apps := func() []string {
		res, err := docker.ContainerList(context.Background(), client.ContainerListOptions{All: true,
			Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+tr.DeploymentID)})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range res.Items {
			ids = append(ids, c.ID)
		}
		return ids
	}
	before := apps()
	res, err := docker.ContainerList(context.Background(), client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+tr.DeploymentID)})
	if err != nil || len(res.Items) != 1 {
		t.Fatalf("the app's container: %v %v", res.Items, err)
	}
	instance := res.Items[0].Labels[container.LabelInstance]
	t.Cleanup(func() { // a failing test still leaves nothing on the shared engine
		containertest.RemoveInstance(docker, instance)
	})
	if len(before) != 1 {
		t.Fatalf("containers before the kill: %v", before)
	}
	t.Cleanup(func() {
		for _, id := range apps() { // if the test fails before deleting the project
			_, _ = docker.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
		}
	})

	srv.kill()
	if after := apps(); len(after) != 1 || after[0] != before[0] {
		t.Fatalf("after SIGKILL of the server: %v, want the container still there", after)
	}
	srv2 := startProc(t, bin, env)
	platformtest.Eventually(t, time.Minute, "the restarted server to answer /healthz", healthy)
	platformtest.Eventually(t, 2*time.Minute, "the app to be adopted", func() bool {
		return strings.Contains(strings.Join(sseLines(t, ts, alice, tr.DeploymentID, 2*time.Second), "\n"), "app is running again")
	})
	all := strings.Join(sseLines(t, ts, alice, tr.DeploymentID, 5*time.Second), "\n")
	if !strings.Contains(all, "adopting it") {
		t.Fatalf("the restarted server did not adopt the container:\n%s\n%s", all, srv2.logs.String())
	}
	if after := apps(); len(after) != 1 || after[0] != before[0] {
		t.Fatalf("after the restart: %v, want exactly the adopted %v", after, before)
	}
	if _, body := probe(t, ts, p.Slug, "/"); body != "hello adopted" {
		t.Fatalf("the adopted app says %q", body)
	}
	ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+p.ID, alice, nil, nil)
	platformtest.Eventually(t, time.Minute, "the project to leave nothing", func() bool {
		return len(keelsonObjects(t, docker, container.LabelProject, p.ID)) == 0
	})
	// A clean stop of the server leaves nothing of its instance (the build
	// network included).
	if err := srv2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv2.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the server did not stop within 2 minutes of SIGTERM:\n%s", srv2.logs.String())
	}
	if left := keelsonObjects(t, docker, container.LabelInstance, instance); len(left) > 0 {
		t.Fatalf("the stopped server left %v", left)
	}
}

// KEELSON_RUNTIME fails closed: unset, with no engine answering within
// KEELSON_RUNTIME_WAIT, the server binary exits non-zero with one line naming
// the variable, the address it tried and both ways on, and never listens;
// docker without an engine stops start-up the same way; process starts with
// one WARN line saying builds and apps are not isolated.
func TestRuntimeSelection(t *testing.T) {
	sock := t.TempDir() + "/no-engine.sock"
	t.Setenv("DOCKER_HOST", "unix://"+sock)

	bin := buildServer(t)
	p := startProc(t, bin, []string{"KEELSON_RUNTIME=", "KEELSON_RUNTIME_WAIT=1s", "KEELSON_DATA_DIR=" + t.TempDir(),
		"KEELSON_ADDR=127.0.0.1:0", "KEELSON_INGRESS_ADDR=127.0.0.1:0"})
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the server did not stop without an engine:\n%s", p.logs.String())
	}
	out := p.logs.String()
	if p.cmd.ProcessState.ExitCode() == 0 || strings.Contains(out, "keelson listening") {
		t.Fatalf("with no engine and KEELSON_RUNTIME unset the server ran (exit %d):\n%s", p.cmd.ProcessState.ExitCode(), out)
	}
	var last string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		last = l
	}
	for _, want := range []string{"keelson: ", "KEELSON_RUNTIME:", "unix://" + sock, "KEELSON_RUNTIME=process", "start a Docker engine"} {
		if !strings.Contains(last, want) {
			t.Fatalf("the last line does not say %q:\n%s", want, out)
		}
	}

	ts := startServer(t, "", func(c *Config) { c.Runtime = "process" })
	var warns []string
	for _, l := range strings.Split(ts.Logs.String(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "KEELSON_RUNTIME=process") && strings.Contains(l, "NOT isolated") {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 {
		t.Fatalf("want one WARN line about isolation, got %d:\n%s", len(warns), ts.Logs.String())
	}

	cfg, err := LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.Runtime, cfg.RuntimeWait = t.TempDir(), "docker", time.Second
	app, err := NewApp(context.Background(), cfg, ts.App.Log)
	if err == nil {
		app.Close(context.Background())
		t.Fatal("KEELSON_RUNTIME=docker started without an engine")
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Var != "KEELSON_RUNTIME" || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %q, want one line naming KEELSON_RUNTIME", err)
	}

	if _, err := LoadConfig(func(k string) string { return map[string]string{"KEELSON_RUNTIME": "vm"}[k] }); !errors.As(err, &ce) || ce.Var != "KEELSON_RUNTIME" {
		t.Fatalf("KEELSON_RUNTIME=vm: %v", err)
	}
}

// A socket the server's user may not open is reported as what it is,
// permission denied with the group to add, not as an engine that does not
// answer, and at once rather than after KEELSON_RUNTIME_WAIT. The server runs
// as nobody against a socket that only root and its group may open, so the
// test needs root.
func TestRuntimeSocketPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the server as another user than the socket's owner")
	}
	dir, err := os.MkdirTemp("", "keelson-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	bin := buildServer(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+sock, "KEELSON_RUNTIME=", "KEELSON_RUNTIME_WAIT=5m",
		"KEELSON_DATA_DIR="+filepath.Join(dir, "data"), "KEELSON_ADDR=127.0.0.1:0", "KEELSON_INGRESS_ADDR=127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "keelson listening") {
		t.Fatalf("the server ran without access to the engine's socket:\n%s", out)
	}
	if time.Since(start) > time.Minute {
		t.Fatalf("permission denied waited for KEELSON_RUNTIME_WAIT (%s) instead of stopping at once:\n%s", time.Since(start), out)
	}
	for _, want := range []string{"KEELSON_RUNTIME:", "permission denied", sock, "--group-add 0", "KEELSON_RUNTIME=process"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the server's error does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "no Docker engine answered") {
		t.Fatalf("permission denied reported as no engine:\n%s", out)
	}
}

// At start-up the docker runtime names each preset image the engine does not
// hold, once, with its variable and the command that builds it; images it
// holds are not named.
func TestMissingPresetImagesLogged(t *testing.T) {
	imgs, _ := containertest.Images(t)
	missing := "keelson-missing/" + platformtest.Unique(8)
	ts := startServer(t, "", func(c *Config) {
		c.Runtime = "docker"
		c.ImageGo, c.ImageGoRun, c.ImageStatic = missing+"-go:1", imgs.GoRun, imgs.Static
		c.ImageNode = missing + "-node:1"
	})
	lines := map[string]int{}
	for _, l := range strings.Split(ts.Logs.String(), "\n") {
		if strings.Contains(l, "is not on the engine") {
			for _, v := range []string{"KEELSON_IMAGE_GO)", "KEELSON_IMAGE_GO_RUN", "KEELSON_IMAGE_NODE", "KEELSON_IMAGE_STATIC"} {
				if strings.Contains(l, v) {
					lines[v]++
				}
			}
			if !strings.Contains(l, "scripts/local-images.sh") {
				t.Errorf("the line does not name the command that builds the image: %s", l)
			}
		}
	}
	if lines["KEELSON_IMAGE_GO)"] != 1 || lines["KEELSON_IMAGE_NODE"] != 1 || lines["KEELSON_IMAGE_GO_RUN"] != 0 || lines["KEELSON_IMAGE_STATIC"] != 0 {
		t.Fatalf("want one line for the missing go and node images and none for the others, got %v:\n%s", lines, ts.Logs.String())
	}
}
