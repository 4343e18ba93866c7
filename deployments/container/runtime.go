package container

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container/internal/buildcg"
	"github.com/keelson-dev/keelson/deployments/container/internal/egress"
	"github.com/keelson-dev/keelson/deployments/container/scratchimage"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/internal/lifecycle"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/internal/supervise"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform"
)

// Labels on everything this runtime creates.
const (
	LabelKeelson    = "dev.keelson"            // "1" on every container, network and image
	LabelInstance   = "dev.keelson.instance"   // the server instance (Config.Instance)
	LabelDeployment = "dev.keelson.deployment" // the deployment id
	LabelProject    = "dev.keelson.project"    // the project id
	LabelRole       = "dev.keelson.role"       // app, build-network, app-network
)

// Egress is what tenant code may reach (deployments/container/internal/egress).
type Egress = egress.Config

// Config configures a Runtime.
type Config struct {
	// Client talks to the engine. Default: client.New(client.FromEnv)
	// (DOCKER_HOST or the default socket), closed by Close.
	Client *client.Client
	// DataDir holds the checkouts (<DataDir>/containers/<deploymentID>). Required.
	DataDir string
	// Instance tells this server's containers from other servers' on the same
	// engine. Default: a random id made once and kept in <DataDir>/containers/instance
	// (a server started again on the same data dir adopts its containers; two
	// servers never share one by having the same path).
	Instance string
	// Ingress routes the apps' hosts. Required.
	Ingress *ingress.Router
	// Images are the presets' builder and run images.
	Images Images
	// Logger receives what operators need (engine errors, crashes). Default: discard.
	Logger *slog.Logger
	// GitPath is the git binary. Default "git" in PATH.
	GitPath string
	// GitCAFile, when set, is a PEM bundle git trusts for https.
	GitCAFile string
	// AllowLocalRepos allows file://, http:// and local paths as repositories.
	AllowLocalRepos bool
	// AllowPrivateHosts allows https repositories on private addresses.
	AllowPrivateHosts bool
	// CloneTimeout bounds fetching the repository. Default 10m.
	CloneTimeout time.Duration
	// BuildTimeout stops an image build when the job's plan sets none. Default 10m.
	BuildTimeout time.Duration
	// Supervision: the health wait, stop grace and crash window of apps.
	rt.Supervision
	// DefaultMemoryMi bounds builds and apps whose plan sets no memory limit. Default 512.
	DefaultMemoryMi int
	// DefaultCPUMillis bounds builds and apps whose plan sets no CPU limit. Default 1000.
	DefaultCPUMillis int
	// PidsLimit caps the processes of one container. Default 256.
	PidsLimit int64
	// BuildPidsLimit caps the processes of one build, every step together
	// (through a cgroup parent the server makes; a build that cannot get it
	// does not run). Default 1024.
	BuildPidsLimit int64
	// CgroupRoot is where the host's cgroup file systems are mounted. Default /sys/fs/cgroup.
	CgroupRoot string
	// StorageGiB is the bytes of one GiB of a plan's storage limit
	// (maxStorageGi). Default 1 GiB; tests make it small.
	StorageGiB int64
	// DiskPollInterval is how often a build's disk use is measured while it
	// runs. Default 1s.
	DiskPollInterval time.Duration
	// Egress is what builds and apps may reach (see Egress). New refuses to
	// make a Runtime when it cannot put the rules in place, unless Open.
	Egress Egress
	// Registry, when set, is where each build is pushed and where a host
	// pulls an image it does not have, by digest (see Registry).
	Registry Registry
	// Clock times the crash window and the restart backoff (see
	// supervise.Config.Clock). Default: the wall clock.
	Clock platform.Clock
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.GitPath = cmp.Or(c.GitPath, "git")
	c.Images = c.Images.withDefaults()
	c.CloneTimeout = cmp.Or(c.CloneTimeout, 10*time.Minute)
	c.BuildTimeout = cmp.Or(c.BuildTimeout, 10*time.Minute)
	c.Supervision = c.Supervision.WithDefaults()
	c.DefaultMemoryMi = cmp.Or(c.DefaultMemoryMi, 512)
	c.DefaultCPUMillis = cmp.Or(c.DefaultCPUMillis, 1000)
	c.PidsLimit = cmp.Or(c.PidsLimit, 256)
	c.BuildPidsLimit = cmp.Or(c.BuildPidsLimit, 1024)
	c.CgroupRoot = cmp.Or(c.CgroupRoot, buildcg.Root)
	c.StorageGiB = cmp.Or(c.StorageGiB, 1<<30)
	c.DiskPollInterval = cmp.Or(c.DiskPollInterval, time.Second)
	return c
}

