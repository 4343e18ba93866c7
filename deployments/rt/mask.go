package rt

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
)

// MinSecretLen is the shortest secret value that is masked in logs. Shorter
// values are never masked: masking "x" would replace every x of the output
// while hiding nothing. The projects module refuses to store a secret env
// value this short (projects.MinSecretLen, the same number), so only a
// credential of another source (none today) could be shorter.
const MinSecretLen = 8

// Masker replaces secret values by *** in log text. A value is masked with
// and without its trailing newline, and each line of a multi-line value
// (a PEM key) is masked on its own, since output reaches the log line by
// line. Lines of a value shorter than MinSecretLen are not masked. The zero
// Masker masks nothing. Immutable: safe for concurrent use.
type Masker struct {
	r       *strings.Replacer
	keys    []string // longest first
	longest int
}

// NewMasker returns a Masker of values.
func NewMasker(values ...string) *Masker {
	seen := map[string]bool{}
	var keys []string
	add := func(k string) {
		if len(k) >= MinSecretLen && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, v := range values {
		add(v)
		trimmed := strings.TrimRight(v, "\r\n")
		add(trimmed)
		if strings.ContainsAny(trimmed, "\r\n") {
			for _, line := range strings.FieldsFunc(trimmed, func(r rune) bool { return r == '\n' || r == '\r' }) {
				add(line)
				add(strings.TrimSpace(line))
			}
		}
	}
	m := &Masker{}
	if len(keys) == 0 {
		return m
	}
	// Longest first, so a secret containing another is masked whole.
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	pairs := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		pairs = append(pairs, k, "***")
	}
	m.r, m.keys, m.longest = strings.NewReplacer(pairs...), keys, len(keys[0])
	return m
}

// Mask returns s with every secret replaced by ***.
func (m *Masker) Mask(s string) string {
	if m == nil || m.r == nil {
		return s
	}
	return m.r.Replace(s)
}

// Longest is the length of the longest text masked (0 for none).
func (m *Masker) Longest() int {
	if m == nil {
		return 0
	}
	return m.longest
}

// safeCut returns a cut point at or after at such that no secret occurrence
// in b spans it (an occurrence starting before the cut ends at or before it).
func (m *Masker) safeCut(b []byte, at int) int {
	if m == nil {
		return at
	}
	cut := at
	for _, k := range m.keys {
		// Occurrences that could span the cut start after cut-len(k).
		from := max(0, cut-len(k)+1)
		for from < cut {
			i := bytes.Index(b[from:], []byte(k))
			if i < 0 || from+i >= cut {
				break
			}
			if end := from + i + len(k); end > cut {
				cut = end
			}
			from += i + 1
		}
	}
	return cut
}

// LineSplitter turns a child's output, written in chunks of any size, into
// masked log lines: one per newline, and a line longer than MaxLine is cut
// into pieces, never through a secret (the text is masked before it is cut,
// and a cut that would fall inside a secret moves to its end). Lines are
// masked whole, so a secret written across several writes is masked too.
// Not safe for concurrent use.
type LineSplitter struct {
	// MaxLine is the longest piece emitted (a cut that would split a
	// secret makes a piece longer by at most the secret's length).
	MaxLine int
	Mask    *Masker
	// Emit receives each masked line, without its newline.
	Emit func(line string)

	buf []byte
}

// Write splits p into lines; it never fails.
func (l *LineSplitter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	start := 0
	for {
		rest := l.buf[start:]
		limit := l.MaxLine + l.Mask.Longest()
		if i := bytes.IndexByte(rest[:min(len(rest), limit+1)], '\n'); i >= 0 {
			l.emit(rest[:i])
			start += i + 1
			continue
		}
		// No newline soon: cut once the pending text is long enough that
		// every secret overlapping the cut is already whole in it.
		if len(rest) > limit {
			cut := l.Mask.safeCut(rest, l.MaxLine)
			l.emit(rest[:cut])
			start += cut
			continue
		}
		break
	}
	// Keep the unfinished line at the front of the buffer.
	n := copy(l.buf, l.buf[start:])
	l.buf = l.buf[:n]
	return len(p), nil
}

// Flush emits an unfinished last line (at the end of the output).
func (l *LineSplitter) Flush() {
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = l.buf[:0]
	}
}

func (l *LineSplitter) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	l.Emit(l.Mask.Mask(string(line)))
}
