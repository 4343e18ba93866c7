package domains_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/platformtest"
	"github.com/keelson-dev/keelson/projects/domains"
	"github.com/uptrace/bun"
)

// A domain goes pending -> verified -> active as its records appear; a
// missing or wrong TXT record keeps it pending and says what to create.
func TestVerifyStepsWithReasons(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		p := e.projects.add(aliceID, "shop", "hobby", true)
		d, _ := e.add(t, asAlice, p, "www.example.com", 201)
		txt, cname := record(t, d, "TXT"), record(t, d, "CNAME")
		if d.Status != domains.StatusPending || d.CertificateStatus != "none" || d.CertificateExpiresAt != nil ||
			txt.Name != "_keelson-challenge.www.example.com" || !strings.HasPrefix(txt.Value, "keelson-verify=") ||
			cname.Name != "www.example.com" || cname.Value != "shop."+appsDomain || len(d.Records) != 2 {
			t.Fatalf("created: %+v", d)
		}

		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusPending,
			"no TXT record at _keelson-challenge.www.example.com; create it with value "+txt.Value)
		e.dns.SetTXT(txt.Name, "keelson-verify=someone-elses")
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusPending,
			`the TXT record at _keelson-challenge.www.example.com holds "keelson-verify=someone-elses", not `+txt.Value)
		if got := e.get(t, asAlice, p, d.ID); got.Status != domains.StatusPending || got.LastError == "" {
			t.Fatalf("stored: %+v", got)
		}

		e.dns.SetTXT(txt.Name, txt.Value) // next to the wrong one
		v := e.verify(t, asAlice, p, d.ID)
		wantStatus(t, v, domains.StatusVerified, "no CNAME record at www.example.com; create a CNAME record at www.example.com with value shop."+appsDomain)
		if v.VerifiedAt == nil {
			t.Fatal("verifiedAt not set")
		}
		e.dns.SetCNAME("www.example.com", "elsewhere.example.net")
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusVerified,
			"CNAME at www.example.com points at elsewhere.example.net, not shop."+appsDomain)
		if hs, _ := e.svc.ActiveHostnames(context.Background(), p); len(hs) != 0 {
			t.Fatalf("active before routing: %v", hs)
		}

		e.wantChanges(t)
		e.dns.SetCNAME("www.example.com", cname.Value)
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusActive, "")
		e.wantChanges(t, p)
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusActive, "") // no change, no call
		e.wantChanges(t, p)
		ctx := context.Background()
		if hs, err := e.svc.ActiveHostnames(ctx, p); err != nil || !slices.Equal(hs, []string{"www.example.com"}) {
			t.Fatalf("ActiveHostnames: %v %v", hs, err)
		}
		for _, h := range []string{"www.example.com", "WWW.Example.com.", "www.example.com:443"} {
			if got, err := e.svc.ProjectForHost(ctx, h); err != nil || got != p {
				t.Fatalf("ProjectForHost(%q): %q %v", h, got, err)
			}
		}
		if _, err := e.svc.ProjectForHost(ctx, "other.example.com"); !errIsNotFound(err) {
			t.Fatalf("ProjectForHost(unknown): %v", err)
		}
		if all, err := e.svc.ActiveRoutes(ctx); err != nil || len(all) != 1 || all["www.example.com"] != "shop" {
			t.Fatalf("ActiveRoutes: %v %v", all, err)
		}

		if resp := e.api.Delete("/projects/"+p+"/domains/"+d.ID, asAlice); resp.Code != 204 {
			t.Fatalf("delete: %d %s", resp.Code, resp.Body)
		}
		if resp := e.api.Get("/projects/"+p+"/domains/"+d.ID, asAlice); resp.Code != 404 {
			t.Fatalf("get after delete: %d", resp.Code)
		}
		e.wantChanges(t, p, p)
		if _, err := e.svc.ProjectForHost(ctx, "www.example.com"); !errIsNotFound(err) {
			t.Fatalf("ProjectForHost after delete: %v", err)
		}
		if all, err := e.svc.ActiveRoutes(ctx); err != nil || len(all) != 0 {
			t.Fatalf("ActiveRoutes after delete: %v %v", all, err)
		}
	})
}

