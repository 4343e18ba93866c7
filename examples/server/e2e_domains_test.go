package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/keelson-dev/keelson/projects/domains/dnstest"
)

// TestCustomDomainsE2E: the whole server with a real DNS server
// (pebble-challtestsrv): a FREE project is refused 403 naming its plan; on a
// plan with customDomains a domain stays pending with the reason until its
// TXT record is right and goes active once its CNAME points at the app host;
// another account's hostname answers 409 until that account proves the TXT
// record, then moves (the old owner mailed); a CNAME moved away deactivates
// it at the next periodic check; deleting the project deletes its domains.
func TestCustomDomainsE2E(t *testing.T) {
	dns := dnstest.Start(t)
	eachDB(t, func(t *testing.T, dbURL string) {
		ts := startServer(t, dbURL, func(c *Config) {
			c.DNSResolvers = []string{dns.DNS}
			c.AppsDomain = "apps.example.test"
			c.DomainCheckInterval = time.Nanosecond // every CheckDue checks every domain
		})
		host := "www." + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + ".example.com"
		admin := ts.signup(t, "admin@example.com")
		alice := ts.signup(t, "alice@example.com")
		bob := ts.signup(t, "bob@example.com")
		_, bare := newRepo(t, map[string]string{"index.html": "<h1>domains</h1>\n"})
		var pa, pb webhookProject
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", alice, map[string]any{
			"name": "shop", "repoUrl": "file://" + bare, "framework": "static", "port": 8080}, &pa)
		ts.doJSON(t, http.StatusCreated, "POST", "/projects", bob, map[string]any{
			"name": "blog", "repoUrl": "file://" + bare, "framework": "static", "port": 8080}, &pb)

		status, body, _ := ts.do(t, "POST", "/projects/"+pa.ID+"/domains", alice, map[string]any{"hostname": host})
		if status != http.StatusForbidden || !strings.Contains(string(body), `plan \"free\" does not include custom domains`) {
			t.Fatalf("free plan: %d %s", status, body)
		}
		var plans []struct{ ID, Name string }
		ts.doJSON(t, http.StatusOK, "GET", "/plans", "", nil, &plans)
		starter := slices.IndexFunc(plans, func(p struct{ ID, Name string }) bool { return p.Name == "starter" })
		if starter < 0 {
			t.Fatalf("no starter plan in %+v", plans)
		}
		for _, who := range []string{alice, bob} {
			ts.doJSON(t, http.StatusNoContent, "PUT", "/plans/"+plans[starter].ID+"/accounts/"+ownerOf(t, ts, who), admin, nil, nil)
		}

		var d domains.Domain
		ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+pa.ID+"/domains", alice, map[string]any{"hostname": strings.ToUpper(host) + "."}, &d)
		if d.Hostname != host || d.Status != "pending" || len(d.Records) != 2 || d.Records[1].Value != pa.Slug+".apps.example.test" {
			t.Fatalf("created: %+v", d)
		}
		verify := func(token, project, id string) domains.Domain {
			var v domains.Domain
			ts.doJSON(t, http.StatusOK, "POST", "/projects/"+project+"/domains/"+id+"/verify", token, nil, &v)
			return v
		}
		if v := verify(alice, pa.ID, d.ID); v.Status != "pending" || !strings.Contains(v.LastError, "no TXT record at _keelson-challenge."+host) {
			t.Fatalf("without records: %+v", v)
		}
		dns.SetTXT(d.Records[0].Name, d.Records[0].Value)
		dns.SetCNAME(host, d.Records[1].Value)
		if v := verify(alice, pa.ID, d.ID); v.Status != "active" || v.LastError != "" {
			t.Fatalf("with records: %+v", v)
		}
		ctx := context.Background()
		if got, err := ts.App.Domains.ProjectForHost(ctx, host); err != nil || got != pa.ID {
			t.Fatalf("ProjectForHost: %q %v", got, err)
		}

		// A CNAME moved away deactivates it at the next check, and the owner is mailed.
		dns.SetCNAME(host, "parking.example.net")
		if _, err := ts.App.Domains.CheckDue(ctx); err != nil {
			t.Fatal(err)
		}
		var got domains.Domain
		ts.doJSON(t, http.StatusOK, "GET", "/projects/"+pa.ID+"/domains/"+d.ID, alice, nil, &got)
		if got.Status != "error" || !strings.Contains(got.LastError, "points at parking.example.net") {
			t.Fatalf("after the CNAME moved: %+v", got)
		}
		waitMail(t, ts, "alice@example.com", "Your custom domain "+host+" is no longer served")
		dns.SetCNAME(host, d.Records[1].Value)

		// Bob: 409 with his own token until he proves it; then it moves.
		status, body, _ = ts.do(t, "POST", "/projects/"+pb.ID+"/domains", bob, map[string]any{"hostname": host})
		i := strings.Index(string(body), "with value keelson-verify=")
		if status != http.StatusConflict || i < 0 {
			t.Fatalf("bob's claim: %d %s", status, body)
		}
		tok := string(body)[i+len("with value "):]
		tok = tok[:strings.IndexAny(tok, ", ")]
		dns.SetTXT(d.Records[0].Name, tok)
		var moved domains.Domain
		ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+pb.ID+"/domains", bob, map[string]any{"hostname": host}, &moved)
		if moved.Status != "verified" || moved.ProjectID != pb.ID {
			t.Fatalf("moved: %+v", moved)
		}
		if status, _, _ := ts.do(t, "GET", "/projects/"+pa.ID+"/domains/"+d.ID, alice, nil); status != http.StatusNotFound {
			t.Fatalf("alice still has it: %d", status)
		}
		waitMail(t, ts, "alice@example.com", "Your custom domain "+host+" was moved to another account")
		// Alice cannot see or touch bob's domain.
		if status, _, _ := ts.do(t, "GET", "/projects/"+pb.ID+"/domains/"+moved.ID, alice, nil); status != http.StatusNotFound {
			t.Fatalf("alice reads bob's domain: %d", status)
		}

		// Deleting bob's project deletes its domains.
		ts.doJSON(t, http.StatusAccepted, "DELETE", "/projects/"+pb.ID, bob, nil, nil)
		platformtest.Eventually(t, time.Minute, "bob's project deleted", func() bool {
			var s struct{ Status string }
			ts.doJSON(t, http.StatusOK, "GET", "/projects/"+pb.ID+"/delete-status", bob, nil, &s)
			return s.Status == "DELETED"
		})
		var n int
		if err := ts.App.DB.NewRaw("SELECT count(*) FROM custom_domains WHERE project_id = ?", pb.ID).Scan(ctx, &n); err != nil || n != 0 {
			t.Fatalf("domains left after the project's deletion: %d %v", n, err)
		}
		// The hostname is free again.
		ts.doJSON(t, http.StatusCreated, "POST", "/projects/"+pa.ID+"/domains", alice, map[string]any{"hostname": host}, nil)
	})
}

// waitMail waits for the log mailer (KEELSON_SMTP_URL unset) to write a mail
// to addr with subject.
func waitMail(t *testing.T, ts *testServer, addr, subject string) {
	t.Helper()
	platformtest.Eventually(t, 30*time.Second, "mail to "+addr+": "+subject, func() bool {
		for _, l := range strings.Split(ts.Logs.String(), "\n") {
			if strings.Contains(l, `"to":"`+addr+`"`) && strings.Contains(l, subject) {
				return true
			}
		}
		return false
	})
}
