package httpx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/keelson-dev/keelson/platform"
)

// JSONCheck configures CheckJSON.
type JSONCheck struct {
	// MaxBytes is how much of a body is read and checked before the handler
	// runs. A longer body is passed on unchecked: the operation's own limit
	// (Huma's MaxBodyBytes, default 1 MiB) answers 413 for it. Default 1 MiB.
	MaxBytes int64
	// MaxDepth is the deepest nesting of objects and arrays accepted; a
	// deeper body is answered 400 before any decoder sees it (a 2 MiB
	// "nesting bomb" costs a recursive decoder and validator seconds of CPU).
	// Default MaxJSONDepth.
	MaxDepth int
	// Skip exempts requests, e.g. a webhook verified by a signature over its
	// raw bytes whose payload the provider, not our client, chose.
	Skip func(*http.Request) bool
}

// CheckJSON answers 400 in the error model for a JSON request body (a JSON
// Content-Type, or none) that encoding/json would silently alter or that no
// database can store faithfully:
//
//   - bytes that are not UTF-8 (encoding/json turns them into U+FFFD),
//   - NUL characters, raw or escaped as \u0000 (Postgres text rejects them),
//   - lone UTF-16 surrogate escapes such as \ud800 (also turned into U+FFFD),
//   - an object key given twice, e.g. {"name":"a","name":"b"}, or twice up
//     to case, {"name":"a","Name":"b"} (encoding/json matches fields
//     case-insensitively): parsers disagree on which one wins, so a proxy or
//     validator may see another value than the handler; refusing is the only
//     safe answer.
//   - objects and arrays nested deeper than MaxDepth, found by a scan that
//     stops at the first level too deep.
//
// Everything else (syntax errors, types, unknown fields) is left to the
// handler's own decoding and validation. The body is put back for the
// handler unchanged.
func CheckJSON(c JSONCheck, next http.Handler) http.Handler {
	max := c.MaxBytes
	if max <= 0 {
		max = 1 << 20
	}
	depth := c.MaxDepth
	if depth <= 0 {
		depth = MaxJSONDepth
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || !isJSON(r.Header.Get("Content-Type")) ||
			(c.Skip != nil && c.Skip(r)) {
			next.ServeHTTP(w, r)
			return
		}
		buf, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil {
			// The handler reads the rest and reports the failure (timeout,
			// disconnect) as it would without this check.
			r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
			next.ServeHTTP(w, r)
			return
		}
		if int64(len(buf)) > max {
			r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
			next.ServeHTTP(w, r)
			return
		}
		if msg := JSONProblemDepth(buf, depth); msg != "" {
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		r.Body = readCloser{bytes.NewReader(buf), r.Body}
		next.ServeHTTP(w, r)
	})
}

type readCloser struct {
	io.Reader
	io.Closer
}

func isJSON(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true // Huma decodes a body without a Content-Type as JSON
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// MaxJSONDepth is CheckJSON's default nesting limit: far deeper than any
// request body of the API, far shallower than what makes decoding costly.
const MaxJSONDepth = 64

// JSONProblem returns what is wrong with body in the sense of CheckJSON (a
// message naming the problem and where it is), or "" when nothing is. It does
// not report syntax errors, which the decoder names better. Nesting is
// limited to MaxJSONDepth.
func JSONProblem(body []byte) string { return JSONProblemDepth(body, MaxJSONDepth) }

// JSONProblemDepth is JSONProblem with a nesting limit of maxDepth levels.
func JSONProblemDepth(body []byte, maxDepth int) string {
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Sprintf("body: invalid UTF-8 at byte %d; JSON must be UTF-8 text", i)
	}
	// One pass over the text: string literals are checked for NUL and lone
	// surrogates; object keys are collected per object to find duplicates.
	type frame struct {
		object bool
		keys   map[string]string // lower-cased key -> key as written
	}
	var stack []frame
	wantKey := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case 0:
			return fmt.Sprintf("body: NUL character at byte %d is not allowed", i)
		case '{', '[':
			if len(stack) >= maxDepth {
				return fmt.Sprintf("body: JSON nested deeper than %d levels (at byte %d)", maxDepth, i)
			}
			stack = append(stack, frame{object: c == '{'})
			wantKey = c == '{'
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			wantKey = false
		case ',':
			wantKey = len(stack) > 0 && stack[len(stack)-1].object
		case ':':
			wantKey = false
		case '"':
			end, msg := scanString(body, i)
			if msg != "" {
				return msg
			}
			if end < 0 {
				return "" // unterminated: a syntax error for the decoder
			}
			if wantKey && len(stack) > 0 && stack[len(stack)-1].object {
				var key string
				if json.Unmarshal(body[i:end+1], &key) != nil {
					return ""
				}
				top := &stack[len(stack)-1]
				folded := strings.ToLower(key)
				if prev, dup := top.keys[folded]; dup {
					if prev == key {
						return fmt.Sprintf("body: duplicate key %q", truncate(key, 64))
					}
					return fmt.Sprintf("body: duplicate key %q (as %q; keys differing only in case are the same field)", truncate(key, 64), truncate(prev, 64))
				}
				if top.keys == nil {
					top.keys = map[string]string{}
				}
				top.keys[folded] = key
				wantKey = false
			}
			i = end
		}
	}
	return ""
}

// scanString checks the string literal opening at body[start] and returns the
// index of its closing quote (-1 if there is none) or a problem.
func scanString(body []byte, start int) (int, string) {
	for i := start + 1; i < len(body); i++ {
		switch body[i] {
		case '"':
			return i, ""
		case 0:
			return -1, fmt.Sprintf("body: NUL character at byte %d is not allowed", i)
		case '\\':
			if i+1 >= len(body) {
				return -1, ""
			}
			if body[i+1] != 'u' {
				i++
				continue
			}
			r, ok := hex4(body, i+2)
			if !ok {
				return -1, "" // malformed escape: a syntax error for the decoder
			}
			switch {
			case r == 0:
				return -1, fmt.Sprintf(`body: NUL character (\u0000) at byte %d is not allowed`, i)
			case r >= 0xDC00 && r <= 0xDFFF:
				return -1, fmt.Sprintf(`body: lone UTF-16 surrogate \u%04x at byte %d is not valid text`, r, i)
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := -1, false
				if i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
					lo, ok = hex4(body, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return -1, fmt.Sprintf(`body: lone UTF-16 surrogate \u%04x at byte %d is not valid text`, r, i)
				}
				i += 6 // the pair's second half
			}
			i += 5
		}
	}
	return -1, ""
}

func hex4(b []byte, at int) (int, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n := 0
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// writeError writes the error model of DESIGN.md section 4.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(&platform.APIError{StatusCode: status, Message: msg, ErrorText: http.StatusText(status)})
}
