package container

import (
	"context"
	"fmt"
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
	src, err := policy.Check(job)
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(filepath.Join(root, "src")); err != nil {
		return "", fmt.Errorf("clearing the workspace: %w", err)
	}
	pin, err := policy.Pin(ctx, src)
	if err != nil {
		return "", err
	}
	// core.symlinks=true, as this runtime has always set it explicitly.
	pin = append(pin, [2]string{"core.symlinks", "true"})
	env := policy.Env(os.Getenv("PATH"), root, root, src, job.GitAuth, pin...)
	git := func(args ...string) error {
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
	}
	revParse := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, r.cfg.GitPath, "-C", "src", "rev-parse", "HEAD")
		cmd.Dir, cmd.Env = root, env
		return cmd.Output()
	}
	commit, err := gitclone.Fetch(ctx, job, src, out, git, revParse)
	if err == nil && exists(filepath.Join(root, "src", ".gitmodules")) {
		out.System("the repository has submodules (.gitmodules); they are not fetched: vendor their files into the repository")
	}
	return commit, err
}
