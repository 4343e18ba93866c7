package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
)

// BenchmarkHostDeathToAnswer measures, on two worker hosts of the
// process runtime sharing one Postgres and one Temporal (the harness of
// TestTwoHostsServeEveryAppE2E):
//   - a route change reaching the other ingress: from the owning host's
//     ingress first serving a new app to the other host's ingress serving
//     it (3 new apps);
//   - a host's death (its process stopped: heartbeat, apps, ingress) to
//     each of its apps answering through the other host's ingress.
//
// One round (about a minute) whatever b.N; it reports the medians as
// s-route-change and s-death-to-answer and logs every figure
// (docs/SCALING.md, "What it costs"):
//
//	go test -run '^$' -bench BenchmarkHostDeathToAnswer -benchtime 1x ./examples/server/
//
// The heartbeat is 1 s and the down-after 5 s here (the defaults are 10 s
// and 30 s); the moved apps are built again (no registry).
func BenchmarkHostDeathToAnswer(b *testing.B) {
	for range b.N {
		measureHostDeathToAnswer(b)
	}
}

func measureHostDeathToAnswer(t *testing.B) {
	const heartbeat, downAfter = time.Second, 5 * time.Second
	w1, w2, api := startTwoHosts(t, heartbeat, downAfter, nil)
	ctx := context.Background()
	if _, err := w2.App.Hosts.SetCordoned(ctx, w2.App.localHost.ID, true, "measure"); err != nil {
		t.Fatal(err)
	}
	alice := api.signup(t, "alice@example.com")
	var slugs []string
	var reach []time.Duration
	for i := range 3 {
		name := fmt.Sprintf("app%d", i)
		_, bare := newRepo(t, goApp(name))
		var p struct{ ID, Slug string }
		api.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": name, "repoUrl": "file://" + bare, "framework": "go", "port": 8080}, &p)
		api.doJSON(t, http.StatusCreated, "POST", "/deployments", alice, map[string]any{"projectId": p.ID}, nil)
		var local time.Time
		platformtest.Eventually(t, 3*time.Minute, name+" through both ingresses", func() bool {
			if local.IsZero() && tryApp(w1, "", p.Slug) == "version "+name {
				local = time.Now()
			}
			return !local.IsZero() && tryApp(w2, "", p.Slug) == "version "+name
		})
		reach = append(reach, time.Since(local))
		slugs = append(slugs, p.Slug)
	}
	if _, err := w2.App.Hosts.SetCordoned(ctx, w2.App.localHost.ID, false, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * heartbeat) // the uncordon reaches w2's worker

	died := time.Now()
	w1.stop()
	answered := map[string]time.Duration{}
	platformtest.Eventually(t, 5*time.Minute, "every app of host one through host two", func() bool {
		for i, slug := range slugs {
			if _, ok := answered[slug]; !ok && tryApp(w2, "", slug) == fmt.Sprintf("version app%d", i) {
				answered[slug] = time.Since(died)
			}
		}
		return len(answered) == len(slugs)
	})
	var took []time.Duration
	for _, d := range answered {
		took = append(took, d.Round(10*time.Millisecond))
	}
	slices.Sort(took)
	for i := range reach {
		reach[i] = reach[i].Round(time.Millisecond)
	}
	slices.Sort(reach)
	t.ReportMetric(reach[len(reach)/2].Seconds(), "s-route-change")
	t.ReportMetric(took[len(took)/2].Seconds(), "s-death-to-answer")
	t.Logf("route change to the other ingress: %v (reloaded when Postgres announces it; 0 is the same poll as host one's first answer)", reach)
	t.Logf("host death to its %d apps answering through the other ingress: %v (heartbeat %v, down after %v; apps built again)",
		len(slugs), took, heartbeat, downAfter)
}
