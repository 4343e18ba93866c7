package logstream

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/keelson-dev/keelson/deployments/rt"
)

// Sinks and masking: one Sink per deployment masks secrets, cleans and caps
// lines, keeps the tail of the current step and queues lines for the writer.

// Sink is one deployment's rt.LogSink: it masks secret values, strips bytes a
// database cannot store and queues each line for numbering, storage and
// fan-out. Safe for concurrent use.
type Sink struct {
	logs *Hub
	id   string
	// stored is the last sequence number the writer gave this deployment's
	// lines (or found stored). Only the writer goroutine touches it.
	stored int64

	mu sync.Mutex
	// Output caps: build output counted against MaxBuildLines/Bytes, app
	// lines since the last trim.
	buildLines   int
	buildBytes   int64
	buildDropped bool
	appLines     int
	appTrimmed   bool
	secrets      []string
	masker       *rt.Masker
	tail         []string // last lines of build/app output of the current step
}

var _ rt.LogSink = (*Sink)(nil)

// tailLines is how many output lines a failure message quotes.
const tailLines = 15

// AddSecrets masks each value in every later line (see Masker: values
// shorter than MinSecretLen are not masked).
func (s *Sink) AddSecrets(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, v := range values {
		if !slices.Contains(s.secrets, v) {
			s.secrets = append(s.secrets, v)
			changed = true
		}
	}
	if changed {
		s.masker = rt.NewMasker(s.secrets...)
	}
}

// Mask returns text with the sink's secret values replaced by ***.
func (s *Sink) Mask(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.masker.Mask(text)
}

// Log stores and streams one line. It waits only when the storage queue is full.
func (s *Sink) Log(stream, line string) {
	s.mu.Lock()
	cfg := &s.logs.cfg
	if stream == rt.StreamBuild && s.buildDropped {
		s.mu.Unlock()
		return // past the cap: dropped before any work
	}
	// Mask before cleaning cuts the line, and again after: removing a NUL
	// or an invalid byte could join the halves of a secret.
	line = cutLine(s.masker.Mask(clean(s.masker.Mask(line))))
	switch stream {
	case rt.StreamBuild:
		if s.buildLines+1 > cfg.MaxBuildLines || s.buildBytes+int64(len(line)) > cfg.MaxBuildBytes {
			s.buildDropped = true
			s.logs.enqueue(logItem{sink: s, line: &Line{DeploymentID: s.id, Time: s.logs.now(), Stream: rt.StreamSystem, Message: fmt.Sprintf(
				"build output reached the log cap (%d lines or %d MB per deployment): later build output is not stored", cfg.MaxBuildLines, cfg.MaxBuildBytes>>20)}})
			s.mu.Unlock()
			return
		}
		s.buildLines++
		s.buildBytes += int64(len(line))
	case rt.StreamApp:
		// Trim in steps of a tenth of the cap, not at every line.
		if s.appLines++; s.appLines > cfg.MaxAppLines+max(cfg.MaxAppLines/10, 1) {
			if !s.appTrimmed {
				s.appTrimmed = true
				s.logs.enqueue(logItem{sink: s, line: &Line{DeploymentID: s.id, Time: s.logs.now(), Stream: rt.StreamSystem, Message: fmt.Sprintf(
					"app output is over the log cap (the newest %d lines are kept): older app lines are deleted", cfg.MaxAppLines)}})
			}
			s.logs.enqueue(logItem{sink: s, trim: cfg.MaxAppLines})
			s.appLines = cfg.MaxAppLines
		}
	}
	ln := &Line{DeploymentID: s.id, Time: s.logs.now(), Stream: stream, Message: line}
	if stream != rt.StreamSystem {
		if len(s.tail) == tailLines {
			s.tail = append(s.tail[:0], s.tail[1:]...)
		}
		s.tail = append(s.tail, line)
	}
	// Enqueue under mu so lines reach the queue (and are numbered) in order.
	s.logs.enqueue(logItem{line: ln, sink: s})
	s.mu.Unlock()
}

// Systemf logs a line of the system stream.
func (s *Sink) Systemf(format string, a ...any) { s.Log(rt.StreamSystem, fmt.Sprintf(format, a...)) }

// ResetTail forgets the output lines kept for failure messages (a step begins).
func (s *Sink) ResetTail() {
	s.mu.Lock()
	s.tail = s.tail[:0]
	s.mu.Unlock()
}

// Tail returns the last output lines since ResetTail (already masked).
func (s *Sink) Tail() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tail)
}

// clean makes line storable on both databases: valid UTF-8, no NUL, no
// trailing newline (cutLine bounds its length).
func clean(line string) string {
	line = strings.TrimRight(line, "\r\n")
	if !utf8.ValidString(line) {
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	if strings.IndexByte(line, 0) >= 0 {
		line = strings.ReplaceAll(line, "\x00", "")
	}
	return line
}

// cutLine cuts a line longer than MaxLineBytes (after masking: a cut must
// never leave half a secret).
func cutLine(line string) string {
	if len(line) > MaxLineBytes {
		cut := MaxLineBytes
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + " …[line truncated]"
	}
	return line
}
