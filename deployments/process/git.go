package process

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"

	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
	"github.com/keelson-dev/keelson/platform/repourl"
)

// The clone is deployments/internal/gitclone's, shared with the container
// runtime; here git runs as a contained process group of the deployment.

// repoSource is a validated repository location.
type repoSource = gitclone.Source

// parseRepo validates a job's repository URL: https always; http://, file://
// and absolute paths only when local repos are allowed.
func parseRepo(raw string, allowLocal bool) (repoSource, error) {
	return gitclone.ParseRepo(raw, repourl.Allow{Local: allowLocal})
}

func (r *Runtime) gitPolicy() gitclone.Policy {
	return gitclone.Policy{AllowLocalRepos: r.cfg.AllowLocalRepos, AllowPrivateHosts: r.cfg.AllowPrivateHosts,
		CAFile: r.cfg.GitCAFile, LookupIP: r.lookupIP}
}

// gitEnv is the whole environment of a git command (gitclone.Policy.Env) in
// the workspace ws.
func (r *Runtime) gitEnv(ws workspace, src repoSource, auth *rt.GitAuth, extra ...[2]string) []string {
	return r.gitPolicy().Env(r.cfg.Path, ws.home, ws.tmp, src, auth, extra...)
}

// clone fetches the job's commit into ws.src and returns the commit it checked out.
func (r *Runtime) clone(ctx context.Context, job rt.Job, ws workspace, out *runlog.Output) (string, error) {
	policy := r.gitPolicy()
	src, err := policy.Check(job)
	if err != nil {
		return "", err
	}
	if err := removeAll(ws.src); err != nil {
		return "", fmt.Errorf("clearing the workspace: %w", err)
	}
	pin, err := policy.Pin(ctx, src)
	if err != nil {
		return "", err
	}
	env := r.gitEnv(ws, src, job.GitAuth, pin...)
	git := func(args ...string) error {
		cmd := exec.Command(r.cfg.GitPath, args...)
		cmd.Dir, cmd.Env = ws.root, env
		return r.runProc(ctx, cmd, out, job.DeploymentID, "git")
	}
	revParse := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, r.cfg.GitPath, "-C", "src", "rev-parse", "HEAD")
		cmd.Dir, cmd.Env = ws.root, env
		return cmd.Output()
	}
	return gitclone.Fetch(ctx, job, src, out, git, revParse)
}

// pinPublic is the git config that keeps a clone on a public address
// (gitclone.PinPublic), resolving with the runtime's lookupIP.
func (r *Runtime) pinPublic(ctx context.Context, src repoSource) ([][2]string, error) {
	return gitclone.PinPublic(ctx, src, r.lookupIP)
}

// resolveEntry is a curl resolve entry HOST:PORT:ADDRESS pinning a host name
// to ip; curl wants an IPv6 address in brackets.
func resolveEntry(host, port string, ip netip.Addr) string {
	return gitclone.ResolveEntry(host, port, ip)
}
