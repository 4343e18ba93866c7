package logstream

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
)

// FuzzLogCursors drives the log stream's resume parameters (after, since,
// Last-Event-ID) through ParseStart: no panic; a bad value is a 400 naming
// its parameter; a good one starts at what it says, with Last-Event-ID
// winning over since, and since over after. (The HTTP route in front of it is
// fuzzed end to end in examples/server.) Seeds: testdata/fuzz/FuzzLogCursors.
func FuzzLogCursors(f *testing.F) {
	f.Add("", "", "")
	f.Add("42", "", "")
	f.Add("", "2025-01-02T15:04:05Z", "")
	f.Add("7", "2025-01-02T15:04:05.123456789+02:00", "9")
	f.Add("-1", "yesterday", "abc")
	f.Add(" 5 ", "2025-13-40T99:99:99Z", "9223372036854775808")
	f.Add("0x10", "0001-01-01T00:00:00Z", "\x00")
	f.Fuzz(func(t *testing.T, after, since, last string) {
		st, err := ParseStart(after, since, last)
		if err != nil {
			var pe *platform.Error
			if !errors.As(err, &pe) || pe.Status != 400 {
				t.Fatalf("ParseStart(%q, %q, %q): %v, want a 400", after, since, last, err)
			}
			named := (after != "" && strings.Contains(pe.Message, "query.after")) ||
				(since != "" && strings.Contains(pe.Message, "query.since")) ||
				(last != "" && strings.Contains(pe.Message, "Last-Event-ID"))
			if !named {
				t.Fatalf("ParseStart(%q, %q, %q): %q names no parameter given", after, since, last, pe.Message)
			}
			return
		}
		if st.After < 0 {
			t.Fatalf("negative start %d", st.After)
		}
		cursor := func(s string) int64 { n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64); return n }
		switch {
		case last != "":
			if st.After != cursor(last) || !st.Since.IsZero() {
				t.Fatalf("Last-Event-ID %q: start %+v", last, st)
			}
		case since != "":
			want, _ := time.Parse(time.RFC3339Nano, since)
			if !st.Since.Equal(want) || st.Since.Location() != time.UTC || st.After != 0 {
				t.Fatalf("since %q: start %+v", since, st)
			}
		default:
			if st.After != cursor(after) {
				t.Fatalf("after %q: start %+v", after, st)
			}
		}
	})
}

// FuzzLogToken: no forged or altered log token verifies; a genuine one
// verifies only for its deployment, its user and before it expires.
// Seeds: testdata/fuzz/FuzzLogToken.
func FuzzLogToken(f *testing.F) {
	tokens := Tokens{Key: []byte("fuzz-log-token-key-0123456789abcdef")}
	const dep, user = "0190c5b4-0000-7000-8000-000000000001", "0190c5b4-0000-7000-8000-000000000002"
	now := time.Unix(1_750_000_000, 0)
	genuine := tokens.Issue(dep, user, now.Add(time.Minute))
	f.Add(genuine, dep, int64(0))
	f.Add(genuine, dep, int64(120))
	f.Add(genuine+"A", dep, int64(0))
	f.Add(strings.Replace(genuine, ".", "..", 1), dep, int64(0))
	f.Add("djF8eHx5fDk5OTk5OTk5OTk5.AAAA", "x", int64(0))
	f.Add("", "", int64(-5))
	f.Fuzz(func(t *testing.T, token, deploymentID string, offset int64) {
		at := now.Add(time.Duration(offset%1_000_000) * time.Second)
		got, ok := tokens.Verify(token, deploymentID, at)
		if !ok {
			if got != "" {
				t.Fatalf("refused token returned user %q", got)
			}
			return
		}
		// Equal after decoding: base64 tolerates non-zero padding bits, so
		// another spelling of the genuine token is the genuine token.
		if decoded(token) != decoded(genuine) || deploymentID != dep || got != user || !at.Before(now.Add(time.Minute)) {
			t.Fatalf("verify(%q, %q, %s) = %q: only the genuine token, for its deployment, before expiry", token, deploymentID, at, got)
		}
	})
}

func decoded(token string) string {
	p, sig, _ := strings.Cut(token, ".")
	pb, _ := base64.RawURLEncoding.DecodeString(p)
	sb, _ := base64.RawURLEncoding.DecodeString(sig)
	return string(pb) + "|" + string(sb)
}
