package process

import (
	"context"
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
	return r.gitPolicy().Clone(ctx, job, out, gitclone.Checkout{
		Dir: ws.root, GitPath: r.cfg.GitPath, Timeout: r.cfg.CloneTimeout, Clear: removeAll,
		Env: func(src repoSource, pin [][2]string) []string { return r.gitEnv(ws, src, job.GitAuth, pin...) },
		Git: func(ctx context.Context, env []string, args ...string) error {
			cmd := exec.Command(r.cfg.GitPath, args...)
			cmd.Dir, cmd.Env = ws.root, env
			return r.runProc(ctx, cmd, out, job.DeploymentID, "git")
		},
	})
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