// Runtime builds deployments into images and runs them as containers. Safe
// for concurrent use; every method is idempotent per deployment.
type Runtime struct {
	cfg       Config
	docker    *client.Client
	ownClient bool
	base      context.Context // cancelled by Close: ends every build
	cancel    context.CancelFunc

	buildMu sync.RWMutex     // held (read) by builds using the build network, (write) to remove it
	fw      *egress.Firewall // nil when egress is open
	netMu   sync.Mutex       // one ensureNetwork at a time: the engine would make two networks of one name

	mu           sync.Mutex
	cgroupDriver string // the engine's, asked once

	builds lifecycle.Builds // running builds, workspace locks

	sup *supervise.Supervisor // starts, supervises and stops the apps
}

var _ rt.Runtime = (*Runtime)(nil)

// NewClient returns a client for DOCKER_HOST (or the default socket) and
// checks that an engine answers within timeout.
func NewClient(ctx context.Context, timeout time.Duration) (*client.Client, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// New returns a Runtime. It creates the data directory.
func New(cfg Config) (*Runtime, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("container: DataDir is required")
	}
	if cfg.Ingress == nil {
		return nil, errors.New("container: Ingress is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Registry.Check(); err != nil {
		return nil, fmt.Errorf("container: registry: %w", err)
	}
	var err error
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("container: data dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "containers"), 0o700); err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	if cfg.Instance == "" {
		if cfg.Instance, err = platform.StoredID(filepath.Join(cfg.DataDir, "containers", "instance")); err != nil {
			return nil, fmt.Errorf("container: instance id: %w", err)
		}
	}
	if !namePattern.MatchString(cfg.Instance) {
		return nil, fmt.Errorf("container: instance %q must be lowercase letters and digits", cfg.Instance)
	}
	buildcg.Sweep(cfg.CgroupRoot, cfg.Instance)
	if cfg.GitPath, err = exec.LookPath(cfg.GitPath); err != nil {
		return nil, fmt.Errorf("container: git not found: %w", err)
	}
	docker, own := cfg.Client, false
	if docker == nil {
		if docker, err = client.New(client.FromEnv); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
		own = true
	}
	var fw *egress.Firewall
	if !cfg.Egress.Open {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if fw, err = egress.New(ctx, cfg.Instance, cfg.Egress); err == nil {
			err = fw.Install(ctx)
		}
		if err != nil {
			if own {
				docker.Close()
			}
			return nil, fmt.Errorf("container: builds and apps cannot be kept off the host's networks: %s; %s", oneLine(err.Error()), egress.OpenHint)
		}
	}
	base, cancel := context.WithCancel(context.Background())
	return &Runtime{
		cfg: cfg, docker: docker, ownClient: own, base: base, cancel: cancel, fw: fw,
		sup: supervise.New(supervise.Config{
			Name: "container", Ingress: cfg.Ingress, Logger: cfg.Logger, Clock: cfg.Clock,
			Supervision: cfg.Supervision, GaveUp: "stopped",
			Relaunched: func(upstream string, _ bool) string { return "the app is running again on " + upstream },
		}),
	}, nil
}

// Reuse tags the image of deployment from as the image of job's deployment
// (a rollback: nothing is cloned or built). When this engine does not have
// it but job.Image names it in the registry, there is nothing to do here:
// Start pulls it.
func (r *Runtime) Reuse(ctx context.Context, from string, job rt.Job) error {
	if err := errors.Join(checkID(from), checkID(job.DeploymentID), checkID(job.ProjectID)); err != nil {
		return err
	}
	src := r.imageTag(rt.Job{ProjectID: job.ProjectID, DeploymentID: from})
	if _, err := r.docker.ImageInspect(ctx, src); cerrdefs.IsNotFound(err) {
		if job.Image != "" {
			return nil
		}
		return rt.ErrBuildGone
	} else if err != nil {
		return r.engineError("reading the image to roll back to", err)
	}
	if _, err := r.docker.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: r.imageTag(job)}); err != nil {
		return r.engineError("tagging the image to roll back to", err)
	}
	return nil
}

