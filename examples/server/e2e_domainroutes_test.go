package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/keelson-dev/keelson/projects/domains/dnstest"
)

// TestCustomDomainRoutesE2E: the whole server, a real DNS server
// (pebble-challtestsrv) and the app deployed on the process runtime. A
// domain that turns active answers with the app through the ingress at once
// (no new deployment); the next deployment's DNS step names it in its log and
// moves it with the app host; a CNAME moved away stops it at the next
// re-check and the records' return serves it again; deleting the domain, and
// then the project, unroutes it at once.
func TestCustomDomainRoutesE2E(t *testing.T) {
	dns := dnstest.Start(t)
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) {
			c.DNSResolvers = []string{dns.DNS}
			c.AppsDomain = "apps.example.test"
			c.DomainCheckInterval = time.Nanosecond
		})
		host := "www." + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ".example.org"
		admin := ts.signup(t, "admin@example.com")
		alice := ts.signup(t, "alice@example.com")
		starterPlan(t, ts, admin, alice)
		work, bare := newRepo(t, map[string]string{"index.html": "<h1>v1</h1>\n"})
		var p webhookProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "shop", "repoUrl": "file://" + bare, "framework": "static", "port": 8080}, &p)
		deployLive(t, ts, alice, p.ID)
		wantServed(t, ts, host, 0, "")

		var d domains.Domain
		ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+p.ID+"/domains", alice, map[string]any{"hostname": host}, &d)
		dns.SetTXT(d.Records[0].Name, d.Records[0].Value)
		dns.SetCNAME(host, d.Records[1].Value)
		verify := func(id string) domains.Domain {
			var v domains.Domain
			ts.doJSON(t, http.StatusOK, "POST", "/projects/"+p.ID+"/domains/"+id+"/verify", alice, nil, &v)
			return v
		}
		if v := verify(d.ID); v.Status != "active" {
			t.Fatalf("verify: %+v", v)
		}
		wantServed(t, ts, host, http.StatusOK, "<h1>v1</h1>")
		wantServed(t, ts, strings.ToUpper(host)+".:443", http.StatusOK, "<h1>v1</h1>")

		// The next deployment routes both hostnames in its DNS step.
		commit(t, work, bare, "main", map[string]string{"index.html": "<h1>v2</h1>\n"}, "second")
		id := deployLive(t, ts, alice, p.ID)
		log := logText(t, ts, alice, id)
		for _, h := range []string{p.Slug + ".apps.example.test", host} {
			if !strings.Contains(log, "serving "+h+" (certificate: HTTPS is off)") {
				t.Fatalf("the DNS step's log does not name %s:\n%s", h, log)
			}
		}
		wantServed(t, ts, host, http.StatusOK, "<h1>v2</h1>")

		// The re-check deactivates it when the CNAME moves away, and serves it again when it is back.
		ctx := context.Background()
		dns.SetCNAME(host, "parking.example.net")
		if _, err := ts.App.Domains.CheckDue(ctx); err != nil {
			t.Fatal(err)
		}
		wantServed(t, ts, host, http.StatusNotFound, "no app is served")
		dns.SetCNAME(host, d.Records[1].Value)
		if _, err := ts.App.Domains.CheckDue(ctx); err != nil {
			t.Fatal(err)
		}
		wantServed(t, ts, host, http.StatusOK, "<h1>v2</h1>")

		// Deleting the domain unroutes it at once; added and proven again, it is back.
		ts.doJSON(t, http.StatusNoContent, "DELETE", "/projects/"+p.ID+"/domains/"+d.ID, alice, nil, nil)
		wantServed(t, ts, host, http.StatusNotFound, "no app is served")
		ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+p.ID+"/domains", alice, map[string]any{"hostname": host}, &d)
		dns.SetTXT(d.Records[0].Name, d.Records[0].Value)
		if v := verify(d.ID); v.Status != "active" {
			t.Fatalf("verify again: %+v", v)
		}
		wantServed(t, ts, host, http.StatusOK, "<h1>v2</h1>")

		// Deleting the project unroutes it at once: its domains go first.
		ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+p.ID, alice, nil, nil)
		platformtest.Eventually(t, time.Minute, "the hostname unrouted", func() bool {
			code, _ := getVia(t, ts, host)
			return code == http.StatusNotFound
		})
		if hs := ts.App.hosts.router.Hosts(p.Slug); len(hs) != 0 {
			t.Fatalf("the deleted project's hostnames are still in the ingress: %v", hs)
		}
	})
}

// starterPlan puts each account of tokens on the starter plan (customDomains).
func starterPlan(t *testing.T, ts *testServer, admin string, tokens ...string) {
	t.Helper()
	var plans []struct{ ID, Name string }
	ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &plans)
	i := slices.IndexFunc(plans, func(p struct{ ID, Name string }) bool { return p.Name == "starter" })
	if i < 0 {
		t.Fatalf("no starter plan in %+v", plans)
	}
	for _, who := range tokens {
		ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+plans[i].ID+"/accounts/"+ownerOf(t, ts, who), admin, nil, nil)
	}
}

// getVia GETs / through the ingress with host as the Host header.
func getVia(t *testing.T, ts *testServer, host string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+ts.Ingress+"/", nil)
	req.Host = host
	res, err := ts.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// wantServed checks the ingress's answer for host (status 0: anything but 200).
func wantServed(t *testing.T, ts *testServer, host string, status int, body string) {
	t.Helper()
	code, got := getVia(t, ts, host)
	if (status == 0 && code == http.StatusOK) || (status != 0 && code != status) || !strings.Contains(got, body) {
		t.Fatalf("GET %s through the ingress: %d %q, want %d with %q", host, code, got, status, body)
	}
}