func errIsNotFound(err error) bool {
	pe, ok := err.(*platform.Error)
	return ok && pe.Status == 404
}

// Apex domains route with A/AAAA records to the ingress addresses.
func TestApexDomainRoutesByAddress(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		p := e.projects.add(aliceID, "shop", "hobby", true)
		d, _ := e.add(t, asAlice, p, "example.org", 201)
		if a, aaaa := record(t, d, "A"), record(t, d, "AAAA"); a.Value != "203.0.113.7" || aaaa.Value != "2001:db8::7" || len(d.Records) != 3 {
			t.Fatalf("apex records: %+v", d.Records)
		}
		e.dns.SetTXT(record(t, d, "TXT").Name, record(t, d, "TXT").Value)
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusVerified, "no A/AAAA record at example.org")
		e.dns.AddA("example.org", "198.51.100.9")
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusVerified, "example.org resolves to 198.51.100.9, which is not Keelson's ingress")
		e.dns.ClearA("example.org")
		e.dns.AddA("example.org", "203.0.113.7")
		e.dns.AddAAAA("example.org", "2001:db8::7")
		wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusActive, "")
	})
}

// Without ingress addresses, an apex domain is told to use an ALIAS, and
// routes when it resolves to the app host's own addresses.
func TestApexWithoutIngressAddresses(t *testing.T) {
	t.Parallel()
	e := setup(t, dbtest.SQLite(t, sets()...), func(d *domains.Deps) { d.IngressIPs = nil })
	p := e.projects.add(aliceID, "shop", "hobby", true)
	d, _ := e.add(t, asAlice, p, "example.org", 201)
	if a := record(t, d, "ALIAS"); a.Value != "shop."+appsDomain || len(d.Records) != 2 {
		t.Fatalf("apex records: %+v", d.Records)
	}
	e.dns.SetTXT(record(t, d, "TXT").Name, record(t, d, "TXT").Value)
	e.dns.AddA("shop."+appsDomain, "192.0.2.44")
	e.dns.AddA("example.org", "192.0.2.44") // as CNAME flattening answers
	wantStatus(t, e.verify(t, asAlice, p, d.ID), domains.StatusActive, "")
}

