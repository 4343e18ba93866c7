package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/deployments/ingress/certs"
	"github.com/keelson-dev/keelson/projects/domains"
)

// errNotServed is the on-demand decision's refusal of a host no LIVE app
// answers on.
var errNotServed = errors.New("no LIVE app is served at this host")

// ingressHTTPS gives the ingress HTTPS when KEELSON_INGRESS_TLS_ADDR is set:
// a certificate manager (deployments/ingress/certs) over the database,
// issuing on demand only for a host the router resolves (the apps-domain
// host of a project that is LIVE here, or one of its active custom domains).
// The plain listener then answers ACME challenges and redirects to HTTPS
// once a certificate exists, except for the hosts of projects whose
// httpsRedirect is false (hostRoutes.keepsHTTP); the DNS step's log tells
// each host's certificate state.
func (a *App) ingressHTTPS(ctx context.Context, router *ingress.Router, hosts *hostRoutes, log *slog.Logger) error {
	c := a.Cfg
	if c.IngressTLSAddr == "" {
		return nil
	}
	var roots *x509.CertPool
	if c.ACMECARoots != "" {
		pem, err := os.ReadFile(c.ACMECARoots)
		if err != nil {
			return &ConfigError{"KEELSON_ACME_CA_ROOTS", err.Error()}
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return &ConfigError{"KEELSON_ACME_CA_ROOTS", fmt.Sprintf("%s holds no PEM certificate", c.ACMECARoots)}
		}
	}
	port := 0
	if _, p, err := net.SplitHostPort(c.IngressTLSAddr); err == nil {
		port, _ = strconv.Atoi(p)
	}
	mgr, err := certs.New(ctx, certs.Config{
		DB: a.DB, DirectoryURL: c.ACMEDirectoryURL, Email: c.ACMEEmail, Roots: roots,
		StaticCertFile: c.IngressTLSCertFile, StaticKeyFile: c.IngressTLSKeyFile, HTTPSPort: port,
		Allowed: func(_ context.Context, host string) error {
			if _, ok := router.Resolve(host); !ok {
				return errNotServed
			}
			return nil
		},
		// Another host's ingress may have ordered it, and its challenge
		// reaches this one: a host served anywhere is looked up.
		Challenged:    func(_ context.Context, host string) bool { return router.Served(host) },
		KeepHTTP:      hosts.keepsHTTP,
		HSTS:          hosts.sendsHSTS,
		OnCertificate: a.certificateChanged,
		Logger:        log,
	})
	if err != nil {
		return &ConfigError{"KEELSON_INGRESS_TLS_CERT_FILE", err.Error()}
	}
	if a.metrics != nil {
		if err := a.metrics.countCertificates(mgr.Stats, mgr.Held); err != nil {
			_ = mgr.Close(ctx)
			return err
		}
	}
	a.migrate(certs.Migrations())
	a.onClose(mgr.Close)
	plainHTTP := mgr.Handler(router)
	a.Ingress = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Another ingress took it (over HTTPS, maybe): no redirect; an ACME
		// challenge is still answered here, never by the app.
		if router.Forwarded(r) && !strings.HasPrefix(r.URL.Path, "/.well-known/acme-challenge/") {
			router.ServeHTTP(w, r)
			return
		}
		plainHTTP.ServeHTTP(w, r)
	})
	a.ingressTLS = &tlsIngress{config: mgr.TLSConfig(), handler: mgr.HTTPSHandler(router)}
	hosts.certificate = mgr.Status
	a.Certs = mgr
	return nil
}

// tlsIngress is the ingress's HTTPS listener's configuration and handler.
type tlsIngress struct {
	config  *tls.Config
	handler http.Handler
}

// certificateChanged records a custom domain's certificate state in the
// domains module (certificateStatus, certificateExpiresAt).
func (a *App) certificateChanged(ctx context.Context, host string, expires time.Time, err error) {
	status, exp := domains.CertificateIssued, &expires
	if err != nil || expires.IsZero() {
		status, exp = domains.CertificateError, nil
	}
	if serr := a.Domains.SetCertificate(ctx, host, status, exp); serr != nil {
		a.Log.Warn("certs: record the certificate's state", "host", host, "err", serr)
	}
}
