// Package platformtest holds the test helpers every module shares: a buffer
// safe for concurrent writes, a poll-until-deadline helper and log capture.
// It is imported by tests only; production code never depends on it.
package platformtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// SyncBuffer is an io.Writer safe for concurrent writes (log sinks, a child
// process's output); String returns everything written so far.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns a copy of everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond until it returns true, and fails t (naming what it
// waited for) once within has passed. It re-checks after 5 ms at first,
// backing off to every 100 ms, so a quick condition is seen at once and a
// long wait costs little CPU. cond runs on the test's goroutine, so it may
// itself call t.Fatal.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	wait := 5 * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		<-timer.C
		wait = min(2*wait, 100*time.Millisecond)
		timer.Reset(wait)
	}
}

// Receive returns the next value from ch (the zero value once ch is
// closed), and fails t, naming what it waited for, if none comes within
// within: a wait on the code under test that never ends must fail the test,
// not hang its binary until go test's -timeout (30 minutes in CI).
func Receive[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %s waiting for %s", within, what)
		var zero T
		return zero
	}
}

// FindLeaks is goleak.Find for the end of a test binary, with 10 s instead
// of goleak's own half second for goroutines that are ending (a server's
// connections after Close, a killed child's waiter) to return: on a loaded
// CI machine (2 cores, several test binaries at once) one may not be
// scheduled within half a second. A goroutine that never ends still fails.
func FindLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CaptureLogs returns a debug-level JSON logger and the buffer it writes to,
// for tests that assert what was (or was never) logged.
func CaptureLogs() (*slog.Logger, *SyncBuffer) {
	buf := &SyncBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// CaptureTextLogs is CaptureLogs with slog's text format.
func CaptureTextLogs() (*slog.Logger, *SyncBuffer) {
	buf := &SyncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// Unique returns n random lowercase hex digits (n <= 32) for names that must
// not collide between tests running at once: queues, slugs, container
// markers. (platform.NewID()[:8] is not that: a UUIDv7 starts with the time,
// the same for about a minute.)
func Unique(n int) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])[:n]
}

// Report appends a line, prefixed with the test binary's package directory,
// to the file named by KEELSON_TEST_REPORT (.ci/run prints it at the end),
// since go test hides the output of passing packages: what a run skipped
// and the command that enables it, what test infrastructure it used.
func Report(line string) {
	f := os.Getenv("KEELSON_TEST_REPORT")
	if f == "" {
		return
	}
	wd, _ := os.Getwd()
	fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer fh.Close()
	fmt.Fprintf(fh, "%s: %s\n", filepath.Base(wd), line)
}
