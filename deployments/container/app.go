package container

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/internal/supervise"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// launcher is one deployment's app as a container.
type launcher struct {
	r     *Runtime
	id    string
	cid   string       // the container launched last; launches are never concurrent
	port  network.Port // the container port (PORT)
	memMi int
	out   *runlog.Output
	job   rt.Job // to create the container again if it is gone
	env   []string

	ctx    context.Context // ends the app's engine calls and streams, cancelled by Release
	cancel context.CancelFunc

	mu       sync.Mutex
	upstream string // <address on the app network>:<port>
}

func (l *launcher) getUpstream() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.upstream
}

// Start runs the deployment's image as its container (or adopts the
// container a previous server left running), waits until it answers HTTP and
// returns its upstream (its address on the app network and its port).
func (r *Runtime) Start(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	if err := checkID(job.DeploymentID); err != nil {
		return "", err
	}
	env, err := job.Environ("", "PORT") // PORT is the runtime's
	if err != nil {
		return "", err
	}
	cport := job.Port
	if cport <= 0 || cport > 65535 {
		cport = 8080
	}
	env = append(env, "PORT="+strconv.Itoa(cport))
	_, _, memMi := r.limits(job.Limits)
	return r.sup.Start(ctx, job, logs, func(out *runlog.Output) supervise.Launcher {
		actx, acancel := context.WithCancel(context.WithoutCancel(r.base))
		l := &launcher{r: r, id: job.DeploymentID, memMi: memMi, out: out, job: job, env: env, ctx: actx, cancel: acancel}
		l.port, _ = network.ParsePort(strconv.Itoa(cport) + "/tcp")
		return l
	})
}

// Launch adopts or creates the app's container the first time; a restart
// starts the container again, or creates it again when it is gone.
func (l *launcher) Launch(ctx context.Context, restart bool) (supervise.Instance, error) {
	if !restart {
		inst, err := l.launch(ctx)
		if err != nil {
			return nil, err
		}
		return inst, nil
	}
	ctx, cancel := context.WithTimeout(l.ctx, cmp.Or(l.r.cfg.HealthTimeout, time.Minute))
	defer cancel()
	inst, err := l.startContainer(ctx)
	if err != nil && l.gone(ctx) {
		// Removed behind our back (docker rm, an engine reset): make it again.
		l.out.System("the app's container is gone; creating it again")
		inst, err = l.launch(ctx)
	}
	if err != nil {
		// Counted as a crash at once, as an exit with code -1.
		dead := &instance{l: l, exited: make(chan struct{}), exit: exit{code: -1}}
		close(dead.exited)
		return dead, err
	}
	return inst, nil
}

// Release removes the app's container and ends its output and wait streams.
func (l *launcher) Release(ctx context.Context) error {
	err := l.r.removeContainer(ctx, l.id)
	l.cancel()
	return err
}

// launch adopts the deployment's running container or creates and starts
// one; it returns the instance, which is watched for its exit.
func (l *launcher) launch(ctx context.Context) (*instance, error) {
	r, job, env := l.r, l.job, l.env
	name := r.containerName(l.id)
	if res, err := r.docker.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
		c := res.Container
		onAppNetwork := c.NetworkSettings != nil && c.NetworkSettings.Networks[r.appNetwork()] != nil
		if c.Config != nil && c.Config.Labels[LabelInstance] == r.cfg.Instance && c.State != nil && c.State.Running && onAppNetwork {
			l.cid = c.ID
			l.out.System("found the app's container still running; adopting it")
			if err := l.attach(); err != nil {
				return nil, err
			}
			if err := l.readPort(ctx); err != nil {
				return nil, err
			}
			return l.watch(), nil
		}
		// Stopped, left half-made, or on a network of its own (an older
		// Keelson's): start from a fresh container.
		r.removeContainer(ctx, l.id)
	} else if !cerrdefs.IsNotFound(err) {
		return nil, r.engineError("looking for the app's container", err)
	}
	image := r.imageTag(job)
	if _, err := r.docker.ImageInspect(ctx, image); cerrdefs.IsNotFound(err) && job.Image != "" {
		// Built on another host (or removed here): the registry has it.
		if err := r.pull(ctx, job, l.out); err != nil {
			return nil, err
		}
	} else if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("deployment %s has not been built (no image)", l.id)
	} else if err != nil {
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
			ExposedPorts: network.PortSet{l.port: {}},
		},
		HostConfig: &container.HostConfig{
			// No published port: the ingress reaches the app at its address
			// on the app network (readPort), so a start spawns no
			// docker-proxy and adds no NAT rules.
			NetworkMode: container.NetworkMode(r.appNetwork()),
			CapDrop:     []string{"ALL"},
			SecurityOpt: []string{"no-new-privileges:true"},
			Privileged:  false,
			LogConfig:   container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
			Resources: container.Resources{
				Memory: mem, MemorySwap: mem, NanoCPUs: nano, PidsLimit: &pids,
			},
		},
	})
	if err != nil {
		return nil, r.engineError("creating the app's container", err)
	}
	l.cid = res.ID
	return l.startContainer(ctx)
}

