// Package runlog is the log of a build or an app that both runtimes
// (deployments/process and deployments/container) write: masked lines on a
// stream, the last few kept for error messages, and the masking of a job's
// secrets in lines and errors.
package runlog

import (
	"io"
	"strings"
	"sync"

	"github.com/keelson-dev/keelson/deployments/internal/gitclone"
	"github.com/keelson-dev/keelson/deployments/rt"
)

// MaxLine caps one log line; longer output is split into several lines
// (never through a secret: see rt.LineSplitter).
const MaxLine = 8 << 10

const tailLines = 30

// Output turns build, git and app output into masked log lines and keeps the
// last few for error messages.
type Output struct {
	sink   rt.LogSink
	stream string
	Mask   *rt.Masker

	mu   sync.Mutex
	tail []string // ring of the last tailLines lines
	next int
}

// New returns the output of one stream into sink (nil: discarded), masked with mask.
func New(sink rt.LogSink, stream string, mask *rt.Masker) *Output {
	if sink == nil {
		sink = discardSink{}
	}
	return &Output{sink: sink, stream: stream, Mask: mask}
}

type discardSink struct{}

func (discardSink) Log(string, string) {}

func (o *Output) line(s string) {
	s = o.Mask.Mask(strings.ToValidUTF8(s, "\uFFFD"))
	o.mu.Lock()
	if len(o.tail) < tailLines {
		o.tail = append(o.tail, s)
	} else {
		o.tail[o.next] = s
		o.next = (o.next + 1) % tailLines
	}
	o.mu.Unlock()
	o.sink.Log(o.stream, s)
}

// System logs a runtime message (masked) on the system stream.
func (o *Output) System(msg string) { o.sink.Log(rt.StreamSystem, o.Mask.Mask(msg)) }

// Tail returns the last lines seen, oldest first, joined by newlines.
func (o *Output) Tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := append(append([]string(nil), o.tail[o.next:]...), o.tail[:o.next]...)
	return strings.Join(lines, "\n")
}

// Pump reads r until EOF or error, emitting one masked line per newline;
// lines longer than MaxLine are split (after masking).
func (o *Output) Pump(r io.Reader) {
	ls := o.Writer()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = ls.Write(buf[:n])
		}
		if err != nil {
			ls.Flush()
			return
		}
	}
}

// Writer returns an io.Writer that emits masked lines to o (for stdcopy and
// exec); call Flush at the end of the output.
func (o *Output) Writer() *rt.LineSplitter {
	return &rt.LineSplitter{MaxLine: MaxLine, Mask: o.Mask, Emit: o.line}
}

// Masker masks the job's secret values (and its git credential) as ***.
func Masker(job rt.Job) *rt.Masker {
	var secrets []string
	for _, v := range job.Env {
		if v.Secret && v.Value != "" {
			secrets = append(secrets, v.Value)
		}
	}
	if a := job.GitAuth; a != nil && a.Password != "" {
		secrets = append(secrets, a.Password, gitclone.BasicToken(a))
	}
	return rt.NewMasker(secrets...)
}

// maskedError is err with the job's secrets masked in its text; errors.Is
// and errors.As still see the cause.
type maskedError struct {
	msg   string
	cause error
}

func (e *maskedError) Error() string { return e.msg }
func (e *maskedError) Unwrap() error { return e.cause }

// MaskErr is err with mask's secrets masked in its text (nil for nil).
func MaskErr(mask *rt.Masker, err error) error {
	if err == nil {
		return nil
	}
	return &maskedError{msg: mask.Mask(err.Error()), cause: err}
}
