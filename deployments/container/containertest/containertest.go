// Package containertest gives tests of the docker runtime the engine and the
// preset images they need, or skips them with one line when those are absent
// outside CI (KEELSON_TEST_REQUIRE_DOCKER_RUNTIME=1 makes absence a failure).
// .ci/runtime-images.sh builds the images from the machine's own toolchain.
package containertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// Images returns the preset images named by KEELSON_IMAGE_GO, _GO_RUN and
// _STATIC (each must exist on the engine) and a client, or skips the test.
func Images(t testing.TB) (container.Images, *client.Client) {
	t.Helper()
	fail := func(why string) {
		t.Helper()
		if os.Getenv("KEELSON_TEST_REQUIRE_DOCKER_RUNTIME") == "1" {
			t.Fatalf("docker runtime test: %s (KEELSON_TEST_REQUIRE_DOCKER_RUNTIME=1)", why)
		}
		platformtest.Report(fmt.Sprintf("skipped %s: %s (enable: bash .ci/runtime-images.sh && eval \"$(bash .ci/runtime-images.sh --env)\")", t.Name(), why))
		t.Skipf("docker runtime test skipped: %s (run .ci/runtime-images.sh and export what `.ci/runtime-images.sh --env` prints)", why)
	}
	imgs := container.Images{Go: os.Getenv("KEELSON_IMAGE_GO"), GoRun: os.Getenv("KEELSON_IMAGE_GO_RUN"),
		Static: os.Getenv("KEELSON_IMAGE_STATIC"), Node: os.Getenv("KEELSON_IMAGE_NODE")}
	if imgs.Go == "" || imgs.GoRun == "" || imgs.Static == "" {
		fail("KEELSON_IMAGE_GO, KEELSON_IMAGE_GO_RUN and KEELSON_IMAGE_STATIC are not all set")
	}
	c, err := container.NewClient(context.Background(), 10*time.Second)
	if err != nil {
		fail("no Docker engine answers: " + err.Error())
	}
	t.Cleanup(func() { c.Close() })
	for _, ref := range []string{imgs.Go, imgs.GoRun, imgs.Static} {
		if _, err := c.ImageInspect(context.Background(), ref); err != nil {
			fail("image " + ref + " is not on the engine")
		}
	}
	return imgs, c
}

// Leftovers lists the containers, networks and images labelled with instance
// (and, when set, the deployment or project), as "kind name" lines.
func Leftovers(t testing.TB, c *client.Client, instance, key, value string) []string {
	t.Helper()
	ctx := context.Background()
	f := client.Filters{}.Add("label", container.LabelInstance+"="+instance)
	if key != "" {
		f = f.Add("label", key+"="+value)
	}
	var out []string
	cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	for _, x := range cs.Items {
		out = append(out, "container "+x.ID[:12]+" "+string(x.State))
	}
	ns, err := c.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		t.Fatalf("listing networks: %v", err)
	}
	for _, x := range ns.Items {
		out = append(out, "network "+x.Name)
	}
	is, err := c.ImageList(ctx, client.ImageListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("listing images: %v", err)
	}
	for _, x := range is.Items {
		out = append(out, "image "+x.ID)
	}
	if key == container.LabelProject {
		// A project's stage caches are found by name (the builder labels final images only).
		named, err := c.ImageList(ctx, client.ImageListOptions{
			Filters: client.Filters{}.Add("reference", "keelson/"+instance+"-"+strings.ToLower(value))})
		if err != nil {
			t.Fatalf("listing images: %v", err)
		}
		for _, x := range named.Items {
			out = append(out, "image "+x.ID+" "+strings.Join(x.RepoTags, ","))
		}
	}
	return out
}

// RemoveInstance removes everything labelled with instance (a test's own
// runtime), so a failing test leaves nothing on the shared engine.
func RemoveInstance(c *client.Client, instance string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := client.Filters{}.Add("label", container.LabelInstance+"="+instance)
	if cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err == nil {
		for _, x := range cs.Items {
			_, _ = c.ContainerRemove(ctx, x.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	if ns, err := c.NetworkList(ctx, client.NetworkListOptions{Filters: f}); err == nil {
		for _, x := range ns.Items {
			_, _ = c.NetworkRemove(ctx, x.ID, client.NetworkRemoveOptions{})
		}
	}
	if is, err := c.ImageList(ctx, client.ImageListOptions{Filters: f}); err == nil {
		for _, x := range is.Items {
			_, _ = c.ImageRemove(ctx, x.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
	}
}