// startContainer attaches to the container's output, starts it and reads
// the port the engine published.
func (l *launcher) startContainer(ctx context.Context) (*instance, error) {
	if err := l.attach(); err != nil {
		return nil, err
	}
	l.out.System(fmt.Sprintf("starting the app's container (PORT=%d, memory limit %d MiB)", l.port.Num(), l.memMi))
	if _, err := l.r.docker.ContainerStart(ctx, l.cid, client.ContainerStartOptions{}); err != nil {
		return nil, l.r.engineError("starting the app's container", err)
	}
	l.out.System("the app's container started; waiting for it to answer HTTP")
	if err := l.readPort(ctx); err != nil {
		return nil, err
	}
	return l.watch(), nil
}

// attach streams the container's stdout and stderr into the log until the
// container stops or the app's context ends.
func (l *launcher) attach() error {
	res, err := l.r.docker.ContainerAttach(l.ctx, l.cid, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return l.r.engineError("attaching to the app's output", err)
	}
	go func() {
		stop := context.AfterFunc(l.ctx, res.Close)
		defer stop()
		defer res.Close()
		w := l.out.Writer()
		_, _ = stdcopy.StdCopy(w, w, res.Reader)
		w.Flush()
	}()
	return nil
}

func (l *launcher) readPort(ctx context.Context) error {
	res, err := l.r.docker.ContainerInspect(ctx, l.cid, client.ContainerInspectOptions{})
	if err != nil {
		return l.r.engineError("inspecting the app's container", err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if ep := ns.Networks[l.r.appNetwork()]; ep != nil && ep.IPAddress.Is4() {
			l.mu.Lock()
			l.upstream = netip.AddrPortFrom(ep.IPAddress, l.port.Num()).String()
			l.mu.Unlock()
			return nil
		}
		// A container an older Keelson made publishes its port on 127.0.0.1.
		for _, b := range ns.Ports[l.port] {
			if b.HostIP.Is4() && b.HostIP.IsLoopback() && b.HostPort != "" {
				l.mu.Lock()
				l.upstream = "127.0.0.1:" + b.HostPort
				l.mu.Unlock()
				return nil
			}
		}
	}
	if st := res.Container.State; st != nil && !st.Running {
		return fmt.Errorf("the app exited before answering HTTP (%s); last output:\n%s", exitText(int64(st.ExitCode), st.OOMKilled, l.memMi), l.out.Tail())
	}
	return errors.New("the container engine gave the app no address on its network")
}

// exit is how a container run ended.
type exit struct {
	code      int64
	oomKilled bool
	err       error // the wait itself failed (the app's context ended, the engine went away)
}

// watch waits for the container to stop running.
func (l *launcher) watch() *instance {
	i := &instance{l: l, upstream: l.getUpstream(), exited: make(chan struct{})}
	go func() {
		defer close(i.exited)
		w := l.r.docker.ContainerWait(l.ctx, l.cid, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case res := <-w.Result:
			i.exit.code = res.StatusCode
		case err := <-w.Error:
			i.exit.err = err
		}
		if i.exit.err == nil {
			if res, err := l.r.docker.ContainerInspect(l.ctx, l.cid, client.ContainerInspectOptions{}); err == nil && res.Container.State != nil {
				i.exit.oomKilled = res.Container.State.OOMKilled
			}
		}
	}()
	return i
}

// instance is one run of the app's container.
type instance struct {
	l        *launcher
	upstream string
	exited   chan struct{}
	exit     exit // set before exited is closed
}

func (i *instance) Upstream() string        { return i.upstream }
func (i *instance) Port() int               { return int(i.l.port.Num()) }
func (i *instance) Exited() <-chan struct{} { return i.exited }

// Stop does nothing: the launcher's Release removes the container.
func (i *instance) Stop(context.Context, time.Duration) {}

func (i *instance) Exit() supervise.Exit {
	e := i.exit
	x := supervise.Exit{Text: exitText(e.code, e.oomKilled, i.l.memMi), Attrs: []any{"oom", e.oomKilled}}
	switch {
	case e.err != nil:
		x.Err = i.l.r.engineError("waiting for the app", e.err)
		x.Line = "lost track of the app's container: " + x.Err.Error()
	case e.oomKilled:
		x.Line = x.Text
	}
	return x
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

// gone reports whether the app's container no longer exists.
func (l *launcher) gone(ctx context.Context) bool {
	_, err := l.r.docker.ContainerInspect(ctx, l.cid, client.ContainerInspectOptions{})
	return cerrdefs.IsNotFound(err)
}

// Stop removes the deployment's container: it first waits (up to
// StopGrace) for requests the ingress has in flight, then the engine sends
// SIGTERM and SIGKILL after StopGrace. Idempotent; it also removes a
// container a previous server left behind.
func (r *Runtime) Stop(ctx context.Context, deploymentID string) error {
	if err := checkID(deploymentID); err != nil {
		return err
	}
	if found, err := r.sup.Stop(ctx, deploymentID); found {
		return err
	}
	return r.removeContainer(ctx, deploymentID)
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
