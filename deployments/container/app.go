package container

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/internal/lifecycle"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// app is one deployment's container and its supervisor.
type app struct {
	r     *Runtime
	id    string
	cid   string
	port  network.Port // the container port (PORT)
	memMi int
	out   *runlog.Output
	job   rt.Job // to create the container again if it is gone
	env   []string

	ctx    context.Context // ends the supervisor's engine calls
	cancel context.CancelFunc
	ready  chan struct{}
	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	slug     string
	upstream string
	stopping bool
}

func (a *app) setSlug(slug string) {
	a.mu.Lock()
	a.slug = slug
	a.mu.Unlock()
}

func (a *app) getUpstream() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.upstream
}

// Start runs the deployment's image as its container (or adopts the
// container a previous server left running), waits until it answers HTTP and
// returns its upstream (127.0.0.1:<published port>).
func (r *Runtime) Start(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	if err := checkID(job.DeploymentID); err != nil {
		return "", err
	}
	env := make([]string, 0, len(job.Env)+1)
	for _, v := range job.Env {
		if v.Key == "" || v.Key == "PORT" {
			continue
		}
		for _, c := range v.Key {
			if c == '=' || c == 0 {
				return "", fmt.Errorf("environment variable name %q is not valid", v.Key)
			}
		}
		for _, c := range v.Value {
			if c == 0 {
				return "", fmt.Errorf("environment variable %s contains a NUL byte", v.Key)
			}
		}
		env = append(env, v.Key+"="+v.Value)
	}
	cport := job.Port
	if cport <= 0 || cport > 65535 {
		cport = 8080
	}
	env = append(env, "PORT="+strconv.Itoa(cport))

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return "", errors.New("runtime is shut down")
	}
	if a := r.apps[job.DeploymentID]; a != nil {
		r.mu.Unlock()
		switch restart, err := lifecycle.Await(ctx, job.DeploymentID, a.ready, a.done); {
		case err != nil:
			return "", err
		case restart:
			r.forget(a)
			return r.Start(ctx, job, logs)
		}
		return a.getUpstream(), nil
	}
	_, _, memMi := r.limits(job.Limits)
	actx, acancel := context.WithCancel(context.WithoutCancel(r.base))
	a := &app{
		r: r, id: job.DeploymentID, memMi: memMi, slug: job.ProjectSlug,
		out: runlog.New(logs, rt.StreamApp, runlog.Masker(job)),
		ctx: actx, cancel: acancel,
		ready: make(chan struct{}), stopCh: make(chan struct{}), done: make(chan struct{}),
	}
	a.port, _ = network.ParsePort(strconv.Itoa(cport) + "/tcp")
	r.apps[a.id] = a
	r.mu.Unlock()

	a.job, a.env = job, env
	exited, err := a.launch(ctx, job, env)
	if err == nil {
		err = a.waitHealthy(ctx, exited)
	}
	if err != nil {
		r.forget(a)
		a.cancel()
		close(a.done)
		r.removeContainer(context.WithoutCancel(ctx), job.DeploymentID)
		err = runlog.MaskErr(a.out.Mask, err)
		a.out.System(err.Error())
		return "", err
	}
	a.out.System("app answers HTTP on " + a.getUpstream())
	close(a.ready)
	go a.supervise(exited)
	return a.getUpstream(), nil
}

