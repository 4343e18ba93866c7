package auth

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"go.uber.org/goleak"
)

// stuckMailer is a mail server that never answers: each send waits for its
// context (the job timeout, or Close giving up).
type stuckMailer struct{ started chan struct{} }

func (m stuckMailer) Send(ctx context.Context, _ Mail) error {
	m.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

// TestMailQueueIsBoundedAndLeaksNothing: with the mail server stuck, requests
// still answer at once; the queue holds at most MailQueueSize jobs (then 503,
// the same for every address); Close gives up at its deadline, cancels the
// sends in flight, and no sender goroutine outlives it.
func TestMailQueueIsBoundedAndLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	bdb := dbtest.SQLite(t, sets...)
	m := stuckMailer{started: make(chan struct{}, 100)}
	e := newEnv(t, bdb, func(d *Deps) {
		d.Mailer = m
		d.MailWorkers, d.MailQueueSize = 2, 3
		d.Limits.ForgotPerIP = Limit{Max: 100, Per: time.Hour}
		d.Limits.RegisterPerIP = Limit{Max: 100, Per: time.Hour}
	})
	e.register("ada@example.com") // its verification mail takes one sender
	<-m.started
	status := 0
	for i := 0; i < 10 && status != http.StatusServiceUnavailable; i++ {
		resp := e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "ada@example.com"})
		if status = resp.Code; status == http.StatusServiceUnavailable && !strings.Contains(resp.Body.String(), "try again") {
			t.Fatalf("full queue answered %s", resp.Body)
		}
		if i == 0 {
			<-m.started // the second sender is stuck too; the rest wait in the queue
		}
	}
	if status != http.StatusServiceUnavailable {
		t.Fatal("the mail queue never filled up: it is not bounded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.svc.Close(ctx); err == nil || !strings.Contains(err.Error(), "before every mail was sent") {
		t.Fatalf("Close with stuck mail: %v", err)
	}
	if n := e.svc.mq.pending.Load(); n != 0 {
		t.Fatalf("%d jobs still pending after Close", n)
	}
	// After Close nothing is queued any more.
	e.wantErr(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "x@example.com"}), 503, "")
	bdb.Close()
}
