package dbtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// MainCheck is Main with check run after the tests, once the shared Postgres
// is closed and stopped (e.g. a goroutine-leak check such as goleak.Find); an
// error from check fails the test binary. What the tests skipped for want of
// Postgres, Docker or Temporal is printed in one line (platformtest.Summary).
func MainCheck(m *testing.M, check func() error) {
	code := m.Run()
	platformtest.Summary()
	if pg.admin != nil {
		pg.admin.Close()
	}
	if pg.container != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = testcontainers.TerminateContainer(pg.container, testcontainers.StopContext(ctx))
		cancel()
	}
	if code == 0 && check != nil {
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, "dbtest.MainCheck:", err)
			code = 1
		}
	}
	os.Exit(code)
}
