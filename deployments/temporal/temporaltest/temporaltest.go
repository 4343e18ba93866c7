// Package temporaltest starts a real Temporal development server for tests
// (deployments/temporal's integration tests and the reference server's
// end-to-end tests). It is test support only; nothing else imports it.
//
// The server is the Temporal CLI's embedded dev server. The SDK could
// download the CLI, but CI has no download site: .ci/temporal-cli.sh builds
// it from the Go module proxy and hands its path over in
// KEELSON_TEST_TEMPORAL_CLI. Without a CLI the calling test skips and says
// why, or fails when KEELSON_TEST_REQUIRE_TEMPORAL=1.
package temporaltest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
)

// CLIVersion is the Temporal CLI .ci/temporal-cli.sh builds (keep in step).
const CLIVersion = "v1.5.1"

// CLI returns the Temporal CLI's path: KEELSON_TEST_TEMPORAL_CLI, else the
// cache .ci/temporal-cli.sh fills. Without one it skips t (or fails it with
// KEELSON_TEST_REQUIRE_TEMPORAL=1).
func CLI(t testing.TB) string {
	t.Helper()
	path := os.Getenv("KEELSON_TEST_TEMPORAL_CLI")
	if path == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		path = filepath.Join(cache, "keelson", "temporal-"+CLIVersion, "temporal")
	}
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		reason := fmt.Sprintf("no Temporal CLI at %s", path)
		if os.Getenv("KEELSON_TEST_REQUIRE_TEMPORAL") == "1" {
			t.Fatalf("Temporal required (KEELSON_TEST_REQUIRE_TEMPORAL=1): %s (set KEELSON_TEST_TEMPORAL_CLI or run .ci/temporal-cli.sh)", reason)
		}
		platformtest.Skip(t, reason, "bash .ci/temporal-cli.sh (builds it, ~7 min), or KEELSON_TEST_TEMPORAL_CLI=<a temporal binary>")
	}
	return path
}

// QuietLogger is an SDK logger that discards everything.
func QuietLogger() sdklog.Logger { return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

// StartDevServer starts an in-memory dev server (namespace "default") that
// stops when t ends. Its frontend is srv.FrontendHostPort().
func StartDevServer(t testing.TB) *testsuite.DevServer {
	t.Helper()
	cli := CLI(t)
	out := &platformtest.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:  cli,
		ClientOptions: &client.Options{Namespace: "default", Logger: QuietLogger()},
		LogLevel:      "error",
		Stdout:        out,
		Stderr:        out,
	})
	if err != nil {
		t.Fatalf("start the Temporal dev server: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil && t.Failed() {
			t.Logf("dev server stop: %v; output:\n%s", err, out)
		}
	})
	return srv
}
