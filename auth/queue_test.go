package auth

import (
	"context"
	"net/http"
	"slices"
	"strconv"
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
		d.Limits.MailPerDestination = Limit{Max: 100, Per: time.Hour}
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
	if n := e.svc.mq.Pending(); n != 0 {
		t.Fatalf("%d jobs still pending after Close", n)
	}
	// After Close nothing is queued any more.
	e.wantErr(e.do("POST", "/auth/forgot-password", "", map[string]any{"email": "x@example.com"}), 503, "")
	bdb.Close()
}

// slowMailer is a mail server that takes its time with every message, until
// hurry is closed.
type slowMailer struct {
	d     time.Duration
	hurry chan struct{}
}

func (m slowMailer) Send(ctx context.Context, _ Mail) error {
	select {
	case <-time.After(m.d):
		return nil
	case <-m.hurry:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRegisterAndEmailChangeDoTheSameWorkWhateverTheAddress: with a mail
// server that takes a second, registering a new address (which mails a link)
// takes about as long as registering a taken one (409, no mail), and an email
// change to a taken address as long as to a free one. Medians of one run,
// interleaved, generous factor: no absolute timing.
func TestRegisterAndEmailChangeDoTheSameWorkWhateverTheAddress(t *testing.T) {
	hurry := make(chan struct{})
	e := newEnv(t, dbtest.SQLite(t, sets...), func(d *Deps) {
		d.Mailer = slowMailer{time.Second, hurry}
		d.Limits.RegisterPerIP = Limit{Max: 1000, Per: time.Hour}
		d.Limits.LoginPerAccountAddr = Limit{Max: 1000, Per: time.Hour}
		d.Limits.MailPerAccount = Limit{Max: 1000, Per: time.Hour}
		d.Limits.MailPerDestination = Limit{Max: 1000, Per: time.Hour}
	})
	t.Cleanup(func() { close(hurry) }) // (runs before the queue's Close) the backlog goes at once
	e.register("taken@example.com")
	tok := e.tokens("taken@example.com").AccessToken
	timed := func(method, path, token string, body map[string]any, want int) time.Duration {
		start := time.Now()
		resp := e.do(method, path, token, body)
		d := time.Since(start)
		if resp.Code != want {
			t.Fatalf("%s %s: %d %s", method, path, resp.Code, resp.Body)
		}
		return d
	}
	reg := func(email string) map[string]any {
		return map[string]any{"email": email, "password": testPassword, "confirmPassword": testPassword}
	}
	const n = 7
	var fresh, taken, toFree, toTaken []time.Duration
	for i := range n {
		fresh = append(fresh, timed("POST", "/auth/register", "", reg("new"+strconv.Itoa(i)+"@example.com"), http.StatusCreated))
		taken = append(taken, timed("POST", "/auth/register", "", reg("taken@example.com"), http.StatusConflict))
		toFree = append(toFree, timed("PATCH", "/auth/me", tok, map[string]any{"email": "free" + strconv.Itoa(i) + "@example.com", "currentPassword": testPassword}, http.StatusOK))
		toTaken = append(toTaken, timed("PATCH", "/auth/me", tok, map[string]any{"email": "new" + strconv.Itoa(i) + "@example.com", "currentPassword": testPassword}, http.StatusOK))
	}
	for _, c := range []struct {
		what string
		a, b []time.Duration
	}{{"register new vs taken", fresh, taken}, {"email change to a free vs a taken address", toFree, toTaken}} {
		ma, mb := medianOf(c.a), medianOf(c.b)
		t.Logf("%s: medians %v vs %v", c.what, ma, mb)
		if ma > 5*mb || mb > 5*ma {
			t.Errorf("%s: medians %v vs %v tell the cases apart", c.what, ma, mb)
		}
	}
}

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
