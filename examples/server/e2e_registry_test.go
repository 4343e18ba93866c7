package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container/containertest"
	"github.com/keelson-dev/keelson/deployments/container/registrytest"
	"github.com/keelson-dev/keelson/deployments/temporal/temporaltest"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestHostDownMovesFromTheRegistryE2E: two docker-runtime workers share a
// registry (KEELSON_REGISTRY, with credentials), Postgres and Temporal. An
// app built on host one is pushed and recorded by digest; host one stops,
// and host two starts the app again from that digest with no clone and no
// build (BUILD SKIPPED, its log names the pull), and it answers again.
func TestHostDownMovesFromTheRegistryE2E(t *testing.T) {
	t.Parallel()
	imgs, docker := containertest.Images(t)
	var project string
	t.Cleanup(func() { // after the workers stopped: the images both made or pulled
		res, err := docker.ImageList(context.Background(), client.ImageListOptions{
			Filters: client.Filters{}.Add("reference", "keelson/*-"+strings.ToLower(project))})
		if err != nil || project == "" {
			return
		}
		for _, img := range res.Items {
			_, _ = docker.ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
	})
	reg := registrytest.Start(t, registrytest.Options{Username: "keelson", Password: "e2e-registry-pw-5d1f"})
	srv := temporaltest.StartDevServer(t)
	dbURL := dbtest.PostgresURL(t)
	queue := "keelson-registry-" + platformtest.Unique(8)
	role := func(r string) func(*Config) {
		return func(c *Config) {
			c.Engine, c.TemporalAddress, c.TemporalTaskQueue, c.Role = "temporal", srv.FrontendHostPort(), queue, r
			c.hostHeartbeat, c.HostDownAfter = 250*time.Millisecond, 2*time.Second
			if r == RoleWorker {
				c.Runtime, c.ImageGo, c.ImageGoRun, c.ImageStatic = "docker", imgs.Go, imgs.GoRun, imgs.Static
				c.Registry, c.RegistryUsername, c.RegistryPassword = reg.Repository(), "keelson", "e2e-registry-pw-5d1f"
			}
		}
	}
	w1 := startServer(t, dbURL, role(RoleWorker))
	w2 := startServer(t, dbURL, role(RoleWorker))
	api := startServer(t, dbURL, role(RoleAPI))
	ctx := context.Background()
	if _, err := w2.App.Hosts.SetCordoned(ctx, w2.App.localHost.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	alice := api.signup(t, "alice@example.com")
	_, bare := newRepo(t, map[string]string{"index.html": "registry app one"})
	var p struct {
		ID   string `json:"id"`
		Slug string `json:"slug"`
	}
	api.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
		"name": "one", "repoUrl": "file://" + bare, "framework": "static", "port": 8080,
	}, &p)
	project = p.ID
	var tr struct {
		DeploymentID string `json:"deploymentId"`
	}
	api.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, &tr)
	if final, _ := waitDeployment(t, api, alice, tr.DeploymentID); final.Status != "LIVE" {
		t.Fatalf("deployment: %s %s", final.Status, final.ErrorMessage)
	}
	was := liveOf(t, api, p.Slug)
	if was.Host != w1.App.localHost.Queue || !strings.HasPrefix(was.Image, reg.Repository()+"/") || !strings.Contains(was.Image, "@sha256:") {
		t.Fatalf("the deployment: host %q image %q", was.Host, was.Image)
	}
	if _, err := w2.App.Hosts.SetCordoned(ctx, w2.App.localHost.ID, false, ""); err != nil {
		t.Fatal(err)
	}

	w1.stop()
	platformtest.Eventually(t, time.Minute, "the app through host two after host one stopped", func() bool {
		return strings.Contains(tryApp(w2, "", p.Slug), "registry app one")
	})
	now := liveAfter(t, api, p.Slug, was.ID)
	if now.Host != w2.App.localHost.Queue || now.Image != was.Image || now.RollbackOf != was.ID {
		t.Fatalf("after the move: %+v, before: %+v", now, was)
	}
	old := strings.Join(streamLogs(t, api, alice, was.ID), "\n")
	if !strings.Contains(old, "deployment "+now.ID+" starts from its image "+was.Image+" (nothing built again) on another host") {
		t.Fatalf("the moved deployment's log does not say how it moved:\n%s", old)
	}
	logs := strings.Join(streamLogs(t, api, alice, now.ID), "\n")
	for _, want := range []string{"BUILD skipped", "pulling the image " + was.Image + " from the registry"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the new deployment's log lacks %q:\n%s", want, logs)
		}
	}
	for _, built := range []string{"fetching file://", "building the image", "e2e-registry-pw-5d1f"} {
		if strings.Contains(strings.ToLower(logs), built) {
			t.Fatalf("the new deployment's log has %q:\n%s", built, logs)
		}
	}
	w2.stop()
}
