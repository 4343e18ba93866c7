package dbtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
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

// buildLocal runs the repository's .ci/postgres-image.sh, holding a lock so
// that concurrent test binaries build the image once.
func buildLocal(ctx context.Context) error {
	script, err := findScript()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("it needs root (run `sudo bash " + script + "` once)")
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "keelson-dbtest-postgres-image.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "KEELSON_TEST_POSTGRES_IMAGE="+LocalPostgresImage)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return fmt.Errorf("%s: %v: %s", script, err, lines[len(lines)-1])
	}
	return nil
}

// findScript looks for .ci/postgres-image.sh in the directories above the
// test's working directory (the package directory).
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, ".ci", "postgres-image.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New(".ci/postgres-image.sh not found above the test's directory")
		}
		dir = parent
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
