package platform_test

import (
	"errors"
	"testing"

	"github.com/keelson-dev/keelson/platform"
)

// TestProblemsRequireHTTPURL: only an absolute http(s) URL with a host passes;
// anything else is named in the joined error a module's New returns.
func TestProblemsRequireHTTPURL(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"https://app.example.com": true, "http://localhost:3000/x": true,
		"": false, "app.example.com": false, "ftp://example.com": false, "https://": false, "http://[::1": false,
	} {
		var p platform.Problems
		p.RequireHTTPURL("FrontendURL", raw)
		err := errors.Join(p...)
		if ok && err != nil {
			t.Errorf("%q: %v", raw, err)
		}
		if !ok && (err == nil || err.Error() != "FrontendURL must be an http(s) URL") {
			t.Errorf("%q: got %v, want FrontendURL must be an http(s) URL", raw, err)
		}
	}
}