// launch adopts the deployment's running container or creates and starts
// one; it returns a channel that yields the container's exit.
func (a *app) launch(ctx context.Context, job rt.Job, env []string) (<-chan exit, error) {
	r := a.r
	name := r.containerName(a.id)
	if res, err := r.docker.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
		c := res.Container
		onAppNetwork := c.NetworkSettings != nil && c.NetworkSettings.Networks[r.appNetwork()] != nil
		if c.Config != nil && c.Config.Labels[LabelInstance] == r.cfg.Instance && c.State != nil && c.State.Running && onAppNetwork {
			a.cid = c.ID
			a.out.System("found the app's container still running; adopting it")
			if err := a.attach(); err != nil {
				return nil, err
			}
			if err := a.readPort(ctx); err != nil {
				return nil, err
			}
			return a.watch(), nil
		}
		// Stopped, left half-made, or on a network of its own (an older
		// Keelson's): start from a fresh container.
		r.removeContainer(ctx, a.id)
	} else if !cerrdefs.IsNotFound(err) {
		return nil, r.engineError("looking for the app's container", err)
	}
	image := r.imageTag(job)
	if _, err := r.docker.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("deployment %s has not been built (no image)", a.id)
		}
		return nil, r.engineError("looking for the app's image", err)
	}
	labels := r.labels(job, "app")
	if err := r.ensureAppNetwork(ctx); err != nil {
		return nil, err
	}
	mem, nano, _ := r.limits(job.Limits)
	pids := r.cfg.PidsLimit
	res, err := r.docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:        image,
			Env:          env,
			Labels:       labels,
			ExposedPorts: network.PortSet{a.port: {}},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:  container.NetworkMode(r.appNetwork()),
			PortBindings: network.PortMap{a.port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: ""}}},
			CapDrop:      []string{"ALL"},
			SecurityOpt:  []string{"no-new-privileges:true"},
			Privileged:   false,
			LogConfig:    container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
			Resources: container.Resources{
				Memory: mem, MemorySwap: mem, NanoCPUs: nano, PidsLimit: &pids,
			},
		},
	})
	if err != nil {
		return nil, r.engineError("creating the app's container", err)
	}
	a.cid = res.ID
	return a.startContainer(ctx)
}

// startContainer attaches to the container's output, starts it and reads
// the port the engine published.
func (a *app) startContainer(ctx context.Context) (<-chan exit, error) {
	if err := a.attach(); err != nil {
		return nil, err
	}
	a.out.System(fmt.Sprintf("starting the app's container (PORT=%d, memory limit %d MiB)", a.port.Num(), a.memMi))
	if _, err := a.r.docker.ContainerStart(ctx, a.cid, client.ContainerStartOptions{}); err != nil {
		return nil, a.r.engineError("starting the app's container", err)
	}
	if err := a.readPort(ctx); err != nil {
		return nil, err
	}
	return a.watch(), nil
}

// attach streams the container's stdout and stderr into the log until the
// container stops or the app's context ends.
func (a *app) attach() error {
	res, err := a.r.docker.ContainerAttach(a.ctx, a.cid, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return a.r.engineError("attaching to the app's output", err)
	}
	go func() {
		stop := context.AfterFunc(a.ctx, res.Close)
		defer stop()
		defer res.Close()
		w := a.out.Writer()
		_, _ = stdcopy.StdCopy(w, w, res.Reader)
		w.Flush()
	}()
	return nil
}

