package platformtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestSummaryShownByPlainGoTest runs `go test ./testdata/skipper` (a passing
// package with one skipped test) as a person would, without -v, and looks
// for the summary line in what go test printed: to a pipe, and to a plain
// file (where go's own lines must stay whole), through pidfd_getfd and
// through the /proc fallback.
func TestSummaryShownByPlainGoTest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the go command's standard error is found on Linux only")
	}
	const want = "keelson tests: platform/platformtest/testdata/skipper skipped 1 tests: 1 (TestNeedsWidget): no widget on this machine; enable: make widget"
	for _, fallback := range []string{"0", "1"} {
		run := func(t *testing.T, toFile bool) string {
			cmd := exec.Command("go", "test", "-count=1", "./testdata/skipper")
			cmd.Env = append(os.Environ(), "PLATFORMTEST_NO_PIDFD="+fallback, "KEELSON_TEST_REPORT=")
			if !toFile {
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("go test: %v\n%s", err, out)
				}
				return string(out)
			}
			f, err := os.Create(filepath.Join(t.TempDir(), "out")) // no O_APPEND, as the shell's >
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdout, cmd.Stderr = f, f
			if err := cmd.Run(); err != nil {
				t.Fatalf("go test: %v", err)
			}
			out, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			return string(out)
		}
		t.Run("pipe/fallback="+fallback, func(t *testing.T) {
			out := run(t, false)
			if !strings.Contains(out, want+"\n") || !strings.Contains(out, "ok  \tgithub.com/keelson-dev/keelson/platform/platformtest/testdata/skipper") {
				t.Fatalf("go test printed:\n%s\nwant the line:\n%s", out, want)
			}
		})
		t.Run("file/fallback="+fallback, func(t *testing.T) {
			out := run(t, true)
			if !strings.HasPrefix(out, "ok  \t") && !strings.HasPrefix(out, want+"\nok  \t") {
				t.Fatalf("go test's output file holds:\n%q", out)
			}
			// pidfd_getfd shares go's file offset, so the line is there; the
			// fallback leaves a plain file alone rather than overwrite it.
			if fallback == "0" && !strings.Contains(out, want) {
				t.Fatalf("go test's output file lacks the line:\n%s", out)
			}
		})
	}
}
