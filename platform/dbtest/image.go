package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// resolveImage returns the image to start: img when it is present or can be
// pulled; else LocalPostgresImage, built by .ci/postgres-image.sh if missing.
// skip is set (one line, saying why) when there is no usable image.
func resolveImage(ctx context.Context, img string) (use, skip string) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return "", "Docker is unavailable: " + err.Error()
	}
	defer cli.Close()
	if present(ctx, cli, img) {
		return img, ""
	}
	pullErr := pull(ctx, cli, img)
	if pullErr == nil {
		return img, ""
	}
	why := fmt.Sprintf("image %s is not on this machine and cannot be pulled (%s)", img, firstLine(pullErr.Error()))
	if present(ctx, cli, LocalPostgresImage) {
		report(fmt.Sprintf("%s; using %s", why, LocalPostgresImage))
		return LocalPostgresImage, ""
	}
	if err := buildLocal(ctx); err != nil {
		return "", fmt.Sprintf("%s, and building %s from this machine's PostgreSQL failed: %s", why, LocalPostgresImage, firstLine(err.Error()))
	}
	if !present(ctx, cli, LocalPostgresImage) {
		return "", fmt.Sprintf("%s, and .ci/postgres-image.sh did not produce %s", why, LocalPostgresImage)
	}
	report(fmt.Sprintf("%s; built %s from this machine's PostgreSQL", why, LocalPostgresImage))
	return LocalPostgresImage, ""
}

func present(ctx context.Context, cli *testcontainers.DockerClient, img string) bool {
	_, err := cli.ImageInspect(ctx, img)
	return err == nil
}

func pull(ctx context.Context, cli *testcontainers.DockerClient, img string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	resp, err := cli.ImagePull(ctx, img, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	return resp.Wait(ctx)
}

// buildLocal runs the repository's .ci/postgres-image.sh, one build at a
// time across test binaries.
func buildLocal(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("it needs root (run `sudo bash .ci/postgres-image.sh` once)")
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	return platformtest.RunRepoScript(ctx, "keelson-dbtest-postgres-image", ".ci/postgres-image.sh",
		[]string{"KEELSON_TEST_POSTGRES_IMAGE=" + LocalPostgresImage})
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
