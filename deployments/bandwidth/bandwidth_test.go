package bandwidth_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

func TestMain(m *testing.M) { dbtest.MainCheck(m, func() error { return platformtest.FindLeaks() }) }

// unit is one "GB" here: a 1 GB plan is crossed with 100 kB.
const unit = 100_000

// projectsFake stands in for the projects module (wired to this one and
// tested by the reference server's e2e tests). fail makes the next lookup
// fail as a database error would.
type projectsFake struct {
	mu   sync.Mutex
	m    map[string]*bandwidth.Project // by slug
	fail bool
}

func (f *projectsFake) ProjectBySlug(_ context.Context, slug string) (*bandwidth.Project, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		f.fail = false
		return nil, errors.New("connection refused")
	}
	p, ok := f.m[slug]
	if !ok {
		return nil, platform.NotFound("project not found")
	}
	out := *p
	return &out, nil
}

func (f *projectsFake) setLimit(slug string, gb int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[slug].MaxBandwidthGb = gb
}

// mailbox records "user: subject" of each notice.
type mailbox struct {
	mu   sync.Mutex
	sent []string
}

func (m *mailbox) Notify(_ context.Context, userID, subject, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, userID+": "+subject)
	return nil
}

func (m *mailbox) subjects() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sent)
}

// env is one ingress (a real Router with a Meter on a loopback server, in
// front of a real upstream) and the module over a real database.
type env struct {
	bdb      *bun.DB
	projects *projectsFake
	mail     *mailbox
	now      atomic.Pointer[time.Time] // the injected clock
	up       string
}

// replica is one ingress process: router, meter, module.
type replica struct {
	svc    *bandwidth.Service
	router *ingress.Router
	srv    *httptest.Server
}

func setup(t *testing.T, bdb *bun.DB) *env {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		var n int
		_, _ = fmt.Sscanf(r.URL.Path, "/%d", &n)
		_, _ = w.Write(bytes.Repeat([]byte("x"), n))
	}))
	t.Cleanup(up.Close)
	e := &env{bdb: bdb, mail: &mailbox{}, up: strings.TrimPrefix(up.URL, "http://"),
		projects: &projectsFake{m: map[string]*bandwidth.Project{
			"alpha": {ID: platform.NewID(), OwnerID: "alice", Slug: "alpha", PlanName: "TINY", MaxBandwidthGb: 1},
			"beta":  {ID: platform.NewID(), OwnerID: "bob", Slug: "beta", PlanName: "UNMETERED"},
		}}}
	e.setNow(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	return e
}

func (e *env) setNow(t time.Time) { e.now.Store(&t) }

// replica starts an ingress with its module (Start not called: tests flush).
func (e *env) replica(t *testing.T) *replica {
	t.Helper()
	m := ingress.NewMeter()
	r, err := ingress.New(ingress.Config{Meter: m})
	require.NoError(t, err)
	for _, slug := range []string{"alpha", "beta"} {
		require.NoError(t, r.Set(slug, "d-"+slug, e.up))
	}
	svc, err := bandwidth.New(bandwidth.Deps{DB: e.bdb, Meter: m, Projects: e.projects, Notifier: e.mail,
		BytesPerGB: unit, Clock: platform.ClockFunc(func() time.Time { return *e.now.Load() }), FlushEvery: time.Hour})
	require.NoError(t, err)
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		srv.Close()
		r.Close()
		_ = svc.Close(context.Background())
	})
	return &replica{svc: svc, router: r, srv: srv}
}

// push sends a POST of in bytes to slug's host answered with out bytes, and
// returns the status, the body and the body bytes both ways.
func (rp *replica) push(t *testing.T, slug string, in, out int) (int, string, int64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/%d", rp.srv.URL, out), bytes.NewReader(make([]byte, in)))
	require.NoError(t, err)
	req.Host = slug + ".localhost"
	// A connection per request: a 429 answered without reading the body
	// once met a kept-alive connection the client reused as the server
	// dropped it ("unexpected EOF" in CI); reuse is not what this tests.
	req.Close = true
	res, err := rp.srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b), int64(in + len(b))
}

func (e *env) used(t *testing.T, svc *bandwidth.Service, slug string) int64 {
	t.Helper()
	id := e.projects.m[slug].ID
	used, perGB, err := svc.BandwidthThisMonth(context.Background(), []string{id})
	require.NoError(t, err)
	require.Equal(t, int64(unit), perGB)
	return used[id]
}

// flushed flushes rp until its usage of slug reaches want: the last bytes of
// a response can reach the client a moment before the proxy counts them.
func (e *env) flushed(t *testing.T, rp *replica, slug string, want int64) int64 {
	t.Helper()
	var got int64
	platformtest.Eventually(t, 10*time.Second, fmt.Sprintf("%d bytes of %s stored", want, slug), func() bool {
		require.NoError(t, rp.svc.Flush(context.Background()))
		got = e.used(t, rp.svc, slug)
		return got >= want
	})
	return got
}

func within1pct(t *testing.T, want, got int64) {
	t.Helper()
	assert.InDelta(t, float64(want), float64(got), float64(want)/100, "usage %d against %d bytes sent and received", got, want)
}

