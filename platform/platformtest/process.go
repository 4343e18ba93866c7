package platformtest

import (
	"fmt"
	"os/exec"
	"testing"
)

// StartTool starts cmd, a tool a test runs (a test DNS server, an ACME CA),
// with its output to out, and waits until ready says it serves; ready gets
// a channel that receives cmd's exit. Once ready, the tool is killed and
// waited for when t ends; if not, it is killed at once and the error carries
// its output.
func StartTool(t testing.TB, cmd *exec.Cmd, out *SyncBuffer, ready func(exited <-chan error) error) error {
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	if err := ready(exited); err != nil {
		stop()
		return fmt.Errorf("%w; its output:\n%s", err, out.String())
	}
	t.Cleanup(stop)
	return nil
}
