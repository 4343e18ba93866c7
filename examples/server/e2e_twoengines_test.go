package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/container/registrytest"
	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/moby/moby/client"
)

// TestTwoEnginesE2E: two hosts, each a worker on its own Docker engine (the
// second engine in a network namespace of its own, as another machine),
// sharing Postgres and Temporal with an API replica. Apps are placed on
// both hosts and answer through either ingress; a drain moves an app with no
// failed request; after kill -9 of host two's worker and engine (daemon,
// containerd, shims and apps), its apps answer through host one within 60 s
// from the image host two pushed to the shared registry (nothing built
// again), and no deployment is lost or stuck. The harness removes the engine, its
// namespace, mounts and files.
func TestTwoEnginesE2E(t *testing.T) {
	t.Parallel()
	imgs, docker := containertest.Images(t)
	var projects []string
	t.Cleanup(func() { // after host one stopped: the images it built or pulled
		for _, id := range projects {
			res, err := docker.ImageList(context.Background(), client.ImageListOptions{
				Filters: client.Filters{}.Add("reference", "keelson/*-"+strings.ToLower(id))})
			if err != nil {
				continue
			}
			for _, img := range res.Items {
				_, _ = docker.ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	eng := containertest.SecondEngine(t)
	bin := buildServer(t)
	reg := registrytest.Start(t, registrytest.Options{Username: "keelson", Password: twoEnginesRegistryPassword})
	srv := temporaltest.StartDevServer(t)
	dbURL := dbtest.PostgresURL(t)
	// Host two reaches Postgres, Temporal and the registry at the addresses
	// host one uses (its engine trusts a registry on loopback, as host one's).
	for _, addr := range []string{hostPortOf(t, dbURL), srv.FrontendHostPort(), reg.Addr} {
		eng.Forward(t, addr)
	}
	queue := "keelson-engines-" + platformtest.Unique(8)
	role := func(r string) func(*Config) {
		return func(c *Config) {
			c.Engine, c.TemporalAddress, c.TemporalTaskQueue, c.Role = "temporal", srv.FrontendHostPort(), queue, r
			c.hostHeartbeat, c.HostDownAfter = time.Second, 25*time.Second // host two beats every 10 s
			if r == RoleWorker {
				c.Runtime = "docker"
				c.ImageGo, c.ImageGoRun, c.ImageStatic = imgs.Go, imgs.GoRun, imgs.Static
				c.Registry, c.RegistryUsername, c.RegistryPassword = reg.Repository(), "keelson", twoEnginesRegistryPassword
			}
		}
	}
	w1 := startServer(t, dbURL, role(RoleWorker))
	api := startServer(t, dbURL, role(RoleAPI))
	eng.Forward(t, w1.Ingress) // host two forwards host one's apps here
	w2 := startEngineWorker(t, eng, bin, dbURL, srv.FrontendHostPort(), queue, reg.Repository())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host one's errors:\n%s\nhost two's errors:\n%s", errorLines(w1.Logs.String()), errorLines(w2.proc.logs.String()))
		}
	})
	ctx := context.Background()
	platformtest.Eventually(t, time.Minute, "both hosts registered", func() bool {
		hs, err := api.App.Hosts.List(ctx)
		return err == nil && len(hs) == 2
	})
	hs, err := api.App.Hosts.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	host1, host2 := w1.App.localHost.ID, hs[0].ID
	if host2 == host1 {
		host2 = hs[1].ID
	}
	cordon := func(id string, on bool) {
		t.Helper()
		if _, err := api.App.Hosts.SetCordoned(ctx, id, on, "test"); err != nil {
			t.Fatal(err)
		}
	}

	alice := api.signup(t, "alice@example.com")
	app := containertest.HostileBinary(t)
	deployOn := func(host, name string) dockerProject {
		t.Helper()
		p := createHostileProject(t, api, alice, name, "s3cret-"+name,
			map[string]string{"Dockerfile": containertest.ScratchDockerfile, "app": string(app)}, "docker")
		projects = append(projects, p.ID)
		id := deployLive(t, api, alice, p.ID)
		if d := liveOf(t, api, p.Slug); d.ID != id || d.Host != queueOf(t, api, host) {
			t.Fatalf("%s placed on %q, want host %s", name, d.Host, host)
		}
		return p
	}
	cordon(host2, true)
	one := deployOn(host1, "one")
	cordon(host2, false)
	cordon(host1, true)
	two := deployOn(host2, "two")
	cordon(host1, false)

	ingress2 := &testServer{Ingress: w2.ingress, Client: &http.Client{Timeout: 10 * time.Second}, App: api.App}
	for _, w := range []*testServer{w1, ingress2} {
		platformtest.Eventually(t, remoteEvery*10, "every app through "+w.Ingress, func() bool {
			return askApp(w, one.Slug) == "200 hello bin" && askApp(w, two.Slug) == "200 hello bin"
		})
	}

	// Host two is drained while a client asks app two through each ingress
	// without pause: app two moves to host one, and no request fails.
	steadyWhile(t, []*testServer{w1, ingress2}, two.Slug, "200 hello bin", func() {
		moving := liveOf(t, api, two.Slug)
		if _, err := api.App.Hosts.Drain(ctx, host2); err != nil {
			t.Fatal(err)
		}
		platformtest.Eventually(t, 2*time.Minute, "app two to move to host one", func() bool {
			d := liveOf(t, api, two.Slug)
			return d.ID != moving.ID && d.Host == w1.App.localHost.Queue
		})
		time.Sleep(5 * time.Second) // past the old app's release
	})
	cordon(host2, false)
	cordon(host1, true)
	three := deployOn(host2, "three")
	cordon(host1, false)

	// Host two dies: its worker and its whole engine, with no shutdown code.
	was := liveOf(t, api, three.Slug)
	w2.proc.kill()
	eng.Kill()
	died := time.Now()
	platformtest.Eventually(t, 60*time.Second, "app three through host one after host two died", func() bool {
		return askApp(w1, three.Slug) == "200 hello bin"
	})
	t.Logf("host two's app answered through host one %.1fs after its death", time.Since(died).Seconds())
	now := liveAfter(t, api, three.Slug, was.ID)
	if now.Host != w1.App.localHost.Queue || now.Image != was.Image || !strings.HasPrefix(was.Image, reg.Repository()+"/") {
		t.Fatalf("after host two died: %+v (before: %+v)", now, was)
	}
	// Nothing was built again: host one pulled the image host two built.
	logs := strings.ToLower(strings.Join(streamLogs(t, api, alice, now.ID), "\n"))
	if !strings.Contains(logs, "build skipped") || !strings.Contains(logs, "pulling the image "+was.Image+" from the registry") ||
		strings.Contains(logs, "building the image") || strings.Contains(logs, twoEnginesRegistryPassword) {
		t.Fatalf("the moved deployment's log:\n%s", logs)
	}
	// No deployment is lost or stuck: none failed, none is left in a step.
	platformtest.Eventually(t, time.Minute, "every deployment settled", func() bool {
		ds, err := deployments.NewStore(api.App.DB).DeploymentsWhere(ctx, deployments.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Status == deployments.StatusFailed {
				t.Errorf("deployment %s of %s failed: %s", d.ID, d.ProjectSlug, d.ErrorMessage)
			}
			if !d.Status.Terminal() {
				return false
			}
		}
		return true
	})
	for _, p := range []dockerProject{one, two, three} {
		if got := askApp(w1, p.Slug); got != "200 hello bin" {
			t.Fatalf("%s through host one at the end: %q", p.Slug, got)
		}
	}
}

const twoEnginesRegistryPassword = "two-engines-registry-pw-83c1"

// engineWorker is a worker process running in a second engine's namespace.
type engineWorker struct {
	proc    *proc
	ingress string // where this machine reaches its ingress
}

// startEngineWorker runs the server binary as a worker inside eng's network
// namespace, on eng's engine, with the same database, Temporal and secrets
// as startServer's servers.
func startEngineWorker(t *testing.T, eng *containertest.Engine, bin, dbURL, temporalAddr, queue, registry string) *engineWorker {
	t.Helper()
	imgs, _ := containertest.Images(t)
	ingress := net.JoinHostPort(eng.NSAddr, "18080") // the namespace is the worker's own
	env := []string{
		"KEELSON_ROLE=worker", "KEELSON_ENGINE=temporal", "KEELSON_RUNTIME=docker", "DOCKER_HOST=" + eng.Socket,
		"KEELSON_TEMPORAL_ADDRESS=" + temporalAddr, "KEELSON_TEMPORAL_TASK_QUEUE=" + queue,
		"KEELSON_DATABASE_URL=" + dbURL, "KEELSON_DATA_DIR=" + testDataDir(t), "KEELSON_ALLOW_LOCAL_REPOS=true",
		"KEELSON_JWT_SECRET=test-jwt-secret-0123456789abcdef0123456789",
		"KEELSON_SECRET_KEY=test-seal-key-0123456789abcdef0123456789ab",
		"KEELSON_ADDR=127.0.0.1:18081", "KEELSON_INGRESS_ADDR=" + ingress, "KEELSON_HOST_ADDRESS=" + ingress,
		"KEELSON_REGISTRY=" + registry, "KEELSON_REGISTRY_USERNAME=keelson", "KEELSON_REGISTRY_PASSWORD=" + twoEnginesRegistryPassword,
		"KEELSON_IMAGE_GO=" + imgs.Go, "KEELSON_IMAGE_GO_RUN=" + imgs.GoRun, "KEELSON_IMAGE_STATIC=" + imgs.Static,
	}
	p := startCmd(t, eng.Command(bin), env)
	platformtest.Eventually(t, time.Minute, "host two's ingress to listen", func() bool {
		c, err := net.DialTimeout("tcp", ingress, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return &engineWorker{proc: p, ingress: ingress}
}

// queueOf is the task queue of the host with id.
func queueOf(t *testing.T, ts *testServer, id string) string {
	t.Helper()
	h, err := ts.App.Hosts.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return h.Queue
}

// hostPortOf is the host:port of a database URL.
func hostPortOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// steadyWhile runs fn while a client asks the app through each ingress every
// 10 ms, and fails the test if any answer was not want (status and body).
func steadyWhile(t *testing.T, through []*testServer, slug, want string, fn func()) {
	t.Helper()
	stop := make(chan struct{})
	failed := make(chan string, len(through))
	for _, w := range through {
		go func() {
			n, bad := 0, ""
			for {
				select {
				case <-stop:
					failed <- bad
					return
				default:
				}
				if got := askApp(w, slug); got != want && bad == "" {
					bad = fmt.Sprintf("request %d through %s at %s answered %q", n, w.Ingress, time.Now().Format("15:04:05.000"), got)
				}
				n++
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	defer func() {
		close(stop)
		for range through {
			if bad := <-failed; bad != "" {
				t.Errorf("a request failed: %s", bad)
			}
		}
	}()
	fn()
}

// errorLines are the lines of a server's log at level ERROR or WARN.
func errorLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"level":"WARN"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