// Hostnames are normalised: case, IDNA, trailing dot and port.
func TestHostnamesNormalised(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb, func(d *domains.Deps) { d.MaxPerProject = 10 })
		p := e.projects.add(aliceID, "shop", "hobby", true)
		d, _ := e.add(t, asAlice, p, "  Bücher.Example.COM. ", 201)
		if d.Hostname != "xn--bcher-kva.example.com" || d.UnicodeHostname != "bücher.example.com" ||
			record(t, d, "TXT").Name != "_keelson-challenge.xn--bcher-kva.example.com" {
			t.Fatalf("IDNA: %+v", d)
		}
		// The same name in other spellings is the same hostname.
		for _, h := range []string{"xn--bcher-kva.example.com", "BÜCHER.example.com", "bücher.example.com:8443"} {
			_, body := e.add(t, asAlice, p, h, 409)
			if !strings.Contains(body, "already a domain of this project") {
				t.Fatalf("%q: %s", h, body)
			}
		}
		d2, _ := e.add(t, asAlice, p, "WWW.Example.NET:443", 201)
		if d2.Hostname != "www.example.net" || d2.UnicodeHostname != "" {
			t.Fatalf("port/case: %+v", d2)
		}
	})
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Example.COM": "example.com", "example.com.": "example.com", "a.example.com:80": "a.example.com",
		"münchen.de": "xn--mnchen-3ya.de", "ÉCOLE.fr": "xn--cole-9oa.fr",
	} {
		if got, err := domains.Normalize(in); err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// Forbidden hostnames answer 400 naming the rule; nothing is stored.
func TestForbiddenHostnames(t *testing.T) {
	t.Parallel()
	e := setup(t, dbtest.SQLite(t, sets()...))
	p := e.projects.add(aliceID, "shop", "hobby", true)
	for h, rule := range map[string]string{
		appsDomain:                       "under the apps domain",
		"other." + appsDomain:            "under the apps domain",
		"A.B.Apps.Keelson.Test.":         "under the apps domain",
		"api.keelson.test":               "host of Keelson's API",
		"console.keelson.test":           "host of Keelson's web app",
		"192.0.2.1":                      "IP addresses are not accepted",
		"192.0.2.1:80":                   "IP addresses are not accepted",
		"[2001:db8::1]":                  "IP addresses are not accepted",
		"2001:db8::1":                    "IP addresses are not accepted",
		"1.2.3":                          "numeric label",
		"localhost":                      "single-label names",
		"intranet.":                      "single-label names",
		"co.uk":                          "public suffix",
		"github.io":                      "public suffix",
		"https://www.example.com/":       "host name only",
		"exa mple.com":                   "host name only",
		"a..example.com":                 "empty label",
		"-bad.example.com":               "not a valid domain name",
		"under_score.example.com":        "not a valid domain name",
		"*.example.com":                  "not a valid domain name",
		strings.Repeat("a", 64) + ".com": "longer than 63",
		"www.example.com:99999":          "not a valid port",
	} {
		_, body := e.add(t, asAlice, p, h, 400)
		if !strings.Contains(body, rule) {
			t.Errorf("%q: %s; want the rule %q", h, body, rule)
		}
	}
	if ds := listAll(t, e, asAlice, p); len(ds) != 0 {
		t.Fatalf("stored after refusals: %+v", ds)
	}
}

func listAll(t *testing.T, e *env, who, project string) []*domains.Domain {
	t.Helper()
	var all []*domains.Domain
	cursor := ""
	for {
		resp := e.api.Get("/projects/"+project+"/domains?limit=2&cursor="+cursor, who)
		if resp.Code != 200 {
			t.Fatalf("list: %d %s", resp.Code, resp.Body)
		}
		all = append(all, decode[[]*domains.Domain](t, resp.Body.Bytes())...)
		if cursor = resp.Header().Get("X-Next-Cursor"); cursor == "" {
			return all
		}
	}
}

// The plan gates adding domains (403 naming the plan), a setting caps them.
func TestPlanAndCap(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		free := e.projects.add(aliceID, "freebie", "free", false)
		_, body := e.add(t, asAlice, free, "www.example.com", 403)
		if !strings.Contains(body, `the plan \"free\" does not include custom domains`) {
			t.Fatalf("403: %s", body)
		}
		p := e.projects.add(aliceID, "shop", "hobby", true)
		var made []string
		for _, h := range []string{"a.example.com", "b.example.com", "c.example.com"} {
			d, _ := e.add(t, asAlice, p, h, 201)
			made = append(made, d.Hostname)
		}
		_, body = e.add(t, asAlice, p, "d.example.com", 403)
		if !strings.Contains(body, "at most 3 custom domains") {
			t.Fatalf("cap: %s", body)
		}
		var listed []string
		for _, d := range listAll(t, e, asAlice, p) {
			listed = append(listed, d.Hostname)
		}
		slices.Reverse(made) // newest first
		if !slices.Equal(listed, made) {
			t.Fatalf("list pages: %v, want %v", listed, made)
		}
	})
}

// Another account's project and domain ids answer 404 on every route.
func TestOtherAccountsAreNotFound(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		pa := e.projects.add(aliceID, "shop", "hobby", true)
		pb := e.projects.add(bobID, "blog", "hobby", true)
		d, _ := e.add(t, asAlice, pa, "www.example.com", 201)
		for _, c := range []struct{ method, path string }{
			{"GET", "/projects/" + pa + "/domains"},
			{"POST", "/projects/" + pa + "/domains"},
			{"GET", "/projects/" + pa + "/domains/" + d.ID},
			{"POST", "/projects/" + pa + "/domains/" + d.ID + "/verify"},
			{"DELETE", "/projects/" + pa + "/domains/" + d.ID},
			// Bob's own project with Alice's domain id.
			{"GET", "/projects/" + pb + "/domains/" + d.ID},
			{"POST", "/projects/" + pb + "/domains/" + d.ID + "/verify"},
			{"DELETE", "/projects/" + pb + "/domains/" + d.ID},
			{"GET", "/projects/not-a-uuid/domains"},
			{"GET", "/projects/" + pb + "/domains/not-a-uuid"},
		} {
			resp := e.api.Do(c.method, c.path, asBob, map[string]any{"hostname": "x.example.com"})
			if resp.Code != 404 {
				t.Errorf("%s %s as bob: %d %s", c.method, c.path, resp.Code, resp.Body)
			}
		}
		if resp := e.api.Get("/projects/" + pa + "/domains"); resp.Code != 401 {
			t.Errorf("no token: %d", resp.Code)
		}
		if got := e.get(t, asAlice, pa, d.ID); got.Hostname != "www.example.com" {
			t.Fatalf("alice's domain changed: %+v", got)
		}
	})
}

