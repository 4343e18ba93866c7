package container

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
	"github.com/keelson-dev/keelson/deployments/internal/runlog"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// The clone is the process runtime's (deployments/internal/gitclone): the
// same URL rules, git environment and host pinning, so both runtimes fetch
// exactly alike. Here git runs on the host in the deployment's work
// directory, in its own process group.

// clone fetches the job's commit into <root>/src and returns the commit.
func (r *Runtime) clone(ctx context.Context, job rt.Job, root string, out *runlog.Output) (string, error) {
	policy := gitclone.Policy{AllowLocalRepos: r.cfg.AllowLocalRepos, AllowPrivateHosts: r.cfg.AllowPrivateHosts, CAFile: r.cfg.GitCAFile}
	commit, err := policy.Clone(ctx, job, out, gitclone.Checkout{
		Dir: root, GitPath: r.cfg.GitPath, Timeout: r.cfg.CloneTimeout, Clear: os.RemoveAll,
		Env: func(src gitclone.Source, pin [][2]string) []string {
			// core.symlinks=true, as this runtime has always set it explicitly.
			pin = append(pin, [2]string{"core.symlinks", "true"})
			return policy.Env(os.Getenv("PATH"), root, root, src, job.GitAuth, pin...)
		},
		Git: func(ctx context.Context, env []string, args ...string) error {
			cmd := exec.CommandContext(ctx, r.cfg.GitPath, args...)
			cmd.Dir, cmd.Env = root, env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			w := out.Writer()
			cmd.Stdout, cmd.Stderr = w, w
			err := cmd.Run()
			w.Flush()
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		},
	})
	if err == nil && exists(filepath.Join(root, "src", ".gitmodules")) {
		out.System("the repository has submodules (.gitmodules); they are not fetched: vendor their files into the repository")
	}
	return commit, err
}