// Instance is the label value that marks this server's containers.
func (r *Runtime) Instance() string { return r.cfg.Instance }

var (
	ansi        = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")
	idPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	namePattern = regexp.MustCompile(`^[a-z0-9]{1,32}$`)
)

func checkID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("deployment id %q is not valid", id)
	}
	return nil
}

// Names derived from ids (lowercase: image references must be).
func (r *Runtime) containerName(deploymentID string) string {
	return "keelson-" + r.cfg.Instance + "-" + strings.ToLower(deploymentID)
}

// networkName is the network each deployment had before apps shared one;
// Stop still removes it when a container from then is stopped.
func (r *Runtime) networkName(deploymentID string) string { return r.containerName(deploymentID) }
func (r *Runtime) buildNetwork() string                   { return "keelson-" + r.cfg.Instance + "-builds" }
func (r *Runtime) appNetwork() string                     { return "keelson-" + r.cfg.Instance + "-apps" }
func (r *Runtime) repo(projectID string) string {
	return "keelson/" + r.cfg.Instance + "-" + strings.ToLower(projectID)
}
func (r *Runtime) imageTag(job rt.Job) string {
	return r.repo(job.ProjectID) + ":" + strings.ToLower(job.DeploymentID)
}
func (r *Runtime) cacheTag(projectID string) string { return r.repo(projectID) + ":cache" }

func (r *Runtime) labels(job rt.Job, role string) map[string]string {
	return map[string]string{LabelKeelson: "1", LabelInstance: r.cfg.Instance,
		LabelDeployment: job.DeploymentID, LabelProject: job.ProjectID, LabelRole: role}
}

func (r *Runtime) workdir(id string) string { return filepath.Join(r.cfg.DataDir, "containers", id) }

func (r *Runtime) limits(l rt.Limits) (memBytes, nanoCPUs int64, memMi int) {
	memMi = cmp.Or(l.MemoryMi, r.cfg.DefaultMemoryMi)
	cpu := cmp.Or(l.CPUMillis, r.cfg.DefaultCPUMillis)
	return int64(memMi) << 20, int64(cpu) * 1_000_000, memMi
}

// Build clones the job's repository on the host and builds its image.
func (r *Runtime) Build(ctx context.Context, job rt.Job, logs rt.LogSink) (string, error) {
	if err := checkID(job.DeploymentID); err != nil {
		return "", err
	}
	if err := checkID(job.ProjectID); err != nil {
		return "", errors.New("project id is not valid")
	}
	ctx, end, err := r.builds.Begin(ctx, r.base, job.DeploymentID, r.sup.Running)
	if err != nil {
		return "", err
	}
	defer end()

	out := runlog.New(logs, rt.StreamBuild, runlog.Masker(job))
	root := r.workdir(job.DeploymentID)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("creating the workspace: %w", err)
	}
	commit, err := r.clone(ctx, job, root, out)
	if err != nil {
		return "", runlog.MaskErr(out.Mask, err)
	}
	src := filepath.Join(root, "src")
	dockerfile, err := dockerfileFor(job, src, r.cfg.Images)
	if err != nil {
		return "", err
	}
	if dockerfile == "" {
		text, err := os.ReadFile(filepath.Join(src, "Dockerfile"))
		if err != nil {
			return "", fmt.Errorf("reading the repository's Dockerfile: %w", err)
		}
		if err := r.checkRepoDockerfile(ctx, string(text), out); err != nil {
			return "", err
		}
		out.System("building the image from the repository's Dockerfile")
		dockerfile = string(text)
	} else {
		out.System("building the image from the " + strings.ToLower(job.Framework) + " preset:\n" + dockerfile)
	}
	key := r.contextKey(ctx, root, dockerfile)
	dockerfile = r.withLabels(dockerfile, job, key)
	if r.reuseUnchanged(ctx, job, key, out) {
		r.pruneProject(context.WithoutCancel(ctx), job.ProjectID)
		return commit, nil
	}

	if err := r.makeImage(ctx, job, root, dockerfile, out); err != nil {
		return "", err
	}

	if gi := job.Limits.StorageGi; gi > 0 {
		res, err := r.docker.ImageInspect(ctx, r.imageTag(job))
		if err != nil {
			return "", r.engineError("inspecting the built image", err)
		}
		if used := dirSize(root) + res.Size; used > int64(gi)*r.cfg.StorageGiB {
			r.removeImage(context.WithoutCancel(ctx), r.imageTag(job))
			return "", storageError("the checkout and the image are", used, gi)
		}
	}
	// The newest build of the project is its layer cache for the next one.
	if _, err := r.docker.ImageTag(ctx, client.ImageTagOptions{Source: r.imageTag(job), Target: r.cacheTag(job.ProjectID)}); err != nil {
		r.cfg.Logger.Warn("container: tagging the project's cache image", "err", err)
	}
	r.pruneProject(context.WithoutCancel(ctx), job.ProjectID)
	return commit, nil
}