func (a *app) readPort(ctx context.Context) error {
	res, err := a.r.docker.ContainerInspect(ctx, a.cid, client.ContainerInspectOptions{})
	if err != nil {
		return a.r.engineError("inspecting the app's container", err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		for _, b := range ns.Ports[a.port] {
			if b.HostIP.Is4() && b.HostIP.IsLoopback() && b.HostPort != "" {
				a.mu.Lock()
				a.upstream = "127.0.0.1:" + b.HostPort
				a.mu.Unlock()
				return nil
			}
		}
	}
	if st := res.Container.State; st != nil && !st.Running {
		return fmt.Errorf("the app exited as it started (%s); last output:\n%s", exitText(int64(st.ExitCode), st.OOMKilled, a.memMi), a.out.Tail())
	}
	return errors.New("the container engine published no port for the app")
}

// exit is how a container run ended.
type exit struct {
	code      int64
	oomKilled bool
	err       error // the wait itself failed (the app's context ended, the engine went away)
}

// watch waits for the container to stop running.
func (a *app) watch() <-chan exit {
	ch := make(chan exit, 1)
	go func() {
		w := a.r.docker.ContainerWait(a.ctx, a.cid, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		var e exit
		select {
		case res := <-w.Result:
			e.code = res.StatusCode
		case err := <-w.Error:
			e.err = err
		}
		if e.err == nil {
			if res, err := a.r.docker.ContainerInspect(a.ctx, a.cid, client.ContainerInspectOptions{}); err == nil && res.Container.State != nil {
				e.oomKilled = res.Container.State.OOMKilled
			}
		}
		ch <- e
	}()
	return ch
}

func exitText(code int64, oom bool, memMi int) string {
	if oom {
		return fmt.Sprintf("app killed: out of memory (limit %d MiB)", memMi)
	}
	if code == 137 {
		return "app killed (exit code 137)"
	}
	return fmt.Sprintf("exit code %d", code)
}

// waitHealthy polls the upstream until the app answers anything.
func (a *app) waitHealthy(ctx context.Context, exited <-chan exit) error {
	deadline := time.NewTimer(a.r.cfg.HealthTimeout)
	defer deadline.Stop()
	url := "http://" + a.getUpstream() + "/"
	interval := 10 * time.Millisecond
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if res, err := a.r.health.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
			return nil
		}
		t := time.NewTimer(interval)
		select {
		case e := <-exited:
			t.Stop()
			if e.err != nil {
				return a.r.engineError("waiting for the app", e.err)
			}
			return fmt.Errorf("the app exited before answering HTTP (%s); last output:\n%s", exitText(e.code, e.oomKilled, a.memMi), a.out.Tail())
		case <-a.stopCh:
			t.Stop()
			return errors.New("the app was stopped while starting")
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-deadline.C:
			t.Stop()
			return fmt.Errorf("the app did not answer HTTP on port %d within %s; last output:\n%s",
				a.port.Num(), a.r.cfg.HealthTimeout, a.out.Tail())
		case <-t.C:
		}
		interval = min(2*interval, 250*time.Millisecond)
	}
}

// supervise starts the container again when it stops on its own, with
// backoff, until Stop or too many crashes.
func (a *app) supervise(exited <-chan exit) {
	defer close(a.done)
	cfg := a.r.cfg
	var crashes []time.Time
	for {
		var e exit
		select {
		case <-a.stopCh:
			return
		case e = <-exited:
		}
		if a.isStopping() || a.ctx.Err() != nil {
			return
		}
		if e.err != nil {
			a.out.System("lost track of the app's container: " + a.r.engineError("waiting for the app", e.err).Error())
		} else if e.oomKilled {
			a.out.System(exitText(e.code, true, a.memMi))
		} else {
			a.out.System("the app exited (" + exitText(e.code, false, a.memMi) + ")")
		}
		now := time.Now()
		crashes = slices.DeleteFunc(crashes, func(t time.Time) bool { return now.Sub(t) > cfg.RestartWindow })
		crashes = append(crashes, now)
		if len(crashes) > cfg.MaxRestarts {
			a.out.System(fmt.Sprintf("the app stopped %d times within %s; not restarting it", len(crashes), cfg.RestartWindow))
			cfg.Logger.Error("container: app keeps crashing, gave up restarting it", "deployment", a.id, "crashes", len(crashes))
			// Stopped for good: its host no longer leads to a port it freed.
			a.mu.Lock()
			slug := a.slug
			a.mu.Unlock()
			if cfg.Ingress.Remove(slug, a.id) {
				a.out.System("its route is removed")
			}
			return
		}
		delay := min(cfg.RestartBackoff<<(len(crashes)-1), 30*time.Second)
		a.out.System(fmt.Sprintf("restarting the app in %s", delay))
		cfg.Logger.Warn("container: app exited, restarting", "deployment", a.id, "in", delay, "oom", e.oomKilled)
		t := time.NewTimer(delay)
		select {
		case <-a.stopCh:
			t.Stop()
			return
		case <-t.C:
		}
		if a.isStopping() {
			return
		}
		before := a.getUpstream()
		ctx, cancel := context.WithTimeout(a.ctx, cmp.Or(cfg.HealthTimeout, time.Minute))
		next, err := a.startContainer(ctx)
		if err != nil && a.gone(ctx) {
			// Removed behind our back (docker rm, an engine reset): make it again.
			a.out.System("the app's container is gone; creating it again")
			next, err = a.launch(ctx, a.job, a.env)
		}
		cancel()
		if err != nil {
			a.out.System(err.Error())
			ch := make(chan exit, 1)
			ch <- exit{code: -1}
			exited = ch
			continue
		}
		exited = next
		if up := a.getUpstream(); up != before {
			a.mu.Lock()
			slug := a.slug
			a.mu.Unlock()
			if _, err := cfg.Ingress.Update(slug, a.id, up); err != nil {
				cfg.Logger.Error("container: rerouting a restarted app", "deployment", a.id, "err", err)
			}
		}
		a.out.System("the app is running again on " + a.getUpstream())
	}
}

