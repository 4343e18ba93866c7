// Package dbtest hands each test a fresh, migrated database: a SQLite file in
// the test's temp dir, or a fresh schema on a shared Postgres. Postgres comes
// from KEELSON_TEST_DATABASE_URL when set, else from a container that
// testcontainers-go starts once per test binary (image KEELSON_TEST_POSTGRES_IMAGE,
// default postgres:16-alpine). Without either, Postgres tests skip saying why,
// unless KEELSON_TEST_REQUIRE_POSTGRES=1 (CI), where they fail.
//
// Where Docker answers but the image is neither present nor pullable (a
// machine with no registry), dbtest uses LocalPostgresImage, building it first
// from the machine's own PostgreSQL with the repository's
// .ci/postgres-image.sh when it is missing (as root, one build at a time
// across test binaries); failing that, Postgres tests skip with one line
// saying why.
//
// No testcontainers environment is needed. Where Ryuk's image is neither on
// the machine nor pullable, Ryuk is disabled for the process (unless
// TESTCONTAINERS_RYUK_DISABLED is set). The container's published port is
// dialled on testcontainers' address and on loopback, and the one that
// answers is used (unless TESTCONTAINERS_HOST_OVERRIDE is set): a machine that
// has /.dockerenv but runs its own Docker daemon answers on loopback only.
//
// Packages that use Postgres call dbtest.Main from TestMain so the container is
// stopped when the binary ends. Containers are labelled with their owner
// process; a binary killed before it could stop its container (kill -9, a
// -timeout panic) leaves it behind, and the next binary to start removes it.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/uptrace/bun"
)

// DefaultPostgresImage is the image used when KEELSON_TEST_POSTGRES_IMAGE is unset.
const DefaultPostgresImage = "postgres:16-alpine"

// LocalPostgresImage is the image .ci/postgres-image.sh builds from the
// machine's PostgreSQL binaries, used when the wanted image cannot be pulled.
const LocalPostgresImage = "keelson-test/postgres:15"

type shared struct {
	once      sync.Once
	baseURL   string
	admin     *bun.DB
	container *postgres.PostgresContainer
	skip      string
	err       error
}

// pg is the one shared Postgres of this test binary. A package-level variable is
// the only way to share a container across the tests of one binary.
var pg shared

// Main runs the package's tests and then stops the shared Postgres container.
func Main(m *testing.M) { MainCheck(m, nil) }

// SQLite returns a fresh SQLite database in t's temp dir with sets migrated.
func SQLite(t testing.TB, sets ...db.MigrationSet) *bun.DB {
	t.Helper()
	return open(t, "sqlite", "sqlite://"+filepath.Join(t.TempDir(), "test.db"), sets)
}

// Postgres returns a connection to a fresh schema on the shared Postgres with
// sets migrated. The schema is dropped when t ends.
func Postgres(t testing.TB, sets ...db.MigrationSet) *bun.DB {
	t.Helper()
	return open(t, "postgres", PostgresURL(t), sets)
}

// open opens the database at url (kind names it in failures), closed when t
// ends, with sets migrated.
func open(t testing.TB, kind, url string, sets []db.MigrationSet) *bun.DB {
	t.Helper()
	ctx := context.Background()
	bdb, err := db.Open(ctx, db.Options{URL: url})
	if err != nil {
		t.Fatalf("dbtest: open %s: %v", kind, err)
	}
	t.Cleanup(func() { bdb.Close() })
	if err := db.Migrate(ctx, bdb, sets...); err != nil {
		t.Fatalf("dbtest: migrate %s: %v", kind, err)
	}
	return bdb
}

// PostgresURL returns a postgres:// URL whose search_path is a fresh, empty
// schema, for tests that open the database themselves (e.g. a whole server).
// The schema is dropped when t ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pg.once.Do(startShared)
	if pg.skip != "" {
		if os.Getenv("KEELSON_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("dbtest: Postgres required (KEELSON_TEST_REQUIRE_POSTGRES=1) but unavailable: %s", pg.skip)
		}
		platformtest.Skip(t, "Postgres: "+pg.skip, "a Docker engine (dbtest starts Postgres in it, building its image when none can be pulled), or KEELSON_TEST_DATABASE_URL=postgres://...")
	}
	if pg.err != nil {
		t.Fatalf("dbtest: %v", pg.err)
	}
	schema := "t_" + randHex(8)
	ctx := context.Background()
	if _, err := pg.admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("dbtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = pg.admin.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	return withParam(pg.baseURL, "search_path", schema)
}

// Each runs fn as the subtests "sqlite" and "postgres", each on a fresh
// database with sets migrated. Subtests run in parallel.
func Each(t *testing.T, sets []db.MigrationSet, fn func(t *testing.T, bdb *bun.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, SQLite(t, sets...))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, Postgres(t, sets...))
	})
}

