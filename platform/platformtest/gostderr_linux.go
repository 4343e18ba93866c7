package platformtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// goStderr returns the standard error of the go command running this test
// binary (its parent process), or nil when the parent is not go or its
// standard error cannot be written without harm:
//   - pidfd_getfd(2) duplicates the go command's descriptor itself, file
//     offset included, so a log file gets the line in order; it needs ptrace
//     rights over the parent, which Yama (ptrace_scope 1) refuses a child;
//   - else /proc/<go>/fd/2 is opened anew, but only when it is a pipe, a
//     terminal or a file open for appending: a new opening of a plain file
//     starts at offset 0, over what go wrote.
func goStderr() *os.File {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return nil
	}
	if os.Getenv("PLATFORMTEST_NO_PIDFD") == "1" { // the fallback, for its test
	} else if pidfd, err := unix.PidfdOpen(ppid, 0); err == nil {
		fd, err := unix.PidfdGetfd(pidfd, 2, 0)
		unix.Close(pidfd)
		if err == nil {
			return os.NewFile(uintptr(fd), "go command's stderr")
		}
	}
	path := fmt.Sprintf("/proc/%d/fd/2", ppid)
	st, err := os.Stat(path)
	if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeCharDevice) == 0 && !appends(ppid, 2) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	return f
}

// appends reports whether pid's descriptor fd was opened with O_APPEND.
func appends(pid, fd int) bool {
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&unix.O_APPEND != 0
		}
	}
	return false
}