// gone reports whether the app's container no longer exists.
func (a *app) gone(ctx context.Context) bool {
	_, err := a.r.docker.ContainerInspect(ctx, a.cid, client.ContainerInspectOptions{})
	return cerrdefs.IsNotFound(err)
}

func (a *app) isStopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping
}

// Stop removes the deployment's container: it first waits (up to
// StopGrace) for requests the ingress has in flight, then the engine sends
// SIGTERM and SIGKILL after StopGrace. Idempotent; it also removes a
// container a previous server left behind.
func (r *Runtime) Stop(ctx context.Context, deploymentID string) error {
	if err := checkID(deploymentID); err != nil {
		return err
	}
	r.mu.Lock()
	a := r.apps[deploymentID]
	r.mu.Unlock()
	if a != nil {
		a.mu.Lock()
		if !a.stopping {
			a.stopping = true
			close(a.stopCh)
		}
		a.mu.Unlock()
		dctx, cancel := context.WithTimeout(ctx, r.cfg.StopGrace)
		_ = r.cfg.Ingress.Drain(dctx, deploymentID)
		cancel()
	}
	if a != nil {
		// The supervisor ends first: a restart in flight finishes its engine
		// calls (a cancelled request may still complete in the engine), then
		// sees stopCh, so nothing makes the container again once it is removed.
		select {
		case <-a.done:
		case <-ctx.Done():
			return fmt.Errorf("stopping deployment %s: %w", deploymentID, context.Cause(ctx))
		}
	}
	err := r.removeContainer(ctx, deploymentID)
	if a != nil {
		a.cancel() // the output and wait streams
		r.forget(a)
	}
	return err
}

// removeContainer stops and removes every container of the deployment (by
// name and by label) and the network of its own an older Keelson gave it.
func (r *Runtime) removeContainer(ctx context.Context, deploymentID string) error {
	ids := map[string]bool{r.containerName(deploymentID): true}
	res, err := r.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", LabelInstance+"="+r.cfg.Instance, LabelDeployment+"="+deploymentID)})
	if err == nil {
		for _, c := range res.Items {
			ids[c.ID] = true
		}
	}
	var errs []error
	grace := int(r.cfg.StopGrace / time.Second)
	for id := range ids {
		if _, err := r.docker.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &grace}); err != nil && !cerrdefs.IsNotFound(err) {
			r.cfg.Logger.Warn("container: stopping", "container", id, "err", err)
		}
		if _, err := r.docker.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil &&
			!cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, r.engineError("removing the app's container", err))
		}
	}
	if _, err := r.docker.NetworkRemove(ctx, r.networkName(deploymentID), client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, r.engineError("removing the app's network", err))
	}
	return errors.Join(errs...)
}

func (r *Runtime) forget(a *app) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.apps[a.id] == a {
		delete(r.apps, a.id)
	}
}
