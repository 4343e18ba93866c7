// Package dnstest runs a real DNS server for tests: Let's Encrypt's
// pebble-challtestsrv (github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv),
// whose records are set over its HTTP management API (POST /set-txt,
// /set-cname, /add-a, ... with JSON bodies; see cmd/pebble-challtestsrv/dns.go
// in that module). The binary comes from .ci/challtestsrv.sh, named by
// KEELSON_TEST_CHALLTESTSRV; without it the tests skip, unless
// KEELSON_TEST_REQUIRE_DNS=1 (as in .ci/run) makes them fail.
package dnstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// mgmtClient keeps no idle connections, so no goroutine outlives a call.
var mgmtClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// Server is one running challtestsrv: a DNS server on loopback that answers
// only the records a test set (no default A/AAAA answers).
type Server struct {
	// DNS is the DNS server's host:port (UDP and TCP).
	DNS  string
	mgmt string
	t    testing.TB
}

// tool is the binary Start runs.
var tool = platformtest.Tool{Name: "dnstest", What: "a test DNS server (pebble-challtestsrv)",
	Env: "KEELSON_TEST_CHALLTESTSRV", Require: "KEELSON_TEST_REQUIRE_DNS", Script: ".ci/challtestsrv.sh"}

// Start runs a challtestsrv for t, stopped (and waited for) when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return platformtest.RunTool(t, tool, func(bin string) (*Server, error) { return start(t, bin) })
}

func start(t testing.TB, bin string) (*Server, error) {
	ports, err := platformtest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	dnsPort, mgmtPort := ports[0], ports[1]
	s := &Server{DNS: "127.0.0.1:" + strconv.Itoa(dnsPort), mgmt: "http://127.0.0.1:" + strconv.Itoa(mgmtPort), t: t}
	cmd := exec.Command(bin, "-dnsserver", s.DNS, "-management", "127.0.0.1:"+strconv.Itoa(mgmtPort),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "", "-defaultIPv4", "", "-defaultIPv6", "")
	if err := platformtest.StartTool(t, cmd, &platformtest.SyncBuffer{}, platformtest.WaitReady("challtestsrv", s.ready)); err != nil {
		return nil, err
	}
	return s, nil
}

// ready says whether the management API sets a record and the DNS server
// answers it (the record is cleared again).
func (s *Server) ready() bool {
	if s.post("/set-txt", map[string]any{"host": "ready.dnstest.invalid", "value": "ready"}) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, err := s.Resolver().LookupTXT(ctx, "ready.dnstest.invalid")
	if err != nil || len(v) != 1 || v[0] != "ready" {
		return false
	}
	return s.post("/clear-txt", map[string]any{"host": "ready.dnstest.invalid"}) == nil
}

// Resolver asks this server only.
func (s *Server) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.DNS)
	}}
}

func (s *Server) post(path string, body map[string]any) error {
	b, _ := json.Marshal(body)
	resp, err := mgmtClient.Post(s.mgmt+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("challtestsrv %s %s: %s", path, b, resp.Status)
	}
	return nil
}

func (s *Server) must(path string, body map[string]any) {
	s.t.Helper()
	if err := s.post(path, body); err != nil {
		s.t.Fatalf("dnstest: %v", err)
	}
}

// SetTXT adds a TXT record value at host (a host may hold several).
func (s *Server) SetTXT(host, value string) {
	s.must("/set-txt", map[string]any{"host": host, "value": value})
}

// ClearTXT removes every TXT record at host.
func (s *Server) ClearTXT(host string) { s.must("/clear-txt", map[string]any{"host": host}) }

// SetCNAME makes host an alias of target.
func (s *Server) SetCNAME(host, target string) {
	s.must("/set-cname", map[string]any{"host": host, "target": target})
}

// ClearCNAME removes host's CNAME.
func (s *Server) ClearCNAME(host string) { s.must("/clear-cname", map[string]any{"host": host}) }

// AddA adds IPv4 addresses to host's A records.
func (s *Server) AddA(host string, addrs ...string) {
	s.must("/add-a", map[string]any{"host": host, "addresses": addrs})
}

// ClearA removes host's A records.
func (s *Server) ClearA(host string) { s.must("/clear-a", map[string]any{"host": host}) }

// AddAAAA adds IPv6 addresses to host's AAAA records.
func (s *Server) AddAAAA(host string, addrs ...string) {
	s.must("/add-aaaa", map[string]any{"host": host, "addresses": addrs})
}

// SetServFail makes every query for host answer SERVFAIL (a resolver in
// trouble), until ClearServFail.
func (s *Server) SetServFail(host string) { s.must("/set-servfail", map[string]any{"host": host}) }

// ClearServFail undoes SetServFail.
func (s *Server) ClearServFail(host string) { s.must("/clear-servfail", map[string]any{"host": host}) }
