package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// The HTTPS rows: the same comparison as the plain ingress rows, over TLS.
// The server's ingress (KEELSON_INGRESS_TLS_ADDR with a static certificate)
// and Caddy (the same certificate, loaded from files) serve the hello app,
// measured in one run by one Go load generator, HTTP/1.1, in two shapes:
//   - keep-alive: one TLS connection per worker, many requests each;
//   - resumed: a new connection per request whose handshake resumes the
//     worker's last session (a TLS 1.3 session ticket), the shape of many
//     short-lived clients coming back; the row says how many resumed.
//
// wrk is not used here: it sends no SNI for an address, and both servers
// choose the certificate by SNI.

// benchCert is the self-signed certificate both servers present: ECDSA
// P-256 for *.localhost, in PEM files under dir.
type benchCert struct {
	certFile, keyFile string
	pool              *x509.CertPool
}

func makeBenchCert(dir string) (*benchCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "keelson bench"},
		DNSNames:     []string{"*.localhost"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &benchCert{certFile: filepath.Join(dir, "bench-cert.pem"), keyFile: filepath.Join(dir, "bench-key.pem"), pool: x509.NewCertPool()}
	c.pool.AddCert(leaf)
	if err := os.WriteFile(c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return c, os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

// startCaddyTLS runs Caddy over HTTPS with cert, reverse_proxy to upstream
// with 64 idle upstream connections, as startCaddy does over HTTP.
func startCaddyTLS(bin, dir, upstream string, cert *benchCert) (*caddyPeer, error) {
	addr, admin := freeAddr(), freeAddr()
	cfg := fmt.Sprintf(`{"admin": {"listen": %q},
 "logging": {"logs": {"default": {"level": "ERROR"}}},
 "apps": {"tls": {"certificates": {"load_files": [{"certificate": %q, "key": %q}]}},
  "http": {"servers": {"bench": {"listen": [%q], "automatic_https": {"disable": true},
  "tls_connection_policies": [{}], "protocols": ["h1"],
  "routes": [{"handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": %q}],
   "transport": {"protocol": "http", "keep_alive": {"max_idle_conns_per_host": 64}}}]}]}}}}}`,
		admin, cert.certFile, cert.keyFile, addr, upstream)
	p := &caddyPeer{url: "https://" + addr, admin: "http://" + admin}
	if err := p.run(bin, dir, "caddy-tls", cfg, p.admin+"/config/"); err != nil {
		return nil, err
	}
	return p, nil
}

// tlsClient is an HTTP/1.1 client over TLS to addr for host (SNI and Host),
// trusting only cert; keepAlive false makes each request a new connection
// resuming from the shared session cache.
func tlsClient(addr, host string, cert *benchCert, keepAlive bool, cache tls.ClientSessionCache) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:   &tls.Config{ServerName: host, RootCAs: cert.pool, ClientSessionCache: cache},
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1, as the plain rows
		DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 1, DisableCompression: true,
	}}
}

// tlsRow loads https://host/ at addr with conns workers in one shape and
// answers the row, with pid's CPU per request.
func tlsRow(pid int, db, name, addr, host string, cert *benchCert, conns int, keepAlive bool) Row {
	clients := make([]*http.Client, conns)
	for i := range clients {
		clients[i] = tlsClient(addr, host, cert, keepAlive, tls.NewLRUClientSessionCache(4))
	}
	var resumed atomic.Int64
	c0 := cpuTime(pid)
	r := load(conns, *flagDuration, func(w int) error {
		res, err := clients[w].Get("https://" + host + "/")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		if res.TLS != nil && res.TLS.DidResume {
			resumed.Add(1)
		}
		return nil
	})
	cpu := cpuTime(pid) - c0
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	row := r.row(db, name, 0)
	if r.ok > 0 {
		row.CPUUsPerReq = float64(cpu.Microseconds()) / float64(r.ok)
	}
	if !keepAlive && r.ok > 0 {
		row.Note = joinNotes(row.Note, fmt.Sprintf("%.1f%% of handshakes resumed", 100*float64(resumed.Load())/float64(r.ok)))
	}
	return row
}

// benchIngressTLS measures the HTTPS rows for the app of slug, whose
// address is direct, against Caddy (when bin is set) at conns workers.
func benchIngressTLS(s *server, bin, slug, direct, dir, db string, conns int) (rows []Row, goals []GoalFigure) {
	name := fmt.Sprintf("ingress HTTPS (%d conns)", conns)
	if s.tlsAddr == "" || s.cert == nil {
		return []Row{{DB: db, Name: name, NA: "the server runs without its HTTPS listener"}}, nil
	}
	var caddy *caddyPeer
	na := "Caddy: not built"
	if bin != "" {
		var err error
		if caddy, err = startCaddyTLS(bin, dir, direct, s.cert); err != nil {
			na = err.Error()
		} else {
			na = ""
			defer stop(caddy.cmd)
		}
	}
	host := slug + ".localhost"
	for _, shape := range []struct {
		name      string
		keepAlive bool
	}{{"keep-alive", true}, {"a resumed handshake per request", false}} {
		fmt.Fprintf(os.Stderr, "%s: HTTPS, %s, %d conns (Caddy, ingress)...\n", db, shape.name, conns)
		cr := Row{DB: db, Name: fmt.Sprintf("Caddy %s HTTPS, %s (%d conns)", caddyVersion, shape.name, conns), NA: na}
		if caddy != nil {
			cr = tlsRow(caddy.cmd.Process.Pid, db, cr.Name, caddy.url[len("https://"):], host, s.cert, conns, shape.keepAlive)
			cr.Note = joinNotes(cr.Note, "CPU is Caddy's")
		}
		iname := fmt.Sprintf("ingress HTTPS, %s (%d conns)", shape.name, conns)
		prof := s.profile(db, iname)
		ir := tlsRow(s.cmd.Process.Pid, db, iname, s.tlsAddr, host, s.cert, conns, shape.keepAlive)
		prof()
		ir.Note = joinNotes(ir.Note, "CPU is the server's")
		vs := 0.0
		if cr.NA == "" && cr.ReqPerS > 0 && ir.ReqPerS > 0 {
			vs = ir.ReqPerS / cr.ReqPerS
			ir.Note = joinNotes(ir.Note, fmt.Sprintf("%.2fx Caddy, CPU/req %.2fx Caddy's", vs, ir.CPUUsPerReq/max(cr.CPUUsPerReq, 0.001)))
		}
		rows = append(rows, cr, ir)
		goals = append(goals, GoalFigure{Name: fmt.Sprintf("ingress / Caddy over HTTPS, %s, %d conns", shape.name, conns),
			Figure: fmtOr(vs, "%.2fx", cr.NA), Target: ">= 1.25x", Met: vs >= 1.25})
	}
	return rows, goals
}

// tlsEnv is the server's environment for its HTTPS listener with cert.
func tlsEnv(addr string, cert *benchCert) []string {
	return []string{"KEELSON_INGRESS_TLS_ADDR=" + addr,
		"KEELSON_INGRESS_TLS_CERT_FILE=" + cert.certFile, "KEELSON_INGRESS_TLS_KEY_FILE=" + cert.keyFile}
}