func startShared() {
	ctx := context.Background()
	if u := os.Getenv("KEELSON_TEST_DATABASE_URL"); u != "" {
		pg.baseURL = u
		report("Postgres from KEELSON_TEST_DATABASE_URL")
	} else {
		img := os.Getenv("KEELSON_TEST_POSTGRES_IMAGE")
		if img == "" {
			img = DefaultPostgresImage
		}
		// Before the first testcontainers call: it reads its configuration once.
		configureRyuk(ctx, testcontainers.ReaperDefaultImage)
		if reason := dockerUnavailable(ctx); reason != "" {
			pg.skip = "no KEELSON_TEST_DATABASE_URL and " + reason
			return
		}
		if n := reapAbandoned(ctx); n > 0 {
			report(fmt.Sprintf("removed %d Postgres container(s) left by killed test binaries", n))
		}
		var skip string
		if img, skip = resolveImage(ctx, img); skip != "" {
			pg.skip = skip
			return
		}
		start := time.Now()
		c, err := runPostgres(ctx, img)
		if err != nil {
			pg.err = fmt.Errorf("start Postgres container from image %s: %w", img, err)
			return
		}
		pg.container = c
		u, err := containerURL(ctx, c)
		if err != nil {
			pg.err = err
			return
		}
		pg.baseURL = u
		report(fmt.Sprintf("Postgres container %.12s from image %s at %s, started by testcontainers in %s",
			c.GetContainerID(), img, hostOf(u), time.Since(start).Round(time.Millisecond)))
	}
	admin, err := db.Open(ctx, db.Options{URL: pg.baseURL})
	if err != nil {
		pg.err = fmt.Errorf("connect to test Postgres: %w", err)
		return
	}
	pg.admin = admin
}

// runPostgres starts the shared Postgres container. The engine picks the
// published host port; when a test process of another package took that
// port between the engine's choice and its bind ("address already in use",
// seen in CI), the start is tried again, up to three times.
func runPostgres(ctx context.Context, img string) (*postgres.PostgresContainer, error) {
	for try := 1; ; try++ {
		c, err := runPostgresOnce(ctx, img)
		if err == nil || try == 3 || !strings.Contains(err.Error(), "address already in use") {
			return c, err
		}
		report(fmt.Sprintf("Postgres container start %d of 3: its published port was taken meanwhile; trying again", try))
	}
}

func runPostgresOnce(ctx context.Context, img string) (*postgres.PostgresContainer, error) {
	c, err := postgres.Run(ctx, img,
		postgres.WithDatabase("keelson"),
		postgres.WithUsername("keelson"),
		postgres.WithPassword(pgPassword),
		// Postgres logs readiness twice: after initdb's temporary server
		// and after the real start. The published port is checked below,
		// on whichever address answers. WithWaitStrategy alone would
		// cap the wait at testcontainers' default of 60 s, which a
		// loaded machine passes (seen: 41 s for one container at load 24).
		testcontainers.WithWaitStrategyAndDeadline(3*time.Minute, wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(3*time.Minute)),
		testcontainers.WithCmdArgs("-c", "max_connections=400"),
		testcontainers.WithLabels(ownerLabels()),
	)
	if err != nil && c != nil {
		_ = testcontainers.TerminateContainer(c)
		c = nil
	}
	return c, err
}

const pgPassword = "keelson-test"

// containerURL returns the URL of c's database on the address its published
// port answers on: testcontainers' choice, else loopback (see reachableHost).
// TESTCONTAINERS_HOST_OVERRIDE, when set, is the only address tried.
func containerURL(ctx context.Context, c *postgres.PostgresContainer) (string, error) {
	host, err := c.Host(ctx)
	if err != nil {
		return "", fmt.Errorf("Postgres container host: %w", err)
	}
	port, err := c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return "", fmt.Errorf("Postgres container port: %w", err)
	}
	hosts := []string{host}
	if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set && host != "127.0.0.1" && host != "localhost" {
		hosts = append(hosts, "127.0.0.1")
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	host, err = reachableHost(pctx, hosts, port.Port())
	if err != nil {
		return "", fmt.Errorf("Postgres container: %w", err)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("keelson", pgPassword),
		Host:     net.JoinHostPort(host, port.Port()),
		Path:     "/keelson",
		RawQuery: "sslmode=disable",
	}
	return u.String(), nil
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return u.Host
}

// report adds a line to the test report (platformtest.Report).
func report(line string) { platformtest.Report(line) }

func dockerUnavailable(ctx context.Context) (reason string) {
	defer func() {
		if r := recover(); r != nil {
			reason = fmt.Sprintf("Docker is unavailable (%v)", r)
		}
	}()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return "Docker is unavailable: " + err.Error()
	}
	defer cli.Close()
	if _, err := cli.Info(ctx, client.InfoOptions{}); err != nil {
		return "Docker is unavailable: " + err.Error()
	}
	return ""
}

func withParam(raw, k, v string) string {
	u, err := url.Parse(raw)
	if err != nil {
		sep := "?"
		if strings.Contains(raw, "?") {
			sep = "&"
		}
		return raw + sep + k + "=" + v
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
