// Package acmetest runs a real ACME CA for tests: Let's Encrypt's Pebble
// (github.com/letsencrypt/pebble/v2/cmd/pebble), built by .ci/pebble.sh
// (named by KEELSON_TEST_PEBBLE, with the module's test config and
// certificates next to it). Without it the tests skip, unless
// KEELSON_TEST_REQUIRE_PEBBLE=1 (as in .ci/run) makes them fail.
//
// Pebble validates challenges for real: it resolves names through the DNS
// server given (pebble-challtestsrv, see projects/domains/dnstest) and
// connects to the HTTP-01 and TLS-ALPN-01 ports given, where the ingress
// under test listens.
package acmetest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Pebble is one running Pebble.
type Pebble struct {
	// DirectoryURL is its ACME directory.
	DirectoryURL string
	// APIRoots trusts Pebble's own HTTPS API (its minica root): the ACME
	// client's extra roots.
	APIRoots *x509.CertPool
	// APIRootsPEM is the same root in PEM (for KEELSON_ACME_CA_ROOTS).
	APIRootsPEM []byte
	mgmt        string
	out         *platformtest.SyncBuffer
}

// Options are where Pebble checks challenges.
type Options struct {
	DNS      string // host:port of the DNS server it resolves names with
	HTTPPort int    // HTTP-01 is checked on this port
	TLSPort  int    // TLS-ALPN-01 is checked on this port
	// Validity is the issued certificates' lifetime. Default 90 days.
	Validity time.Duration
}

// tool is the binary Start runs.
var tool = platformtest.Tool{Name: "acmetest", What: "Pebble (a test ACME CA)",
	Env: "KEELSON_TEST_PEBBLE", Require: "KEELSON_TEST_REQUIRE_PEBBLE", Script: ".ci/pebble.sh"}

// Start runs Pebble for t, stopped (and waited for) when t ends.
func Start(t testing.TB, o Options) *Pebble {
	t.Helper()
	return platformtest.RunTool(t, tool, func(bin string) (*Pebble, error) { return start(t, bin, o) })
}

func start(t testing.TB, bin string, o Options) (*Pebble, error) {
	dir := filepath.Dir(bin)
	ports, err := platformtest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	acmePort, mgmtPort := ports[0], ports[1]
	validity := int64(7776000) // 90 days, in seconds
	if o.Validity > 0 {
		validity = int64(o.Validity / time.Second)
	}
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           "127.0.0.1:" + strconv.Itoa(acmePort),
		"managementListenAddress": "127.0.0.1:" + strconv.Itoa(mgmtPort),
		"certificate":             filepath.Join(dir, "test/certs/localhost/cert.pem"),
		"privateKey":              filepath.Join(dir, "test/certs/localhost/key.pem"),
		"httpPort":                o.HTTPPort, "tlsPort": o.TLSPort,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
		"retryAfter": map[string]any{"authz": 1, "order": 1}, "keyAlgorithm": "ecdsa",
		"profiles": map[string]any{"default": map[string]any{"description": "default", "validityPeriod": validity}},
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(t.TempDir(), "pebble-config.json")
	if err = os.WriteFile(cfgFile, b, 0o600); err != nil {
		return nil, err
	}
	rootPEM, err := os.ReadFile(filepath.Join(dir, "test/certs/pebble.minica.pem"))
	if err != nil {
		return nil, fmt.Errorf("Pebble's test CA next to %s (.ci/pebble.sh copies it): %w", bin, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	p := &Pebble{DirectoryURL: fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort), APIRoots: roots, APIRootsPEM: rootPEM,
		mgmt: fmt.Sprintf("https://127.0.0.1:%d", mgmtPort), out: &platformtest.SyncBuffer{}}
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", o.DNS)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	if err := platformtest.StartTool(t, cmd, p.out, platformtest.WaitReady("pebble", p.ready)); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pebble) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: p.APIRoots}}}
}

// ready says whether Pebble's ACME directory answers.
func (p *Pebble) ready() bool {
	resp, err := p.client().Get(p.DirectoryURL)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// IssuingRoots are the roots the certificates Pebble issues chain to (its
// management API's /roots/0): what a client of the ingress trusts, alone.
func (p *Pebble) IssuingRoots(t testing.TB) *x509.CertPool {
	t.Helper()
	resp, err := p.client().Get(p.mgmt + "/roots/0")
	if err != nil {
		t.Fatalf("acmetest: roots: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if resp.StatusCode != http.StatusOK || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("acmetest: roots: %s %s", resp.Status, b)
	}
	return pool
}

// SetRenewalInfo makes Pebble answer cert's renewal info (ARI) with the
// window from start to end (its management API's /set-renewal-info/).
func (p *Pebble) SetRenewalInfo(t testing.TB, cert *x509.Certificate, start, end time.Time) {
	t.Helper()
	window, _ := json.Marshal(map[string]any{"suggestedWindow": map[string]time.Time{"start": start, "end": end}})
	body, _ := json.Marshal(map[string]string{"ARIResponse": string(window),
		"Certificate": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))})
	resp, err := p.client().Post(p.mgmt+"/set-renewal-info/", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("acmetest: set renewal info: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("acmetest: set renewal info: %s %s", resp.Status, b)
	}
}

// Orders is how many orders Pebble has taken so far (its log's "Added order" lines).
func (p *Pebble) Orders() int { return strings.Count(p.out.String(), "Added order") }

// Log is Pebble's output so far.
func (p *Pebble) Log() string { return p.out.String() }
