package process

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/keelson-dev/keelson/deployments/internal/runlog"
)

// pipeDrainWait bounds how long output is read after a process group is gone,
// in case something that left the group still holds the pipe.
const pipeDrainWait = 2 * time.Second

// proc is one started child: a process group whose output is pumped into out.
type proc struct {
	cmd    *exec.Cmd
	g      *group
	out    *runlog.Output
	exited chan struct{} // closed once the leader was reaped, the group killed and output drained
	err    error         // the leader's exit error, set before exited is closed
}

// startProc starts cmd (with its Env set) for deployment id in its own
// process group, marked so that all it starts can be found (see contain.go),
// with stdout and stderr merged into out. When the leader exits, everything
// else it started is killed, wherever it went.
func (r *Runtime) startProc(cmd *exec.Cmd, out *runlog.Output, id, kind string) (*proc, error) {
	g, err := r.contain.newGroup(cmd, id, kind)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	pr, pw, err := os.Pipe()
	if err != nil {
		g.abandon(cmd)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := g.start(cmd); err != nil {
		if cmd.Process != nil { // started, but the server thread is stuck in its cgroup
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		g.abandon(cmd)
		pr.Close()
		pw.Close()
		return nil, err
	}
	g.started(cmd)
	pw.Close()
	r.running.add()
	p := &proc{cmd: cmd, g: g, out: out, exited: make(chan struct{})}
	pumped := make(chan struct{})
	go func() {
		out.Pump(pr)
		close(pumped)
	}()
	go func() {
		defer r.running.done()
		p.err = cmd.Wait()
		p.signal(syscall.SIGKILL) // leftovers of the group go with their leader
		g.killAll()               // and so does whatever left the group
		t := time.NewTimer(pipeDrainWait)
		select {
		case <-pumped:
		case <-t.C:
		}
		t.Stop()
		pr.Close()
		<-pumped
		close(p.exited)
	}()
	return p, nil
}

// signal sends sig to the whole process group and to every process that
// left it.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	p.g.signal(sig)
}

// terminate asks the group to stop, kills it after grace, and waits.
func (p *proc) terminate(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return
	case <-t.C:
	}
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// runProc runs cmd to completion, killing its group when ctx is done. It
// returns the exit error, or ctx's error when ctx ended it.
func (r *Runtime) runProc(ctx context.Context, cmd *exec.Cmd, out *runlog.Output, id, kind string) error {
	p, err := r.startProc(cmd, out, id, kind)
	if err != nil {
		return err
	}
	select {
	case <-p.exited:
		return p.err
	case <-ctx.Done():
		p.signal(syscall.SIGKILL)
		<-p.exited
		return context.Cause(ctx)
	}
}