// makeImage makes job's image from dockerfile: without the builder when it
// is a plain image FROM scratch (scratch.go), else with it.
func (r *Runtime) makeImage(ctx context.Context, job rt.Job, root, dockerfile string, out *runlog.Output) error {
	timeout := cmp.Or(job.Limits.BuildTimeout, r.cfg.BuildTimeout)
	bctx, bcancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("build timed out after %s", timeout))
	defer bcancel()
	start := time.Now()
	if img, ok := scratchimage.Plan(dockerfile, filepath.Join(root, "src")); ok {
		err := r.loadScratch(bctx, img, root, filepath.Join(root, "src"), r.imageTag(job))
		if err == nil {
			out.System(fmt.Sprintf("image built in %.1fs (FROM scratch: its files and settings, loaded without build steps)", time.Since(start).Seconds()))
			return nil
		}
		if !errors.Is(err, scratchimage.ErrNotPlain) {
			if bctx.Err() != nil {
				return context.Cause(bctx)
			}
			return runlog.MaskErr(out.Mask, err)
		}
	}
	err := r.buildImage(bctx, job, root, dockerfile, out)
	if errors.Is(err, errCacheLayerLost) && bctx.Err() == nil {
		out.System("the engine removed a cached layer this build was using (another build or a project's removal); building again")
		err = r.buildImage(bctx, job, root, dockerfile, out)
	}
	if err != nil {
		if bctx.Err() != nil {
			return context.Cause(bctx)
		}
		return runlog.MaskErr(out.Mask, err)
	}
	out.System(fmt.Sprintf("image built in %.1fs", time.Since(start).Seconds()))
	return nil
}

// buildImage sends the checkout (root/src) as a build context and streams
// the output. The build runs under its own cgroup parent (the pids limit) and
// a diskWatch (the plan's storage limit).
func (r *Runtime) buildImage(ctx context.Context, job rt.Job, root, dockerfile string, out *runlog.Output) error {
	src := filepath.Join(root, "src")
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	trace := &buildTrace{}
	if _, err := r.watchDisk(ctx, job, root, trace, stop); err != nil {
		return err
	}
	cg, err := r.setUpBuildCgroup(ctx, job)
	if err != nil {
		return err
	}
	defer r.removeBuildCgroup(cg)
	go r.verifyCgroup(ctx, cg, trace, stop)
	defer func() { r.dropUntagged(context.WithoutCancel(ctx), trace) }()
	r.buildMu.RLock()
	defer r.buildMu.RUnlock()
	if err := r.ensureBuildNetwork(ctx); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, src, dockerfile)) }()
	defer pr.Close()
	opts := r.buildOptions(job, cg.Parent, dockerfile)
	res, err := r.docker.ImageBuild(ctx, pr, opts)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if reason := buildRefusal(err); reason != "" {
			r.cfg.Logger.Info("container: the engine refused a build", "deployment", job.DeploymentID, "err", err)
			return errors.New("the container engine refused the build: " + reason)
		}
		return r.engineError("starting the image build", err)
	}
	defer res.Body.Close()
	if err := r.readBuildOutput(ctx, job, res.Body, trace, out); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if _, err := r.docker.ImageInspect(ctx, r.imageTag(job)); err != nil {
		return fmt.Errorf("the image build ended without an image:\n%s", out.Tail())
	}
	r.keepStages(ctx, job, trace)
	return nil
}

