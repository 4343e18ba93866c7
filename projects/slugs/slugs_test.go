package slugs_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/projects/slugs"
)

func TestOfHosts(t *testing.T) {
	got := slugs.OfHosts("Apps.Example.com.", "https://api.example.com", "http://dash.apps.example.com:8443/x",
		"http://127.0.0.1:8080", "http://localhost:3000", "::bad")
	want := []string{"api", "dash", "dash", "localhost"}
	if !slices.Equal(got, want) {
		t.Fatalf("OfHosts = %q, want %q", got, want)
	}
}

func TestBaseAndSuffix(t *testing.T) {
	for name, want := range map[string]string{"My Shiny App!": "my-shiny-app", "  ": "project", "Ünïcode ok": "n-code-ok"} {
		if got := slugs.Base(name); got != want {
			t.Errorf("Base(%q) = %q, want %q", name, got, want)
		}
	}
	long := slugs.Base(strings.Repeat("Long Name ", 9))
	if len(long) > slugs.MaxLen || strings.HasSuffix(long, "-") {
		t.Fatalf("Base of a long name: %q", long)
	}
	s := slugs.WithSuffix(long)
	if len(s) > slugs.MaxLen || !strings.HasPrefix(s, long[:20]) || s[len(s)-7] != '-' {
		t.Fatalf("WithSuffix(%q) = %q", long, s)
	}
}
