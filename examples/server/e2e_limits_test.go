package main

import (
	"net/http"
	"strings"
	"testing"
)

// The abuse limits of issue 15, tried as the abuser would.

// TestNestingBombIs400: 1.8 MB of nested {"a": posted to the
// unauthenticated login is refused before any decoder walks it, with a
// message naming the problem; a sane login body still works.
func TestNestingBombIs400(t *testing.T) {
	t.Parallel()
	ts := startServer(t, "", nil)
	ts.signup(t, "alice@example.com")
	for _, bomb := range []string{
		strings.Repeat(`{"a":`, 360_000), // 1.8 MB, as reported
		strings.Repeat(`{"a":`, 150_000) + "1" + strings.Repeat("}", 150_000),
		`{"email":"alice@example.com","password":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + "}",
	} {
		st, raw, _ := ts.do(t, "POST", "/auth/login", "", bomb)
		if st != http.StatusBadRequest {
			t.Fatalf("nesting bomb of %d bytes: %d %.200s", len(bomb), st, raw)
		}
		if e := checkErrorModel(t, "nesting bomb", st, raw); !strings.Contains(messageOf(e), "nested deeper than 64 levels") {
			t.Errorf("message %q does not name the nesting", messageOf(e))
		}
	}
	ts.doJSON(t, http.StatusOK, "POST", "/auth/login", "", map[string]any{"email": "alice@example.com", "password": "correct horse battery"}, nil)
}