// TestLimitRefusesUntilTheMonthTurns pushes bytes through two ingresses
// sharing the database past a 1 GB plan (1 GB = 100 kB here): the usage adds
// up, the owner is mailed at 80% and at 100% once each (not again after a
// restart), the hosts answer 429 with a page naming the limit (another
// project is still served), and the month's turn lifts it.
func TestLimitRefusesUntilTheMonthTurns(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, []db.MigrationSet{bandwidth.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		a, b := e.replica(t), e.replica(t)
		var sent int64
		for i := range 9 { // 90 kB over both replicas (a 50, b 40): 90%
			rp := []*replica{a, b}[i%2]
			code, _, n := rp.push(t, "alpha", 4000, 6000)
			require.Equal(t, http.StatusOK, code)
			sent += n
		}
		e.flushed(t, a, "alpha", 50000)
		within1pct(t, sent, e.flushed(t, b, "alpha", sent))
		require.NoError(t, a.svc.Flush(context.Background())) // a checks again: 80% is mailed once
		assert.Equal(t, []string{"alice: Your project alpha used 80% of its monthly bandwidth"}, e.mail.subjects())
		code, _, _ := a.push(t, "alpha", 0, 1)
		require.Equal(t, http.StatusOK, code, "under the limit")
		sent++

		for range 2 {
			_, _, n := a.push(t, "alpha", 5000, 5000)
			sent += n
		}
		within1pct(t, sent, e.flushed(t, a, "alpha", sent))
		code, page, _ := a.push(t, "alpha", 100, 100)
		assert.Equal(t, http.StatusTooManyRequests, code)
		assert.Contains(t, page, "1 GB its plan TINY includes")
		assert.Contains(t, page, "1 December 2026")
		code, _, _ = a.push(t, "beta", 100, 100_000)
		assert.Equal(t, http.StatusOK, code, "a project without a limit is served")
		assert.Equal(t, []string{"alice: Your project alpha used 80% of its monthly bandwidth",
			"alice: Your project alpha used 100% of its monthly bandwidth"}, e.mail.subjects())

		// b refuses it at its next flush, though it carried nothing since.
		require.NoError(t, b.svc.Flush(context.Background()))
		code, _, _ = b.push(t, "alpha", 0, 1)
		assert.Equal(t, http.StatusTooManyRequests, code)

		// A restart (new meter and module on the same database) refuses it
		// from the start and mails nothing again.
		c := e.replica(t)
		require.NoError(t, c.svc.Start(context.Background()))
		code, _, _ = c.push(t, "alpha", 0, 1)
		assert.Equal(t, http.StatusTooManyRequests, code, "refused after a restart")
		require.NoError(t, c.svc.Flush(context.Background()))
		assert.Len(t, e.mail.subjects(), 2, "no notice twice")
		within1pct(t, sent, e.used(t, c.svc, "alpha"))

		// The month turns on the injected clock: served again, counted afresh.
		e.setNow(time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC))
		require.NoError(t, c.svc.Flush(context.Background()))
		code, _, n := c.push(t, "alpha", 10, 20)
		assert.Equal(t, http.StatusOK, code, "the month turned")
		assert.Equal(t, n, e.flushed(t, c, "alpha", n), "December starts from zero")
		assert.Len(t, e.mail.subjects(), 2)
	})
}

// TestPlanChangeLiftsTheRefusal: a bigger plan lifts the refusal at once
// (PlanChanged wakes the running module), a smaller one brings it back.
func TestPlanChangeLiftsTheRefusal(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, []db.MigrationSet{bandwidth.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		a := e.replica(t)
		require.NoError(t, a.svc.Start(context.Background()))
		_, _, n := a.push(t, "alpha", 60_000, 60_000)
		e.flushed(t, a, "alpha", n)
		code, _, _ := a.push(t, "alpha", 0, 1)
		require.Equal(t, http.StatusTooManyRequests, code)

		e.projects.setLimit("alpha", 5)
		a.svc.PlanChanged()
		platformtest.Eventually(t, 10*time.Second, "alpha served on its bigger plan", func() bool {
			code, _, _ := a.push(t, "alpha", 0, 0)
			return code == http.StatusOK
		})
		e.projects.setLimit("alpha", 1)
		a.svc.PlanChanged()
		// Checked again when it next carries bytes.
		platformtest.Eventually(t, 10*time.Second, "alpha refused on its smaller plan", func() bool {
			code, _, _ := a.push(t, "alpha", 0, 1)
			a.svc.PlanChanged() // (not to wait for FlushEvery)
			return code == http.StatusTooManyRequests
		})
	})
}

// TestCountsSurviveAFailedFlushAndClose: a flush that cannot look a project
// up stores nothing and keeps the counts for the next one; Close stores what
// is left.
func TestCountsSurviveAFailedFlushAndClose(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, []db.MigrationSet{bandwidth.Migrations()}, func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		a := e.replica(t)
		require.NoError(t, a.svc.Start(context.Background()))
		_, _, n1 := a.push(t, "alpha", 1000, 2000)
		first := e.flushed(t, a, "alpha", n1)
		// Request bodies are counted before the app answers: no race with
		// the response here.
		_, _, n2 := a.push(t, "alpha", 3000, 0)
		// gamma is looked up (alpha is cached), and the lookup fails.
		require.NoError(t, a.router.Set("gamma", "d-gamma", e.up))
		a.push(t, "gamma", 10, 0)
		e.projects.mu.Lock()
		e.projects.fail = true
		e.projects.mu.Unlock()
		require.ErrorContains(t, a.svc.Flush(context.Background()), "connection refused")
		assert.Equal(t, first, e.used(t, a.svc, "alpha"), "nothing stored")

		_, _, n3 := a.push(t, "alpha", 500, 0)
		require.NoError(t, a.svc.Close(context.Background()))
		assert.Equal(t, first+n2+n3, e.used(t, a.svc, "alpha"), "kept after the failure, stored at Close")
	})
}

func TestDepsAreChecked(t *testing.T) {
	t.Parallel()
	_, err := bandwidth.New(bandwidth.Deps{Meter: ingress.NewMeter()})
	require.Error(t, err)
	for _, want := range []string{"DB is required", "Projects is required", "Notifier is required"} {
		assert.ErrorContains(t, err, want)
	}
}
