package certs_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

// BenchmarkIngressHTTPS compares, in one run, requests per second to a tiny
// app directly, through the ingress on plain HTTP, and through the ingress
// on HTTPS (a static certificate: the handshake's cost is paid once per
// connection, since clients keep their connections). Parallel clients,
// keep-alive on, HTTP/1.1 everywhere.
//
//	go test ./deployments/ingress/certs -run '^$' -bench BenchmarkIngressHTTPS -benchtime 5s
func BenchmarkIngressHTTPS(b *testing.B) {
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("hello from the app\n"))
	})}
	appL := benchListen(b)
	go app.Serve(appL) //nolint:errcheck
	b.Cleanup(func() { app.Close() })

	router, err := ingress.New(ingress.Config{AppsDomain: "apps.example.test"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(router.Close)
	if err := router.Set("bench", "d1", appL.Addr().String()); err != nil {
		b.Fatal(err)
	}
	certFile, keyFile, root := selfSigned(b, "*.apps.example.test")
	mgr, err := certs.New(context.Background(), certs.Config{DB: dbtest.SQLite(b, sets...),
		StaticCertFile: certFile, StaticKeyFile: keyFile, KeepHTTP: func(string) bool { return true },
		Allowed: func(context.Context, string) error { return errors.New("static certificate only") }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = mgr.Close(context.Background()) })
	plainL, tlsL := benchListen(b), benchListen(b)
	plain := &http.Server{Handler: mgr.Handler(router)}
	secure := &http.Server{Handler: mgr.HTTPSHandler(router), TLSConfig: mgr.TLSConfig()}
	go plain.Serve(plainL)           //nolint:errcheck
	go secure.ServeTLS(tlsL, "", "") //nolint:errcheck
	b.Cleanup(func() { plain.Close(); secure.Close() })

	for _, c := range []struct{ name, url, addr string }{
		{"direct", "http://bench.apps.example.test/", appL.Addr().String()},
		{"ingress-http", "http://bench.apps.example.test/", plainL.Addr().String()},
		{"ingress-https", "https://bench.apps.example.test/", tlsL.Addr().String()},
	} {
		b.Run(c.name, func(b *testing.B) {
			cl := benchClient(c.addr, root)
			defer cl.CloseIdleConnections()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := cl.Get(c.url)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						b.Errorf("%s: %d", c.name, res.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

func benchListen(b *testing.B) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// benchClient keeps its connections and sends each to addr.
func benchClient(addr string, root *x509.CertPool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, TLSClientConfig: &tls.Config{RootCAs: root},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}}}
}

// selfSigned writes a self-signed certificate for name and its key, and
// returns their files and a pool trusting it.
func selfSigned(b *testing.B, name string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		b.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(leaf)
	return certFile, keyFile, pool
}
