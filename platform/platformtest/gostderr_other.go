//go:build !linux

package platformtest

import "os"

// goStderr finds the go command's standard error on Linux only; elsewhere
// the summary goes to the binary's own (shown with -v or on failure).
func goStderr() *os.File { return nil }
