// Package registrytest runs a real image registry for tests: CNCF
// Distribution (github.com/distribution/distribution/v3/cmd/registry),
// built by .ci/registry.sh and named by KEELSON_TEST_REGISTRY. It serves on
// loopback (which the Docker engine treats as an insecure registry, so no
// TLS is needed) with filesystem storage in the test's temp dir. Without it
// the tests skip, unless KEELSON_TEST_REQUIRE_REGISTRY=1 (as in .ci/run)
// makes them fail.
package registrytest

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Registry is one running registry.
type Registry struct {
	// Addr is its host:port (127.0.0.1:<port>).
	Addr string
	out  *platformtest.SyncBuffer
}

// Options configure the registry.
type Options struct {
	// Username and Password, when set, are the one account it accepts
	// (htpasswd); pushes and pulls without them are refused.
	Username, Password string
}

// Repository is a repository prefix on the registry (host:port/keelson).
func (r *Registry) Repository() string { return r.Addr + "/keelson" }

// Log is the registry's output so far.
func (r *Registry) Log() string { return r.out.String() }

// tool is the binary Start runs.
var tool = platformtest.Tool{Name: "registrytest", What: "an image registry (CNCF Distribution)",
	Env: "KEELSON_TEST_REGISTRY", Require: "KEELSON_TEST_REQUIRE_REGISTRY", Script: ".ci/registry.sh"}

// Start runs a registry for t, stopped (and waited for) when t ends.
func Start(t testing.TB, o Options) *Registry {
	t.Helper()
	return platformtest.RunTool(t, tool, func(bin string) (*Registry, error) { return start(t, bin, o) })
}

func start(t testing.TB, bin string, o Options) (*Registry, error) {
	dir := t.TempDir()
	port, err := platformtest.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	auth := ""
	if o.Username != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte(o.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			return nil, err
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: keelson-test\n    path: %s\n", pw)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  secret: keelson-test-only
%s`, filepath.Join(dir, "storage"), addr, auth)
	file := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	r := &Registry{Addr: addr, out: &platformtest.SyncBuffer{}}
	cmd := exec.Command(bin, "serve", file)
	// No telemetry exporters (v3 turns OpenTelemetry on by default).
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
	if err := platformtest.StartTool(t, cmd, r.out, platformtest.WaitReady("the registry", r.ready)); err != nil {
		return nil, err
	}
	return r, nil
}

// ready says whether /v2/ answers (200, or 401 with auth).
func (r *Registry) ready() bool {
	resp, err := readyClient.Get("http://" + r.Addr + "/v2/")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized
}

var readyClient = &http.Client{Timeout: 2 * time.Second}