// buildOptions are the engine's options of job's image build: its limits,
// the build network, the cgroup parent holding its pids limit, the labels.
func (r *Runtime) buildOptions(job rt.Job, cgroupParent, dockerfile string) client.ImageBuildOptions {
	mem, nano, _ := r.limits(job.Limits)
	opts := client.ImageBuildOptions{
		Tags:        []string{r.imageTag(job)},
		Remove:      true,
		ForceRemove: true, // intermediate containers go even when a step fails
		PullParent:  false,
		Memory:      mem,
		MemorySwap:  mem,
		CPUPeriod:   100_000,
		CPUQuota:    nano / 10_000, // 1 CPU = 100000us per 100000us period
		NetworkMode: r.buildNetwork(),
		// pids.max of the whole build (the classic builder has no pids option).
		CgroupParent: cgroupParent,
		// The labels are the Dockerfile's last line (withLabels).
		Version:     build.BuilderV1,
		SecurityOpt: nil,
		Dockerfile:  generatedDockerfile,
	}
	return opts
}

// withLabels appends the image's labels to the Dockerfile (the repository's
// or a preset's) as its last instruction: one LABEL line, one build step.
// The classic builder makes a step of each label of ImageBuildOptions.Labels
// (Docker 20.10: four steps, each about a second on fuse-overlayfs). No
// deployment id: the image outlives its deployment as the project's cache;
// tags say which deployment built it.
func (r *Runtime) withLabels(dockerfile string, job rt.Job, key string) string {
	if dockerfile != "" && !strings.HasSuffix(dockerfile, "\n") {
		dockerfile += "\n"
	}
	return fmt.Sprintf("%sLABEL %q=%q %q=%q %q=%q %q=%q %q=%q\n", dockerfile, LabelKeelson, "1", LabelInstance, r.cfg.Instance,
		LabelProject, job.ProjectID, LabelRole, "image", LabelContext, key)
}

// readBuildOutput streams the build's output (a JSON message per line) to
// out until it ends; an error message ends the build as failed.
func (r *Runtime) readBuildOutput(ctx context.Context, job rt.Job, body io.Reader, trace *buildTrace, out *runlog.Output) error {
	w := out.Writer()
	dec := json.NewDecoder(body)
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err != nil {
			w.Flush()
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return r.engineError("reading the build's output", err)
		}
		if msg.Stream != "" {
			trace.see(msg.Stream)
			_, _ = w.Write([]byte(ansi.ReplaceAllString(msg.Stream, "")))
		}
		if msg.Status != "" {
			_, _ = w.Write([]byte(msg.Status + "\n"))
		}
		if msg.Error != "" {
			w.Flush()
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if lostParent(msg.Error) {
				return fmt.Errorf("%w: %s", errCacheLayerLost, msg.Error)
			}
			_, _, memMi := r.limits(job.Limits)
			return fmt.Errorf("the image build failed: %s\n%s", buildErrorText(msg.Error, out.Tail(), memMi), out.Tail())
		}
	}
	return nil
}

// errCacheLayerLost is a build that failed because the engine removed, while
// the build ran, a cached image one of its steps had started from: the
// classic builder reuses any matching image as a step's cache, and another
// build's clean-up or a deleted project can remove it before this build
// commits its next layer on top ("unknown parent image ID"). The engine's
// cache no longer holds the lost image, so building again succeeds.
var errCacheLayerLost = errors.New("the engine lost a cached layer mid-build")

func lostParent(msg string) bool {
	return strings.Contains(msg, "unknown parent image ID") || strings.Contains(msg, "failed to set parent")
}

// buildErrorText keeps a failing step's message but words the engine's
// common refusals for a user.
func buildErrorText(msg, tail string, memMi int) string {
	switch {
	case strings.Contains(tail, "signal: killed") || strings.Contains(msg, "code: 137"):
		return fmt.Sprintf("%s (a build process was killed: most likely out of memory, the plan allows %d MiB)", msg, memMi)
	case strings.Contains(msg, "pull access denied"), strings.Contains(msg, "manifest unknown"),
		strings.Contains(msg, "repository does not exist"), strings.Contains(msg, "No such image"),
		strings.Contains(msg, "not found: manifest"):
		return "a base image does not exist or is private: " + baseImageOf(msg)
	case strings.Contains(msg, "/v2/") && (strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout") ||
		strings.Contains(msg, "connection refused") || strings.Contains(msg, "TLS handshake")):
		return "a base image is not on this server and its registry cannot be reached (the operator can load it locally, see README: Security model)"
	}
	return msg
}

