package httpx_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/platform/httpx"
)

func TestJSONProblem(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		`{"name":"a\u0000b"}`:             "NUL",
		"{\"name\":\"a\x00b\"}":           "NUL",
		`{"name":"\ud800"}`:               "surrogate",
		`{"name":"\uD800x"}`:              "surrogate",
		`{"name":"\udc00"}`:               "surrogate",
		`{"name":"\ud800\u0041"}`:         "surrogate",
		"{\"name\":\"\xff\"}":             "UTF-8",
		"{\"name\":\"\xc3\"}":             "UTF-8",
		`{"name":"a","name":"b"}`:         `duplicate key "name"`,
		`{"name":"a","n\u0061me":"b"}`:    `duplicate key "name"`,
		`{"a":{"b":1,"b":2}}`:             `duplicate key "b"`,
		`[{"x":1},{"y":[{"z":1,"z":1}]}]`: `duplicate key "z"`,
		`{"a":{"x":1},"a":2}`:             `duplicate key "a"`,
	}
	// Nesting: 64 levels pass, 65 do not, whatever mix of objects and arrays;
	// brackets inside strings do not count.
	bad[strings.Repeat(`{"a":`, 65)+"1"+strings.Repeat("}", 65)] = "nested deeper than 64 levels"
	bad[strings.Repeat(`[`, 65)+strings.Repeat("]", 65)] = "nested deeper than 64 levels"
	bad[strings.Repeat(`[{"a":`, 40)] = "nested deeper than 64 levels (at byte 192)"
	bad[strings.Repeat(`{"a":`, 900_000)] = "nested deeper than 64 levels" // the 4.5 MB bomb, unterminated
	for body, want := range bad {
		if got := httpx.JSONProblem([]byte(body)); !strings.Contains(got, want) || !strings.HasPrefix(got, "body: ") {
			t.Errorf("%q: got %q, want a message naming %s", body, got, want)
		}
	}
	good := []string{
		`{"a":{"x":1},"b":{"x":1}}`,
		`[{"x":1},{"x":2}]`,
		`{"emoji":"\ud83d\ude00","raw":"😀","esc":"\"\\\/\b\f\n\r\t\u0041"}`,
		`{"k":["a","a"],"v":"a","w":"a"}`,
		`{"unterminated`, // syntax errors are the decoder's to report
		`{"bad":"\u12"}`,
		``,
		strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64),
		strings.Repeat(`[`, 64) + strings.Repeat("]", 64),
		`{"s":"` + strings.Repeat(`[{`, 1000) + `"}`,
		strings.Repeat(`[1],`, 10000) + "[1]", // many siblings, shallow
	}
	for _, body := range good {
		if got := httpx.JSONProblem([]byte(body)); got != "" {
			t.Errorf("%q: got %q, want no problem", body, got)
		}
	}
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	var seen string
	h := httpx.CheckJSON(httpx.JSONCheck{MaxBytes: 64, Skip: func(r *http.Request) bool { return r.URL.Path == "/raw" }},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			seen = string(b)
			w.WriteHeader(http.StatusNoContent)
		}))
	send := func(path, ct, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
		rec := send("/x", ct, `{"name":"\u0000"}`)
		var e struct {
			StatusCode int    `json:"statusCode"`
			Message    string `json:"message"`
			Error      string `json:"error"`
		}
		if rec.Code != 400 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.StatusCode != 400 ||
			e.Error != "Bad Request" || !strings.Contains(e.Message, "NUL") || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("content type %q: %d %s", ct, rec.Code, rec.Body)
		}
	}
	// MaxDepth: a nesting bomb is refused before the handler decodes it.
	deep := httpx.CheckJSON(httpx.JSONCheck{MaxDepth: 3}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the handler ran for a body nested too deep")
	}))
	rec := httptest.NewRecorder()
	deep.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{"a":[{"b":[1]}]}`)))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "body: JSON nested deeper than 3 levels") {
		t.Fatalf("nested body: %d %s", rec.Code, rec.Body)
	}
	// A good body reaches the handler byte for byte.
	if rec := send("/x", "application/json", `{"name":"ok"}`); rec.Code != 204 || seen != `{"name":"ok"}` {
		t.Fatalf("good body: %d, handler saw %q", rec.Code, seen)
	}
	// Other media types, skipped paths and bodies over MaxBytes pass unchecked and whole.
	for _, c := range []struct{ path, ct, body string }{
		{"/x", "text/plain", "a\x00b"},
		{"/raw", "application/json", `{"a":1,"a":2}`},
		{"/x", "application/json", `{"a":"` + strings.Repeat("x", 100) + `\u0000"}`},
	} {
		if rec := send(c.path, c.ct, c.body); rec.Code != 204 || seen != c.body {
			t.Fatalf("%s %s: %d, handler saw %q", c.path, c.ct, rec.Code, seen)
		}
	}
}
