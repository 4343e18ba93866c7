package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/deployments/ingress"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// TestBandwidthLimit pushes bytes through the server's ingress to a real app
// past the maxBandwidthGb of the project's plan, free (10 GB, one GB being
// 10 kB here: the test hook Config.bandwidthBytesPerGB). GET /usage counts
// them within 1%, the owner is mailed at 80% and at 100% once each, the
// project's host answers 429 with a page naming the plan's limit while
// another account's project is served. The owner choosing a bigger plan for
// the project lifts it at once, going back brings it back, and an admin
// raising the plan's bandwidth lifts it again.
func TestBandwidthLimit(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) { c.bandwidthBytesPerGB = 10_000 })
		admin := ts.signup(t, "admin@example.com")
		alice, bob := ts.signup(t, "alice@example.com"), ts.signup(t, "bob@example.com")
		router := ts.App.Ingress.(*ingress.Router)
		app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			var n int
			_, _ = fmt.Sscanf(r.URL.Path, "/%d", &n)
			_, _ = w.Write(bytes.Repeat([]byte("x"), n))
		}))
		defer app.Close()
		project := func(token, name string) (slug, id string) {
			var p e2eProject
			ts.doJSON(t, http.StatusCreated, "POST", "/projects", token, map[string]any{
				"name": name, "repoUrl": "https://github.com/acme/" + name, "framework": "node", "port": 3000}, &p)
			if err := router.Set(p.Slug, "d-"+p.Slug, strings.TrimPrefix(app.URL, "http://")); err != nil {
				t.Fatal(err)
			}
			return p.Slug, p.ID
		}
		site, siteID := project(alice, "site")
		other, _ := project(bob, "other")
		// alice's account is on starter (100 GB), her project on free.
		var ps []struct{ ID, Name string }
		ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &ps)
		planID := map[string]string{}
		for _, p := range ps {
			planID[p.Name] = p.ID
		}
		var me struct{ ID string }
		ts.doJSON(t, http.StatusOK, "GET", "/auth/me", alice, nil, &me)
		ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+planID["starter"]+"/accounts/"+me.ID, admin, nil, nil)
		choose := func(plan string) {
			ts.doJSON(t, http.StatusOK, "PATCH", "/projects/"+siteID+"/settings", alice,
				map[string]any{"region": "local", "planName": plan, "envVars": []any{}}, nil)
		}
		choose("free")
		var sent int64
		push := func(slug string, in, out int) (int, string) {
			req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/%d", ts.Ingress, out), bytes.NewReader(make([]byte, in)))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = slug + ".localhost"
			res, err := ts.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode == http.StatusOK && slug == site {
				sent += int64(in + len(b))
			}
			return res.StatusCode, string(b)
		}
		type usage struct {
			Plan      struct{ MaxBandwidthGb int }
			Bandwidth []struct {
				Slug, PlanName        string
				UsedBytes, LimitBytes int64
			}
		}
		// stored flushes until alice's usage shows every byte sent (a
		// response's last bytes can arrive a moment before they are counted).
		stored := func() (used int64) {
			platformtest.Eventually(t, 30*time.Second, fmt.Sprintf("%d bytes in GET /usage", sent), func() bool {
				if err := ts.App.Bandwidth.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				var u usage
				ts.doJSON(t, http.StatusOK, "GET", "/usage", alice, nil, &u)
				if len(u.Bandwidth) != 1 || u.Bandwidth[0].Slug != site || u.Bandwidth[0].LimitBytes != 100_000 || u.Plan.MaxBandwidthGb != 100 {
					t.Fatalf("usage: %+v", u)
				}
				used = u.Bandwidth[0].UsedBytes
				return used >= sent
			})
			if d := used - sent; d < 0 || d > sent/100 {
				t.Fatalf("usage %d bytes, %d sent and received: not within 1%%", used, sent)
			}
			return used
		}
		mails := func(subject string) int { return strings.Count(ts.Logs.String(), subject) }
		const at80, at100 = "Your project site used 80% of its monthly bandwidth", "Your project site used 100% of its monthly bandwidth"

		for range 9 { // 90 kB of 100 kB
			if code, _ := push(site, 4000, 6000); code != http.StatusOK {
				t.Fatalf("status %d under the limit", code)
			}
		}
		stored()
		stored() // checked twice: mailed once
		platformtest.Eventually(t, 10*time.Second, "the 80% notice", func() bool { return mails(at80) == 1 })
		push(site, 6000, 6000)
		stored()
		code, page := push(site, 10, 10)
		if code != http.StatusTooManyRequests || !strings.Contains(page, "the 10 GB its plan free includes") {
			t.Fatalf("past the limit: %d %q", code, page)
		}
		if code, _ := push(other, 10, 100_000); code != http.StatusOK {
			t.Fatalf("another account's project: %d", code)
		}
		platformtest.Eventually(t, 10*time.Second, "the 100% notice", func() bool { return mails(at100) == 1 })
		if n := mails(at80); n != 1 {
			t.Fatalf("the 80%% notice was mailed %d times", n)
		}

		served := func(what string, want int) {
			platformtest.Eventually(t, 30*time.Second, what, func() bool {
				code, _ := push(site, 0, 1) // carries a byte: checked again at the next flush
				if err := ts.App.Bandwidth.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				return code == want
			})
		}
		limit := func() int64 {
			var u usage
			ts.doJSON(t, http.StatusOK, "GET", "/usage", alice, nil, &u)
			return u.Bandwidth[0].LimitBytes
		}
		// The owner chooses the bigger plan for the project: served at once.
		choose("starter")
		served("the project served on starter", http.StatusOK)
		if l := limit(); l != 1_000_000 {
			t.Fatalf("limit on starter: %d", l)
		}
		choose("free")
		served("the project refused on free again", http.StatusTooManyRequests)
		// An admin gives the free plan more bandwidth: served again.
		ts.doJSON(t, http.StatusOK, "PATCH", "/plans/"+planID["free"], admin, map[string]any{"maxBandwidthGb": 1000}, nil)
		served("the project served on the bigger free plan", http.StatusOK)
		if l := limit(); l != 10_000_000 {
			t.Fatalf("limit after the plan change: %d", l)
		}
		if n := mails(at100); n != 1 {
			t.Fatalf("the 100%% notice was mailed %d times", n)
		}
	})
}