// buildRefusal is the engine's reason for refusing a build request outright
// (the Dockerfile is empty, cannot be parsed, names an unknown instruction),
// or "" when the error is not such a refusal. Those reasons are about the
// tenant's own repository, so they are passed on (shortened) for the user to act on.
func buildRefusal(err error) string {
	if !cerrdefs.IsInvalidArgument(err) && !cerrdefs.IsNotFound(err) {
		return ""
	}
	msg := strings.TrimSpace(err.Error())
	msg = strings.TrimPrefix(msg, "Error response from daemon: ")
	if msg == "" {
		return ""
	}
	if len(msg) > 500 {
		msg = msg[:500] + "..."
	}
	return msg
}

// baseImageOf keeps the engine's sentence about a missing image short.
func baseImageOf(msg string) string {
	if len(msg) > 300 {
		msg = msg[:300]
	}
	return msg
}

func (r *Runtime) ensureBuildNetwork(ctx context.Context) error {
	return r.ensureNetwork(ctx, r.buildNetwork(), egress.BuildBridge(r.cfg.Instance), "build-network")
}

// ensureAppNetwork makes the one network every app of this instance is on.
func (r *Runtime) ensureAppNetwork(ctx context.Context) error {
	return r.ensureNetwork(ctx, r.appNetwork(), egress.AppBridge(r.cfg.Instance), "app-network")
}

const bridgeNameOption = "com.docker.network.bridge.name"

// ensureNetwork creates a bridge network on which containers cannot talk to
// each other (inter-container communication off), on the bridge interface
// the egress rules name, unless it exists. A network of that name on another
// bridge (made by an older Keelson) is replaced.
func (r *Runtime) ensureNetwork(ctx context.Context, name, bridge, role string) error {
	r.netMu.Lock()
	defer r.netMu.Unlock()
	if res, err := r.docker.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); err == nil {
		if res.Network.Options[bridgeNameOption] == bridge {
			return r.checkBridge(bridge)
		}
		if _, err := r.docker.NetworkRemove(ctx, name, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("network %s is on a bridge the egress rules do not cover and cannot be replaced (%s); stop what uses it", name, oneLine(err.Error()))
		}
	}
	_, err := r.docker.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge",
		Options: map[string]string{
			"com.docker.network.bridge.enable_icc": "false",
			bridgeNameOption:                       bridge,
		},
		Labels: map[string]string{LabelKeelson: "1", LabelInstance: r.cfg.Instance, LabelRole: role},
	})
	if err != nil && !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "already exists") {
		return r.engineError("creating a network", err)
	}
	return r.checkBridge(bridge)
}

// checkBridge makes sure the egress rules see the network: its bridge is an
// interface of this host (not so when the engine runs elsewhere).
func (r *Runtime) checkBridge(bridge string) error {
	if r.fw == nil {
		return nil
	}
	if _, err := net.InterfaceByName(bridge); err != nil {
		return fmt.Errorf("the engine's network bridge %s is not on this host (is DOCKER_HOST another machine?), so the egress rules cannot apply; %s", bridge, egress.OpenHint)
	}
	return nil
}

// pruneProject removes the project's images that no tag names any more
// (earlier builds, replaced as the cache).
func (r *Runtime) pruneProject(ctx context.Context, projectID string) {
	res, err := r.docker.ImageList(ctx, client.ImageListOptions{
		Filters: client.Filters{}.Add("label", LabelInstance+"="+r.cfg.Instance, LabelProject+"="+projectID).Add("dangling", "true"),
	})
	if err != nil {
		r.cfg.Logger.Warn("container: listing images to prune", "err", err)
		return
	}
	for _, img := range res.Items {
		r.removeImage(ctx, img.ID)
	}
}

func (r *Runtime) removeImage(ctx context.Context, ref string) {
	if _, err := r.docker.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
		r.cfg.Logger.Warn("container: removing an image", "image", ref, "err", err)
	}
}

// Route points the slug's host at upstream and returns the public URL.
func (r *Runtime) Route(ctx context.Context, slug, deploymentID, upstream string) (string, error) {
	return r.sup.Route(ctx, slug, deploymentID, upstream)
}

// Unroute removes the slug's route if it still points at deploymentID.
func (r *Runtime) Unroute(ctx context.Context, slug, deploymentID string) error {
	return r.sup.Unroute(ctx, slug, deploymentID)
}

// Running reports whether this runtime holds the app of deploymentID.
func (r *Runtime) Running(deploymentID string) bool { return r.sup.Running(deploymentID) }

