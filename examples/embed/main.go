// Command embed shows how to embed Keelson modules in your own Go server: your
// own mux and Huma API, your own database handle, and only the modules you
// want (here auth and plans), next to routes of your own that reuse Keelson's
// bearer authentication. Run it with `go run ./examples/embed`.
//
// full.go builds the full service instead: every module the reference
// server has, as one list given to platform.Assemble.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/apidocs"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/httpx"
	"github.com/keelson-dev/keelson/platform/secret"
)

// Options of this example server.
type Options struct {
	DatabaseURL string // "" = SQLite under DataDir
	DataDir     string
	JWTSecret   string // 32+ bytes
	SealKey     string // 32+ bytes
	Log         *slog.Logger
}

// newServer builds an http.Handler serving the auth and plans modules and one
// route of our own, and returns a function that releases it.
func newServer(ctx context.Context, o Options) (http.Handler, func(), error) {
	sealer, err := secret.New(o.SealKey)
	if err != nil {
		return nil, nil, err
	}
	bdb, err := db.Open(ctx, db.Options{URL: o.DatabaseURL, DataDir: o.DataDir})
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	api := humago.New(mux, platform.APIConfig("My platform", "1.0.0"))

	// Every module is built the same way: New(Deps) validates and applies
	// defaults. Each is a platform.Module: it registers its routes, brings
	// its migrations, and starts and closes its background work (auth's mail
	// senders; plans seeds one plan per tier at start).
	authSvc, err := auth.New(auth.Deps{DB: bdb, Sealer: sealer, JWTSecret: []byte(o.JWTSecret), Logger: o.Log})
	if err != nil {
		bdb.Close()
		return nil, nil, err
	}
	plansSvc, err := plans.New(plans.Deps{DB: bdb, Auth: authSvc, Logger: o.Log})
	if err != nil {
		bdb.Close()
		return nil, nil, err
	}
	// The assembly registers, migrates and starts the modules in order, and
	// closes them in reverse (the database last); a failed start closes all.
	mods, err := platform.Assemble(ctx, api, db.Migrator(bdb),
		platform.Part{Routes: func(api huma.API) error { return apidocs.Register(api, apidocs.Options{}) }, // /openapi.json, /docs
			OnClose: func(context.Context) error { return bdb.Close() }},
		authSvc, plansSvc)
	if err != nil {
		return nil, nil, err
	}
	release := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mods.Close(cctx)
	}

	// A route of our own, protected by Keelson's bearer authenticator.
	type helloOutput struct {
		Body struct {
			Message string `json:"message"`
		}
	}
	huma.Register(api, huma.Operation{
		OperationID: "hello", Method: http.MethodGet, Path: "/hello",
		Security: platform.Bearer(), Middlewares: huma.Middlewares{platform.RequireAuth(api, authSvc)},
	}, func(ctx context.Context, _ *struct{}) (*helloOutput, error) {
		p, _ := platform.PrincipalFrom(ctx)
		out := &helloOutput{}
		out.Body.Message = "hello, " + p.Email
		return out, nil
	})
	return httpx.Middleware(o.Log, mux), release, nil
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	h, done, err := newServer(context.Background(), Options{
		DataDir:   "./data-embed",
		JWTSecret: "change-me-change-me-change-me-change-me",
		SealKey:   "change-me-too-change-me-too-change-me-too",
		Log:       log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
	defer done()
	log.Info("listening", "addr", ":8090")
	if err := http.ListenAndServe(":8090", h); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}
