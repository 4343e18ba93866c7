package httpx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/httpx"
)

func TestStreamLimit(t *testing.T) {
	t.Parallel()
	l := httpx.NewStreamLimit(2, 7*time.Second)
	ctx := context.Background()
	r1, err := l.Acquire(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Acquire(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(ctx, "alice")
	var pe *platform.Error
	if !errors.As(err, &pe) || pe.Status != 429 || pe.RetryAfter != 7*time.Second || !errors.Is(err, platform.ErrRateLimited) {
		t.Fatalf("third stream: %v", err)
	}
	if _, err := l.Acquire(ctx, "bob"); err != nil {
		t.Fatalf("another user is not limited by alice's streams: %v", err)
	}
	r1()
	r1() // a second release does not free a slot twice
	if l.Open("alice") != 1 {
		t.Fatalf("open after release: %d", l.Open("alice"))
	}
	r3, err := l.Acquire(ctx, "alice")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := l.Acquire(ctx, "alice"); err == nil {
		t.Fatal("double release freed an extra slot")
	}
	r2()
	r3()
	if l.Open("alice") != 0 {
		t.Fatalf("open after all released: %d", l.Open("alice"))
	}
}
