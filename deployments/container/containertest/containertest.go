// Package containertest gives tests of the docker runtime the engine and the
// preset images they need. The images are the ones KEELSON_IMAGE_GO, _GO_RUN
// and _STATIC name, else scripts/local-images.sh's keelson/*:local; missing
// ones are built with that script from the machine's own toolchain, once per
// machine. Without an engine, or when the build fails, the test skips saying
// why (KEELSON_TEST_REQUIRE_DOCKER_RUNTIME=1 makes that a failure).
package containertest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/keelson-dev/keelson/deployments/container"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// LocalImages are the names scripts/local-images.sh builds.
var LocalImages = container.Images{Go: "keelson/go:local", GoRun: "keelson/go-run:local",
	Static: "keelson/static:local", Node: "keelson/node:local"}

// enable is what a skipped test says makes it run.
const enable = "a Docker engine, and root for scripts/local-images.sh (the tests run it when the images are missing)"

// Images returns the preset images (built first when missing) and a client
// of the engine, or skips the test.
func Images(t testing.TB) (container.Images, *client.Client) {
	t.Helper()
	fail := func(why string) {
		t.Helper()
		if os.Getenv("KEELSON_TEST_REQUIRE_DOCKER_RUNTIME") == "1" {
			t.Fatalf("docker runtime test: %s (KEELSON_TEST_REQUIRE_DOCKER_RUNTIME=1)", why)
		}
		platformtest.Skip(t, "docker runtime: "+why, enable)
	}
	imgs := container.Images{Go: cmp.Or(os.Getenv("KEELSON_IMAGE_GO"), LocalImages.Go),
		GoRun:  cmp.Or(os.Getenv("KEELSON_IMAGE_GO_RUN"), LocalImages.GoRun),
		Static: cmp.Or(os.Getenv("KEELSON_IMAGE_STATIC"), LocalImages.Static), Node: os.Getenv("KEELSON_IMAGE_NODE")}
	c, err := container.NewClient(context.Background(), 10*time.Second)
	if err != nil {
		fail("no Docker engine answers: " + err.Error())
	}
	t.Cleanup(func() { c.Close() })
	if err := ensure(c, imgs); err != nil {
		fail(err.Error())
	}
	return imgs, c
}

// built remembers the outcome of this binary's build (one try per binary).
var built struct {
	mu   sync.Mutex
	done bool
	err  error
}

// ensure builds the images of imgs the engine does not hold with
// scripts/local-images.sh, under their names, one build at a time across
// test binaries.
func ensure(c *client.Client, imgs container.Images) error {
	ctx := context.Background()
	var missing []string
	for _, ref := range []string{imgs.Go, imgs.GoRun, imgs.Static} {
		if _, err := c.ImageInspect(ctx, ref); err != nil {
			missing = append(missing, ref)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	built.mu.Lock()
	defer built.mu.Unlock()
	if !built.done {
		built.done = true
		ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
		defer cancel()
		built.err = platformtest.RunRepoScript(ctx, "keelson-local-images", "scripts/local-images.sh",
			[]string{"IMAGE_GO=" + imgs.Go, "IMAGE_GO_RUN=" + imgs.GoRun, "IMAGE_STATIC=" + imgs.Static}, "go", "go-run", "static")
		if built.err == nil {
			platformtest.Report("built the docker runtime's images with scripts/local-images.sh: " + strings.Join(missing, " "))
		}
	}
	if built.err != nil {
		return fmt.Errorf("images %s are missing and building them failed: %v", strings.Join(missing, ", "), built.err)
	}
	for _, ref := range []string{imgs.Go, imgs.GoRun, imgs.Static} {
		if _, err := c.ImageInspect(ctx, ref); err != nil {
			return fmt.Errorf("scripts/local-images.sh did not produce %s", ref)
		}
	}
	return nil
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