// Another account's hostname answers 409 with a token of the caller's own
// until a TXT record holds it; then the hostname moves and its old owner is told.
func TestClaimMovesHostnameWithProof(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		pa := e.projects.add(aliceID, "shop", "hobby", true)
		pb := e.projects.add(bobID, "blog", "hobby", true)
		d, _ := e.add(t, asAlice, pa, "www.example.com", 201)
		e.activate(t, asAlice, pa, d)

		_, body := e.add(t, asBob, pb, "WWW.example.com", 409)
		tok := claimToken(t, body)
		if tok == record(t, d, "TXT").Value || !strings.Contains(body, "create a TXT record at _keelson-challenge.www.example.com with value "+tok) {
			t.Fatalf("409: %s", body)
		}
		_, again := e.add(t, asBob, pb, "www.example.com", 409) // still unproven: the same token
		if claimToken(t, again) != tok {
			t.Fatalf("token changed: %s", again)
		}
		if got := e.get(t, asAlice, pa, d.ID); got.Status != domains.StatusActive {
			t.Fatalf("alice's domain after bob's attempts: %+v", got)
		}
		if n := len(e.mail.to(aliceID)); n != 0 {
			t.Fatalf("alice mailed before any proof: %d", n)
		}

		e.dns.SetTXT("_keelson-challenge.www.example.com", tok) // next to alice's
		moved, _ := e.add(t, asBob, pb, "www.example.com", 201)
		// Proven by the TXT record; the CNAME still points at alice's app host.
		wantStatus(t, moved, domains.StatusVerified, "CNAME at www.example.com points at shop."+appsDomain+", not blog."+appsDomain)
		if record(t, moved, "TXT").Value != tok || moved.ProjectID != pb {
			t.Fatalf("moved: %+v", moved)
		}
		if resp := e.api.Get("/projects/"+pa+"/domains/"+d.ID, asAlice); resp.Code != 404 {
			t.Fatalf("alice still has it: %d", resp.Code)
		}
		e.wantChanges(t, pa, pa) // activated, then moved away
		if got, err := e.svc.ProjectForHost(context.Background(), "www.example.com"); !errIsNotFound(err) {
			t.Fatalf("still routed to %q (%v) before bob's CNAME", got, err)
		}
		platformtest.Eventually(t, 10*time.Second, "alice is told", func() bool { return len(e.mail.to(aliceID)) == 1 })
		if m := e.mail.to(aliceID)[0]; !strings.Contains(m.subject, "www.example.com was moved") || !strings.Contains(m.text, pa) {
			t.Fatalf("mail: %+v", m)
		}
		// Alice wants it back: now she must prove it.
		_, body = e.add(t, asAlice, pa, "www.example.com", 409)
		if !strings.Contains(body, "another account") {
			t.Fatalf("alice re-adding: %s", body)
		}
	})
}

func claimToken(t *testing.T, body string) string {
	t.Helper()
	i := strings.Index(body, "with value keelson-verify=")
	if i < 0 {
		t.Fatalf("no token in %s", body)
	}
	tok := body[i+len("with value "):]
	return tok[:strings.IndexAny(tok, ", ")]
}

