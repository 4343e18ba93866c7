package container_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// hostService answers secret on addr (host:0) until the test ends; it
// returns the port.
func hostService(t *testing.T, addr, secret string) string {
	t.Helper()
	l, err := net.Listen("tcp4", addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, secret) }),
		ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// hostAddr is an IPv4 address of this host that is not loopback nor a
// container bridge's.
func hostAddr(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	require.NoError(t, err)
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 || strings.HasPrefix(i.Name, "docker") ||
			strings.HasPrefix(i.Name, "br-") || strings.HasPrefix(i.Name, "kls") || strings.HasPrefix(i.Name, "veth") {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	t.Skip("this host has no IPv4 address but loopback")
	return ""
}

// iptablesRules is every rule and chain of the filter table (both backends).
func iptablesRules(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range []string{"iptables", "iptables-legacy", "ip6tables", "ip6tables-legacy"} {
		out, _ := exec.Command(c, "-w", "-S").CombinedOutput()
		b.Write(out)
	}
	return b.String()
}

// scratchJob is a project whose image is the hostile app FROM scratch.
func scratchJob(t testing.TB, bin []byte) deployments.Job {
	job := goJob(scratchRepo(t, bin, containertest.ScratchDockerfile))
	job.Framework = "docker"
	job.Limits = deployments.Limits{MemoryMi: 64, CPUMillis: 250}
	return job
}

// scratchRepo is a repository of bin as an executable "app" and dockerfile.
func scratchRepo(t testing.TB, bin []byte, dockerfile string) string {
	t.Helper()
	repo := newRepo(t, map[string]string{"Dockerfile": dockerfile})
	require.NoError(t, os.WriteFile(filepath.Join(repo, "app"), bin, 0o755))
	git(t, repo, "add", "app")
	git(t, repo, "commit", "-q", "-m", "app")
	return repo
}

// deploy builds, starts and routes job; it returns the app's host name.
func (e *env) deploy(t testing.TB, job deployments.Job) string {
	t.Helper()
	ctx := context.Background()
	logs := &sink{}
	_, err := e.rt.Build(ctx, job, logs)
	require.NoError(t, err, logs.All())
	up, err := e.rt.Start(ctx, job, logs)
	require.NoError(t, err, logs.All())
	_, err = e.rt.Route(ctx, job.ProjectSlug, job.DeploymentID, up)
	require.NoError(t, err)
	return job.ProjectSlug + ".localhost"
}

// containerIP is the address of the deployment's container on its network.
func (e *env) containerIP(t testing.TB, deploymentID string) string {
	t.Helper()
	ctx := context.Background()
	res, err := e.docker.ContainerList(ctx, client.ContainerListOptions{
		Filters: client.Filters{}.Add("label", container.LabelDeployment+"="+deploymentID)})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	ins, err := e.docker.ContainerInspect(ctx, res.Items[0].ID, client.ContainerInspectOptions{})
	require.NoError(t, err)
	for _, n := range ins.Container.NetworkSettings.Networks {
		return n.IPAddress.String()
	}
	t.Fatal("the container is on no network")
	return ""
}

// Tenant code reaches neither the host (a service on 0.0.0.0, through the
// host's address or the gateway), nor another tenant's container, nor,
// through ADD, a service on the host's loopback; the same probes with
// egress open reach the host, so the fence is what stops them.
func TestEgressBuildsAndAppsReachNothingPrivate(t *testing.T) {
	bin := containertest.HostileBinary(t)
	secret := "host-secret-" + platformtest.Unique(8)
	loopSecret := "loopback-secret-" + platformtest.Unique(8)
	port := hostService(t, "0.0.0.0:0", secret)
	loopPort := hostService(t, "127.0.0.1:0", loopSecret)
	host := hostAddr(t)
	ctx := context.Background()

	closed := newEnv(t, nil)
	open := newEnv(t, func(c *container.Config) { c.Egress.Open = true })

	// ADD from the host's loopback is refused before the engine sees it.
	add := goJob(newRepo(t, map[string]string{"Dockerfile": "FROM " + closed.cfg.Images.Static + "\nADD http://127.0.0.1:" + loopPort + "/m /m.txt\n"}))
	add.Framework = "docker"
	logs := &sink{}
	_, err := closed.rt.Build(ctx, add, logs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Dockerfile line 2 (ADD http://127.0.0.1:"+loopPort+"/m /m.txt): ADD cannot fetch a URL")
	assert.NotContains(t, err.Error()+logs.All(), loopSecret)
	require.NoError(t, closed.rt.Cleanup(ctx, add.DeploymentID))

	// Two tenants' apps on the fenced runtime, one on the open one.
	a, b := scratchJob(t, bin), scratchJob(t, bin)
	hostA, hostB := closed.deploy(t, a), closed.deploy(t, b)
	ipB := closed.containerIP(t, b.DeploymentID)
	c := scratchJob(t, bin)
	hostC := open.deploy(t, c)
	for _, h := range []string{hostA, hostB} {
		code, body := closed.get(t, h, "/")
		require.Equal(t, 200, code, body)
	}
	_, gwA := closed.get(t, hostA, "/gateway")
	_, gwC := open.get(t, hostC, "/gateway")
	require.NotEmpty(t, gwA)

	dial := func(e *env, h, addr string) string { _, body := e.get(t, h, "/dial?a="+addr); return body }
	for _, addr := range []string{host + ":" + port, gwA + ":" + port, ipB + ":8080", "169.254.169.254:80"} {
		assert.True(t, strings.HasPrefix(dial(closed, hostA, addr), "ERR"), "a running app reached %s", addr)
	}
	// Name lookups still work: the engine forwards them to the host's name
	// servers (here and often a private address) from the app's network.
	assert.Contains(t, dial(closed, hostA, "keelson-egress-check.invalid:80"), "no such host")
	assert.Equal(t, "OPEN", dial(open, hostC, host+":"+port), "with egress open the host's service answers (the probe works)")
	assert.Equal(t, "OPEN", dial(open, hostC, gwC+":"+port))

	// RUN steps: the same probes from a build.
	run := func(e *env, targets ...string) string {
		job := scratchJob(t, bin)
		job.RepoURL = scratchRepo(t, bin, "FROM scratch\nCOPY app /app\nRUN [\"/app\", \"dial\", \""+
			strings.Join(targets, "\", \"")+"\"]\n")
		logs := &sink{}
		_, err := e.rt.Build(ctx, job, logs)
		require.NoError(t, err, logs.All())
		require.NoError(t, e.rt.Cleanup(ctx, job.DeploymentID))
		return logs.All()
	}
	out := run(closed, host+":"+port, "gateway:"+port, ipB+":8080", "169.254.169.254:80")
	assert.NotContains(t, out, "OPEN ")
	assert.Equal(t, 4, strings.Count(out, "ERR "), out)
	out = run(open, host+":"+port, "gateway:"+port)
	assert.Equal(t, 2, strings.Count(out, "OPEN "), "with egress open a RUN step reaches the host: %s", out)

	// Close removes the rules.
	id := container.BridgeID(closed.rt.Instance())
	assert.Contains(t, iptablesRules(t), "KEELSON-FWD-"+id)
	for _, j := range []deployments.Job{a, b} {
		require.NoError(t, closed.rt.Cleanup(ctx, j.DeploymentID))
		require.NoError(t, closed.rt.CleanupProject(ctx, j.ProjectID))
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, closed.rt.Close(cctx))
	rules := iptablesRules(t)
	assert.NotContains(t, rules, "KEELSON-FWD-"+id)
	assert.NotContains(t, rules, "KEELSON-IN-"+id)
	assert.NotContains(t, rules, "-"+container.BridgeID(open.rt.Instance())+" ", "open egress installs nothing")
}

// More apps than the engine has networks run at once, each answering
// through the ingress, none reaching another.
func TestFortyAppsShareOneNetwork(t *testing.T) {
	const n = 40
	bin := containertest.HostileBinary(t)
	e := newEnv(t, nil)
	ctx := context.Background()
	jobs := make([]deployments.Job, n)
	hosts := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	// Four tenants: after each one's first build, the engine's layer cache
	// makes the others quick.
	var tenants [4]string
	for i := range tenants {
		tenants[i] = platform.NewID()
	}
	for i := range jobs {
		jobs[i] = scratchJob(t, bin)
		jobs[i].ProjectID = tenants[i%len(tenants)]
		jobs[i].Env = append(jobs[i].Env, deployments.EnvVar{Key: "APP_INDEX", Value: fmt.Sprint(i)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			hosts[i] = e.deploy(t, jobs[i])
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
	for i, h := range hosts {
		code, body := e.get(t, h, "/env?k=APP_INDEX")
		require.Equal(t, 200, code, body)
		assert.Equal(t, fmt.Sprint(i), body)
	}
	for i := 1; i < 8; i++ {
		addr := e.containerIP(t, jobs[i].DeploymentID) + ":8080"
		_, body := e.get(t, hosts[0], "/dial?a="+addr)
		assert.True(t, strings.HasPrefix(body, "ERR"), "app 0 reached app %d at %s: %s", i, addr, body)
	}
	nets, err := e.docker.NetworkList(ctx, client.NetworkListOptions{
		Filters: client.Filters{}.Add("label", container.LabelInstance+"="+e.rt.Instance())})
	require.NoError(t, err)
	var names []string
	for _, x := range nets.Items {
		names = append(names, x.Name)
	}
	// The apps' one network, and the builds' once a build ran (these images
	// FROM scratch are made without the builder).
	assert.Contains(t, names, "keelson-"+e.rt.Instance()+"-apps")
	assert.Subset(t, []string{"keelson-" + e.rt.Instance() + "-apps", "keelson-" + e.rt.Instance() + "-builds"}, names)
	for _, j := range jobs {
		require.NoError(t, e.rt.Cleanup(ctx, j.DeploymentID))
	}
	for _, p := range tenants {
		require.NoError(t, e.rt.CleanupProject(ctx, p))
	}
}

// A submodule's URL would escape the repository URL's checks: it is never
// fetched, and the log says so.
func TestSubmodulesAreNotFetched(t *testing.T) {
	e := newEnv(t, nil)
	secret := "submodule-secret-" + platformtest.Unique(8)
	inner := newRepo(t, map[string]string{"secret.txt": secret})
	repo := newRepo(t, map[string]string{"Dockerfile": "FROM " + e.cfg.Images.Static + "\nCOPY . /src\nRUN cat /src/sub/secret.txt; ls -la /src/sub\n"})
	git(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", inner, "sub")
	git(t, repo, "commit", "-q", "-m", "sub")
	job := goJob(repo)
	job.Framework = "docker"
	logs := &sink{}
	_, err := e.rt.Build(context.Background(), job, logs)
	require.NoError(t, err, logs.All())
	assert.Contains(t, logs.All(), "the repository has submodules (.gitmodules); they are not fetched")
	assert.NotContains(t, logs.All(), secret)
	assert.Contains(t, logs.All(), "No such file or directory", "the build ran and found sub/ empty")
	require.NoError(t, e.rt.Cleanup(context.Background(), job.DeploymentID))
	require.NoError(t, e.rt.CleanupProject(context.Background(), job.ProjectID))
}

// Without the rules the runtime does not start, and says what to do; open
// egress starts without them.
func TestNewFailsClosedWithoutEgressRules(t *testing.T) {
	router, err := ingress.New(ingress.Config{})
	require.NoError(t, err)
	defer router.Close()
	cfg := container.Config{DataDir: t.TempDir(), Ingress: router, Egress: container.Egress{IPTables: "no-such-iptables"}}
	_, err = container.New(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "builds and apps cannot be kept off the host's networks: no iptables holds the engine's DOCKER-USER chain (no-such-iptables: not found)")
	assert.Contains(t, err.Error(), "KEELSON_EGRESS=open")
	assert.NotContains(t, err.Error(), "\n")

	cfg.Egress.Open = true
	rt, err := container.New(cfg)
	require.NoError(t, err)
	require.NoError(t, rt.Close(context.Background()))
}
