// Command server is Keelson's reference server: it reads the configuration of
// DESIGN.md section 3 from the environment, opens the database (SQLite in
// ./data by default), builds every module on one Huma API and serves it, with
// the apps' ingress proxy beside it. Run it with `go run ./examples/server`.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(log); err != nil {
		fmt.Fprintln(os.Stderr, "keelson:", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := LoadConfig(os.Getenv)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app, err := NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Close(cctx); err != nil {
			log.Error("shutdown", "err", err)
		}
		log.Info("keelson stopped")
	}()
	apiL, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return &ConfigError{"KEELSON_ADDR", err.Error()}
	}
	var ingressL net.Listener
	if app.Ingress != nil {
		if ingressL, err = net.Listen("tcp", cfg.IngressAddr); err != nil {
			apiL.Close()
			return &ConfigError{"KEELSON_INGRESS_ADDR", err.Error()}
		}
		log.Info("ingress listening", "addr", ingressL.Addr().String(), "apps_domain", cfg.AppsDomain)
	}
	// closeListeners closes what run listens on when it fails before serving.
	closeListeners := func() {
		apiL.Close()
		if ingressL != nil {
			ingressL.Close()
		}
	}
	var tlsL []net.Listener
	if app.ingressTLS != nil {
		l, err := net.Listen("tcp", cfg.IngressTLSAddr)
		if err != nil {
			closeListeners()
			return &ConfigError{"KEELSON_INGRESS_TLS_ADDR", err.Error()}
		}
		defer l.Close()
		tlsL = append(tlsL, l)
		log.Info("ingress HTTPS listening", "addr", l.Addr().String(), "acme_directory", cfg.ACMEDirectoryURL)
	}
	log.Info("keelson listening", "addr", apiL.Addr().String(), "role", cfg.Role, "engine", cfg.Engine,
		"database", dbKind(cfg), "data_dir", cfg.DataDir, "docs", listenURL(apiL.Addr())+"/docs")
	if cfg.PprofAddr != "" {
		pl, err := listenPprof(cfg.PprofAddr)
		if err != nil {
			closeListeners()
			return err
		}
		defer servePprof(ctx, pl, log)()
	}
	if app.Metrics != nil {
		ml, err := listenMetrics(cfg.MetricsAddr)
		if err != nil {
			closeListeners()
			return err
		}
		defer serveMetrics(ctx, ml, app.Metrics, log)()
	}
	err = app.Serve(ctx, apiL, ingressL, tlsL...)
	log.Info("keelson stopping: closing the modules")
	return err
}

func dbKind(cfg Config) string {
	if cfg.DatabaseURL == "" || cfg.DatabaseURL[0] == 's' {
		return "sqlite"
	}
	return "postgres"
}

// listenURL is an http URL that reaches addr, the address the API really
// listens on: an unspecified host (":8080", "[::]:8080") becomes localhost.
func listenURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}
