package platform_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/keelson-dev/keelson/platform"
)

// recorder is a module that writes what happens to it into a shared log.
type recorder struct {
	name     string
	log      *[]string
	startErr error
	lifetime context.Context
}

func (r *recorder) Register(api huma.API) error {
	*r.log = append(*r.log, "register "+r.name)
	huma.Get(api, "/"+r.name, func(context.Context, *struct{}) (*struct{}, error) { return nil, nil })
	return nil
}

func (r *recorder) Migrations() platform.MigrationSet {
	return platform.MigrationSet{Module: r.name, Migrations: []platform.Migration{{ID: "0001"}}}
}

func (r *recorder) Start(ctx context.Context) error {
	*r.log = append(*r.log, "start "+r.name)
	r.lifetime = ctx
	return r.startErr
}

func (r *recorder) Close(context.Context) error {
	*r.log = append(*r.log, "close "+r.name)
	return nil
}

func assemblyAPI() huma.API { return humago.New(http.NewServeMux(), huma.DefaultConfig("t", "1")) }

func TestAssemblyOrder(t *testing.T) {
	var log []string
	migrate := func(_ context.Context, sets ...platform.MigrationSet) error {
		for _, s := range sets {
			log = append(log, "migrate "+s.Module)
		}
		return nil
	}
	a, b := &recorder{name: "a", log: &log}, &recorder{name: "b", log: &log}
	startCtx, cancelStart := context.WithCancel(context.Background())
	api := assemblyAPI()
	asm, err := platform.Assemble(startCtx, api, migrate, a, platform.Part{}, b)
	if err != nil {
		t.Fatal(err)
	}
	if api.OpenAPI().Paths["/b"] == nil {
		t.Error("module b's route is not registered")
	}
	// The lifetime outlives the start-up context and ends with Close.
	cancelStart()
	if a.lifetime.Err() != nil {
		t.Fatal("a module's lifetime ended with the start-up context")
	}
	if err := asm.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.lifetime.Err() == nil {
		t.Error("a module's lifetime did not end at Close")
	}
	want := []string{"register a", "register b", "migrate a", "migrate b", "start a", "start b", "close b", "close a"}
	if !slices.Equal(log, want) {
		t.Errorf("lifecycle:\n got %q\nwant %q", log, want)
	}
	if err := asm.Close(context.Background()); err != nil || len(log) != len(want) {
		t.Errorf("a second Close did something: %v %q", err, log)
	}
}

func TestAssemblyFailedStartClosesEverything(t *testing.T) {
	var log []string
	migrate := func(context.Context, ...platform.MigrationSet) error { return nil }
	boom := errors.New("boom")
	a, b, c := &recorder{name: "a", log: &log}, &recorder{name: "b", log: &log, startErr: boom}, &recorder{name: "c", log: &log}
	_, err := platform.Assemble(context.Background(), assemblyAPI(), migrate, a, b, c)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "b: start") {
		t.Fatalf("error %v does not name module b's start", err)
	}
	want := []string{"register a", "register b", "register c", "start a", "start b", "close c", "close b", "close a"}
	if !slices.Equal(log, want) {
		t.Errorf("lifecycle:\n got %q\nwant %q", log, want)
	}
	if a.lifetime.Err() == nil {
		t.Error("the lifetime of a failed assembly did not end")
	}
}

func TestAssemblyFailedMigrationStartsNothing(t *testing.T) {
	var log []string
	bad := errors.New("disk full")
	a := &recorder{name: "a", log: &log}
	_, err := platform.Assemble(context.Background(), assemblyAPI(),
		func(context.Context, ...platform.MigrationSet) error { return bad }, a)
	if !errors.Is(err, bad) {
		t.Fatalf("error %v, want the migration's", err)
	}
	if want := []string{"register a", "close a"}; !slices.Equal(log, want) {
		t.Errorf("lifecycle: got %q, want %q", log, want)
	}
}
