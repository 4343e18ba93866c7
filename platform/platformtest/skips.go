package platformtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// skipGroup is the tests one binary skipped for one reason.
type skipGroup struct {
	why, enable string
	tests       []string
}

var skips struct {
	mu     sync.Mutex
	groups []*skipGroup
}

// Skip skips t because something it needs is missing on this machine: why
// says what, enable the command that provides it. The skip is reported
// (Report) and goes into the binary's summary line (Summary).
func Skip(t testing.TB, why, enable string) {
	t.Helper()
	skips.mu.Lock()
	var g *skipGroup
	for _, x := range skips.groups {
		if x.why == why && x.enable == enable {
			g = x
		}
	}
	if g == nil {
		g = &skipGroup{why: why, enable: enable}
		skips.groups = append(skips.groups, g)
	}
	g.tests = append(g.tests, t.Name())
	skips.mu.Unlock()
	Report(fmt.Sprintf("skipped %s: %s (enable: %s)", t.Name(), why, enable))
	t.Skipf("skipped: %s (enable: %s)", why, enable)
}

// Summary prints one line naming what this test binary skipped (Skip), why,
// and the commands that enable it; nothing when it skipped nothing. Call it
// from TestMain after m.Run (dbtest.Main does). go test throws away what a
// passing package's binary prints unless -v, so under go test the line is
// written to the go command's own standard error (see goStderr), where a
// plain `go test ./...` shows it next to the package's "ok" line; run
// otherwise, to this process's standard error.
func Summary() {
	line := summaryLine()
	if line == "" {
		return
	}
	if w := goStderr(); w != nil {
		defer w.Close()
		if _, err := fmt.Fprintln(w, line); err == nil {
			return
		}
	}
	fmt.Fprintln(os.Stderr, line)
}

// summaryLine is "keelson tests: <package> skipped N tests: ...".
func summaryLine() string {
	skips.mu.Lock()
	defer skips.mu.Unlock()
	if len(skips.groups) == 0 {
		return ""
	}
	n := 0
	parts := make([]string, 0, len(skips.groups))
	for _, g := range skips.groups {
		n += len(g.tests)
		names := g.tests
		if len(names) > 3 {
			names = append(names[:3:3], fmt.Sprintf("%d more", len(g.tests)-3))
		}
		parts = append(parts, fmt.Sprintf("%d (%s): %s; enable: %s", len(g.tests), strings.Join(names, ", "), g.why, g.enable))
	}
	return fmt.Sprintf("keelson tests: %s skipped %d tests: %s", packageDir(), n, strings.Join(parts, " | "))
}

// packageDir is the test's working directory (its package) relative to the
// module root, or its base name when no go.mod is found above it.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	if root, err := findAbove(wd, "go.mod"); err == nil {
		if rel, err := filepath.Rel(filepath.Dir(root), wd); err == nil {
			return filepath.ToSlash(rel)
		}
	}
	return filepath.Base(wd)
}

// findAbove returns the path of name in dir or the nearest directory above it.
func findAbove(dir, name string) (string, error) {
	for {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the test's directory", name)
		}
		dir = parent
	}
}

// RunRepoScript runs the repository's script (a path from the repository
// root, found above the test's working directory) with bash, args and env
// added to the environment. It holds an exclusive lock on a file named
// after lock in the temp dir meanwhile, so that test binaries running at once
// run it one at a time (the scripts build only what is missing). An error
// ends with the script's last line of output.
func RunRepoScript(ctx context.Context, lock, script string, env []string, args ...string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	path, err := findAbove(wd, script)
	if err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(os.TempDir(), lock+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	cmd := exec.CommandContext(ctx, "bash", append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("%s: %w: %s", script, err, lines[len(lines)-1])
	}
	return nil
}
