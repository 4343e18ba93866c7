package container

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sort"
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
	mask   *strings.Replacer

	mu   sync.Mutex
	tail []string
	next int
}

func newOutput(sink deployments.LogSink, stream string, mask *strings.Replacer) *output {
	if sink == nil {
		sink = discardSink{}
	}
	return &output{sink: sink, stream: stream, mask: mask}
}

type discardSink struct{}

func (discardSink) Log(string, string) {}

func (o *output) line(s string) {
	s = o.mask.Replace(strings.ToValidUTF8(s, "\uFFFD"))
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
func (o *output) system(msg string) { o.sink.Log(deployments.StreamSystem, o.mask.Replace(msg)) }

// Tail returns the last lines seen, oldest first.
func (o *output) Tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	lines := append(append([]string(nil), o.tail[o.next:]...), o.tail[:o.next]...)
	return strings.Join(lines, "\n")
}

// pump reads r until EOF or error, one line per newline; long lines are split.
func (o *output) pump(r io.Reader) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			o.line(string(bytes.TrimRight(chunk, "\r\n")))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// writer is an io.Writer that emits lines to o (for stdcopy and exec).
type lineWriter struct {
	o   *output
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.o.line(string(bytes.TrimRight(w.buf[:i], "\r")))
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) > maxLine {
		w.o.line(string(w.buf[:maxLine]))
		w.buf = w.buf[maxLine:]
	}
	return len(p), nil
}

// Flush emits what is left without a trailing newline.
func (w *lineWriter) Flush() {
	if len(w.buf) > 0 {
		w.o.line(string(w.buf))
		w.buf = nil
	}
}

// masker replaces the job's secret values (and its git credential) by ***.
func masker(job deployments.Job) *strings.Replacer {
	var secrets []string
	for _, v := range job.Env {
		if v.Secret && v.Value != "" {
			secrets = append(secrets, v.Value)
		}
	}
	if a := job.GitAuth; a != nil && a.Password != "" {
		secrets = append(secrets, a.Password, basicToken(a))
	}
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, "***")
	}
	return strings.NewReplacer(pairs...)
}

// maskedError is err with secrets masked in its text; errors.Is/As still see the cause.
type maskedError struct {
	msg   string
	cause error
}

func (e *maskedError) Error() string { return e.msg }
func (e *maskedError) Unwrap() error { return e.cause }

func maskErr(mask *strings.Replacer, err error) error {
	if err == nil {
		return nil
	}
	return &maskedError{msg: mask.Replace(err.Error()), cause: err}
}