// Cleanup stops the app, cancels a running build, removes the container, its
// network, the checkout and the deployment's image tag.
func (r *Runtime) Cleanup(ctx context.Context, deploymentID string) error {
	if err := checkID(deploymentID); err != nil {
		return err
	}
	if err := r.Stop(ctx, deploymentID); err != nil {
		return err
	}
	unlock := r.builds.CancelAndLock(deploymentID)
	defer unlock()
	var errs []error
	if err := os.RemoveAll(r.workdir(deploymentID)); err != nil {
		errs = append(errs, fmt.Errorf("removing the workspace of %s: %w", deploymentID, err))
	}
	// By name, not by label: an image pulled from the registry carries the
	// labels of the host that built it.
	res, err := r.docker.ImageList(ctx, client.ImageListOptions{
		Filters: client.Filters{}.Add("reference", "keelson/"+r.cfg.Instance+"-*:"+strings.ToLower(deploymentID)),
	})
	if err != nil {
		errs = append(errs, r.engineError("listing the deployment's images", err))
	} else {
		for _, img := range res.Items {
			for _, tag := range img.RepoTags {
				if strings.HasSuffix(tag, ":"+strings.ToLower(deploymentID)) {
					r.removeImage(ctx, tag)
					r.pruneProject(ctx, img.Labels[LabelProject])
				}
			}
		}
	}
	return errors.Join(errs...)
}

// CleanupProject removes every image of a deleted project (its cache
// included). Call it after every deployment of the project was cleaned up.
func (r *Runtime) CleanupProject(ctx context.Context, projectID string) error {
	res, err := r.docker.ImageList(ctx, client.ImageListOptions{
		Filters: client.Filters{}.Add("label", LabelInstance+"="+r.cfg.Instance, LabelProject+"="+projectID),
	})
	if err != nil {
		return r.engineError("listing the project's images", err)
	}
	named, err := r.docker.ImageList(ctx, client.ImageListOptions{
		Filters: client.Filters{}.Add("reference", r.repo(projectID)),
	})
	if err != nil {
		return r.engineError("listing the project's images", err)
	}
	// Stage caches carry no label, and the engine-wide layer cache can make
	// one the same image as another project's: untag them, never force.
	for _, img := range named.Items {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, r.repo(projectID)+":") {
				r.removeImage(ctx, tag)
			}
		}
	}
	// Newest first, so children go before the images they were built on.
	sort.Slice(res.Items, func(i, j int) bool { return res.Items[i].Created > res.Items[j].Created })
	for _, img := range res.Items {
		if _, err := r.docker.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			r.cfg.Logger.Warn("container: removing a project image", "image", img.ID, "err", err)
		}
	}
	return nil
}

// Close cancels every build and stops every app (their containers are
// removed), waiting at most until ctx is done; a server killed without Close
// leaves them running and the next one adopts them. The client is closed if
// the runtime made it. The Runtime refuses new work afterwards.
func (r *Runtime) Close(ctx context.Context) error {
	r.builds.Close()
	ids := r.sup.Shut()
	r.cancel()
	// Builds end with the context; their network goes with the runtime.
	r.buildMu.Lock()
	if _, err := r.docker.NetworkRemove(ctx, r.buildNetwork(), client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		r.cfg.Logger.Warn("container: removing the build network", "err", err)
	}
	r.buildMu.Unlock()
	errs := lifecycle.StopAll(ctx, ids, r.Stop)
	if _, err := r.docker.NetworkRemove(ctx, r.appNetwork(), client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		r.cfg.Logger.Warn("container: removing the app network", "err", err)
	}
	errs = append(errs, r.removeFirewall(ctx))
	if r.ownClient {
		errs = append(errs, r.docker.Close())
	}
	return errors.Join(errs...)
}

// removeFirewall removes the egress rules, unless a container of this
// instance still runs (another server on the same instance, or a Stop that
// failed): its traffic stays fenced.
func (r *Runtime) removeFirewall(ctx context.Context) error {
	if r.fw == nil {
		return nil
	}
	res, err := r.docker.ContainerList(ctx, client.ContainerListOptions{
		Filters: client.Filters{}.Add("label", LabelInstance+"="+r.cfg.Instance)})
	if err != nil {
		return r.engineError("listing containers before removing the egress rules", err)
	}
	if len(res.Items) > 0 {
		r.cfg.Logger.Warn("container: containers of this instance still run; egress rules kept", "containers", len(res.Items))
		return nil
	}
	if err := r.fw.Remove(ctx); err != nil {
		return fmt.Errorf("removing the egress rules: %w", err)
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
