package container

import (
	"io"
	"strings"
	"sync"

	"github.com/keelson-dev/keelson/deployments"
)

// maxLine caps one log line; longer output is split into several lines.
const maxLine = 8 << 10

const tailLines = 30

// output turns build, git and app output into masked log lines and keeps the
// last few for error messages.
type output struct {
	sink   deployments.LogSink
	stream string
	mask   *deployments.Masker

	mu   sync.Mutex
	tail []string
	next int
}

func newOutput(sink deployments.LogSink, stream string, mask *deployments.Masker) *output {
	if sink == nil {
		sink = discardSink{}
	}
	return &output{sink: sink, stream: stream, mask: mask}
}

type discardSink struct{}

func (discardSink) Log(string, string) {}

func (o *output) line(s string) {
	s = o.mask.Mask(strings.ToValidUTF8(s, "\uFFFD"))
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

// system logs a runtime message (masked) on the system stream.
func (o *output) system(msg string) { o.sink.Log(deployments.StreamSystem, o.mask.Mask(msg)) }

// Tail returns the last lines seen, oldest first.
func (o *output) Tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := append(append([]string(nil), o.tail[o.next:]...), o.tail[:o.next]...)
	return strings.Join(lines, "\n")
}

// pump reads r until EOF or error, one masked line per newline; long lines
// are split after masking (deployments.LineSplitter).
func (o *output) pump(r io.Reader) {
	w := o.writer()
	_, _ = io.Copy(w, r)
	w.Flush()
}

// writer returns an io.Writer that emits masked lines to o (for stdcopy and
// exec); call Flush at the end of the output.
func (o *output) writer() *deployments.LineSplitter {
	return &deployments.LineSplitter{MaxLine: maxLine, Mask: o.mask, Emit: o.line}
}

// masker masks the job's secret values (and its git credential) as ***.
func masker(job deployments.Job) *deployments.Masker {
	var secrets []string
	for _, v := range job.Env {
		if v.Secret && v.Value != "" {
			secrets = append(secrets, v.Value)
		}
	}
	if a := job.GitAuth; a != nil && a.Password != "" {
		secrets = append(secrets, a.Password, basicToken(a))
	}
	return deployments.NewMasker(secrets...)
}

// maskedError is err with secrets masked in its text; errors.Is/As still see the cause.
type maskedError struct {
	msg   string
	cause error
}

func (e *maskedError) Error() string { return e.msg }
func (e *maskedError) Unwrap() error { return e.cause }

func maskErr(mask *deployments.Masker, err error) error {
	if err == nil {
		return nil
	}
	return &maskedError{msg: mask.Mask(err.Error()), cause: err}
}