// The periodic check deactivates a domain whose CNAME moved away (telling
// the owner) and reactivates it when the CNAME returns; a failed lookup
// changes nothing.
func TestRecheckDeactivatesDangling(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		p := e.projects.add(aliceID, "shop", "hobby", true)
		d, _ := e.add(t, asAlice, p, "www.example.com", 201)
		e.activate(t, asAlice, p, d)

		e.dns.SetCNAME("www.example.com", "parked.example.net")
		if n := e.checkAfter(t, time.Hour-time.Minute); n != 0 {
			t.Fatalf("checked %d domains before the interval", n)
		}
		wantStatus(t, e.get(t, asAlice, p, d.ID), domains.StatusActive, "")

		if n := e.checkAfter(t, time.Minute); n != 1 {
			t.Fatalf("checked %d domains, want 1", n)
		}
		wantStatus(t, e.get(t, asAlice, p, d.ID), domains.StatusError, "CNAME at www.example.com points at parked.example.net, not shop."+appsDomain)
		if _, err := e.svc.ProjectForHost(ctx, "www.example.com"); !errIsNotFound(err) {
			t.Fatalf("deactivated domain still routed: %v", err)
		}
		e.wantChanges(t, p, p)
		platformtest.Eventually(t, 10*time.Second, "owner told of the deactivation", func() bool { return len(e.mail.to(aliceID)) == 1 })
		if m := e.mail.to(aliceID)[0]; !strings.Contains(m.subject, "no longer served") || !strings.Contains(m.text, "parked.example.net") {
			t.Fatalf("mail: %+v", m)
		}

		// A resolver failure is not a verdict: the status stays.
		e.dns.SetCNAME("www.example.com", "shop."+appsDomain)
		e.dns.SetServFail("www.example.com")
		e.checkAfter(t, time.Hour)
		wantStatus(t, e.get(t, asAlice, p, d.ID), domains.StatusError, "could not look up")

		e.dns.ClearServFail("www.example.com")
		e.checkAfter(t, time.Hour)
		wantStatus(t, e.get(t, asAlice, p, d.ID), domains.StatusActive, "")
		e.wantChanges(t, p, p, p) // none for the failed lookup
		platformtest.Eventually(t, 10*time.Second, "owner told of the reactivation", func() bool { return len(e.mail.to(aliceID)) == 2 })
		if m := e.mail.to(aliceID)[1]; !strings.Contains(m.subject, "served again") {
			t.Fatalf("mail: %+v", m)
		}

		// An active domain whose resolver fails stays active.
		e.dns.SetServFail("www.example.com")
		e.checkAfter(t, time.Hour)
		if got := e.get(t, asAlice, p, d.ID); got.Status != domains.StatusActive {
			t.Fatalf("servfail deactivated: %+v", got)
		}
	})
}

// The background loop runs the check on the injected clock.
func TestRecheckLoop(t *testing.T) {
	t.Parallel()
	e := setup(t, dbtest.SQLite(t, sets()...), func(d *domains.Deps) { d.PollEvery = 10 * time.Millisecond })
	p := e.projects.add(aliceID, "shop", "hobby", true)
	d, _ := e.add(t, asAlice, p, "www.example.com", 201)
	e.activate(t, asAlice, p, d)
	if err := e.svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.dns.ClearCNAME("www.example.com")
	e.clock.advance(time.Hour)
	platformtest.Eventually(t, 10*time.Second, "the loop deactivates the domain", func() bool {
		return e.get(t, asAlice, p, d.ID).Status == domains.StatusError
	})
	wantStatus(t, e.get(t, asAlice, p, d.ID), domains.StatusError, "no CNAME record at www.example.com")
	if err := e.svc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A project's teardown deletes its domains and claims; the periodic check
// drops domains of projects that are gone, and deactivates those whose plan
// lost customDomains.
func TestProjectGoneAndPlanDowngrade(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		p := e.projects.add(aliceID, "shop", "hobby", true)
		d, _ := e.add(t, asAlice, p, "www.example.com", 201)
		e.activate(t, asAlice, p, d)
		if err := e.svc.DeleteProject(ctx, p); err != nil {
			t.Fatal(err)
		}
		e.wantChanges(t, p, p)
		if hs, _ := e.svc.ActiveHostnames(ctx, p); len(hs) != 0 {
			t.Fatalf("after teardown: %v", hs)
		}
		if n, _ := bdb.NewSelect().Table("custom_domains").Count(ctx); n != 0 {
			t.Fatalf("%d domain rows left", n)
		}
		// The hostname is free again for anyone.
		pb := e.projects.add(bobID, "blog", "hobby", true)
		e.add(t, asBob, pb, "www.example.com", 201)

		// Gone without a teardown (the project module's record is gone).
		e.projects.remove(pb)
		e.checkAfter(t, time.Hour)
		if n, _ := bdb.NewSelect().Table("custom_domains").Count(ctx); n != 0 {
			t.Fatalf("%d domain rows left after the check", n)
		}

		pc := e.projects.add(aliceID, "shop2", "hobby", true)
		d, _ = e.add(t, asAlice, pc, "www.example.com", 201)
		e.activate(t, asAlice, pc, d)
		e.projects.setPlan(pc, "free", false)
		e.checkAfter(t, time.Hour)
		wantStatus(t, e.get(t, asAlice, pc, d.ID), domains.StatusError, `the plan "free" of this project does not include custom domains`)
	})
}

