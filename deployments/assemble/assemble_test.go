package assemble_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/assemble"
	"github.com/keelson-dev/keelson/deployments/internal/deploytest"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// closingRuntime is the scripted runtime, telling whether it was closed.
type closingRuntime struct {
	*deploytest.Runtime
	closed atomic.Int32
}

func (r *closingRuntime) Close(context.Context) error { r.closed.Add(1); return nil }

func deps(t *testing.T, rt *closingRuntime) assemble.Deps {
	d := assemble.Deps{Service: deployments.Deps{DB: dbtest.SQLite(t), Auth: deploytest.Authn{}, Projects: deploytest.NewProjects(),
		LogTokenKey: []byte("0123456789abcdef0123456789abcdef")}}
	if rt != nil {
		d.Runtime = rt
	}
	return d
}

// problems records the settings New named.
type problems []string

func (p *problems) problem(field, problem string) error {
	*p = append(*p, field)
	return errors.New(field + ": " + problem)
}

func TestLocalEngineAssembles(t *testing.T) {
	t.Parallel()
	rt := &closingRuntime{Runtime: deploytest.NewRuntime()}
	ctx := context.Background()
	d := deps(t, rt)
	m, err := assemble.New(ctx, assemble.Config{BuildSlots: 2}, d)
	if err != nil {
		t.Fatal(err)
	}
	if m.Service == nil || m.Hosts == nil || m.QueueDepth() == nil || m.LocalHost() != nil {
		t.Fatalf("local engine: service %v, hosts %v, queue %v, local host %v", m.Service, m.Hosts, m.QueueDepth(), m.LocalHost())
	}
	var api huma.API = humago.New(http.NewServeMux(), huma.DefaultConfig("t", "1"))
	a, err := platform.Assemble(ctx, api, db.Migrator(d.Service.DB), m.Modules()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rt.closed.Load() != 1 {
		t.Fatalf("the runtime was closed %d times, want once", rt.closed.Load())
	}
}

func TestLocalEngineNeedsARuntime(t *testing.T) {
	t.Parallel()
	var p problems
	_, err := assemble.New(context.Background(), assemble.Config{Role: assemble.RoleAPI, Problem: p.problem}, deps(t, nil))
	if err == nil || len(p) != 1 || p[0] != "Role" {
		t.Fatalf("err %v, settings named %v; want Role", err, p)
	}
}

func TestUnreachableTemporalNamesTheSettingAndClosesTheRuntime(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	var p problems
	rt := &closingRuntime{Runtime: deploytest.NewRuntime()}
	_, err = assemble.New(context.Background(), assemble.Config{Engine: assemble.EngineTemporal, Problem: p.problem,
		Temporal: assemble.Temporal{Address: closed, Namespace: "default", TaskQueue: "q", DialTimeout: 2 * time.Second}}, deps(t, rt))
	if err == nil || len(p) != 1 || p[0] != "Temporal.Address" {
		t.Fatalf("err %v, settings named %v; want Temporal.Address", err, p)
	}
	if rt.closed.Load() != 1 {
		t.Fatalf("the runtime was closed %d times, want once", rt.closed.Load())
	}
}

func TestBadServiceDepsCloseTheRuntime(t *testing.T) {
	t.Parallel()
	rt := &closingRuntime{Runtime: deploytest.NewRuntime()}
	d := deps(t, rt)
	d.Service.LogTokenKey = nil
	if _, err := assemble.New(context.Background(), assemble.Config{}, d); err == nil {
		t.Fatal("New took a Deps without a log token key")
	}
	if rt.closed.Load() != 1 {
		t.Fatalf("the runtime was closed %d times, want once", rt.closed.Load())
	}
}