// HSTS is off by default; PATCH turns it on and off, a field left out
// keeps it, a bad body is a 4xx that changes nothing, another account's
// ids are 404; HSTSHostnames lists the active domains that opted in, and
// a change of an active domain is told to ActiveChanged.
func TestHSTSOptIn(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets(), func(t *testing.T, bdb *bun.DB) {
		e := setup(t, bdb)
		ctx := context.Background()
		p := e.projects.add(aliceID, "shop", "hobby", true)
		pb := e.projects.add(bobID, "blog", "hobby", true)
		d, _ := e.add(t, asAlice, p, "www.example.com", 201)
		pending, _ := e.add(t, asAlice, p, "pending.example.com", 201)
		if d.HSTS {
			t.Fatalf("a new domain has hsts: %+v", d)
		}
		e.activate(t, asAlice, p, d)
		e.wantChanges(t, p)
		patch := func(who, project, id string, body any) (int, *domains.Domain) {
			resp := e.api.Patch("/projects/"+project+"/domains/"+id, who, body)
			if resp.Code != 200 {
				return resp.Code, nil
			}
			return resp.Code, decode[*domains.Domain](t, resp.Body.Bytes())
		}
		for _, bad := range []any{map[string]any{"hsts": "yes"}, map[string]any{"hostname": "x.example.com"}, []any{}} {
			if code, _ := patch(asAlice, p, d.ID, bad); code != 400 && code != 422 {
				t.Fatalf("PATCH %v: %d", bad, code)
			}
		}
		for _, c := range []struct{ project, id string }{{p, d.ID}, {pb, d.ID}, {pb, "not-a-uuid"}} {
			if code, _ := patch(asBob, c.project, c.id, map[string]any{"hsts": true}); code != 404 {
				t.Fatalf("bob PATCH %s/%s: %d", c.project, c.id, code)
			}
		}
		if hs, err := e.svc.HSTSHostnames(ctx); err != nil || len(hs) != 0 || e.get(t, asAlice, p, d.ID).HSTS {
			t.Fatalf("refused PATCHes changed hsts: %v %v", hs, err)
		}
		e.wantChanges(t, p)
		if code, got := patch(asAlice, p, d.ID, map[string]any{"hsts": true}); code != 200 || !got.HSTS || !e.get(t, asAlice, p, d.ID).HSTS {
			t.Fatalf("hsts true: %d %+v", code, got)
		}
		e.wantChanges(t, p, p)
		if code, got := patch(asAlice, p, d.ID, map[string]any{}); code != 200 || !got.HSTS {
			t.Fatalf("left out: %d %+v", code, got)
		}
		if code, got := patch(asAlice, p, pending.ID, map[string]any{"hsts": true}); code != 200 || !got.HSTS {
			t.Fatalf("hsts on a pending domain: %d %+v", code, got)
		}
		e.wantChanges(t, p, p) // unchanged, and not active: not told
		if hs, err := e.svc.HSTSHostnames(ctx); err != nil || !slices.Equal(hs, []string{"www.example.com"}) {
			t.Fatalf("HSTSHostnames: %v %v", hs, err)
		}
		if code, got := patch(asAlice, p, d.ID, map[string]any{"hsts": false}); code != 200 || got.HSTS {
			t.Fatalf("hsts false: %d %+v", code, got)
		}
		e.wantChanges(t, p, p, p)
		if hs, err := e.svc.HSTSHostnames(ctx); err != nil || len(hs) != 0 {
			t.Fatalf("HSTSHostnames after false: %v %v", hs, err)
		}
	})
}
