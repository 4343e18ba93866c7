package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/keelson-dev/keelson/auth/oauth/oauthtest"
	"github.com/keelson-dev/keelson/codehost/githubfake"
	"github.com/keelson-dev/keelson/examples/apiclient"
	"github.com/keelson-dev/keelson/platform/platformtest"
)

// notDriven are the responses the OpenAPI document declares that
// TestDeclaredResponses does not drive, keyed "operation status", with why.
// An entry the test does drive fails it, so the list only shrinks.
var notDriven = map[string]string{
	"healthz default":                   "answers 200 whenever the server answers at all; it takes no input to refuse",
	"readyz default":                    "503 while the database does not answer; the server under test keeps its database",
	"list-plans default":                "a public read of every plan: no input to refuse, only a failing database (500)",
	"oauth-exchange 500":                internalOnly,
	"oauth-idp-start 500":               internalOnly,
	"oauth-idp-callback 500":            internalOnly,
	"oauth-codehost-start 500":          internalOnly,
	"oauth-codehost-callback 500":       internalOnly,
	"oauth-codehost-connect 500":        internalOnly,
	"oauth-codehost-connect-ticket 500": internalOnly,
	"stream-deployment-logs 500":        internalOnly,
	"oauth-codehost-connect-ticket 400": "declared for a validation failure (Huma's 422, answered as 400); its one input, " +
		"the Authorization header, has no constraint to break: a bad token is 401",
}

// internalOnly is why a declared 500 is not driven.
const internalOnly = "an internal failure (the database or the provider's token exchange failing mid-request); " +
	"no request gets it from a working server"

// TestDeclaredResponses drives the operations of the served OpenAPI document
// through the generated client (examples/apiclient) and records every answer
// by operation: each response an operation declares (each status, and its
// default, which any status it does not name answers) must have been seen,
// or be in notDriven with the reason; and every answer seen must be one the
// operation declares.
func TestDeclaredResponses(t *testing.T) {
	t.Parallel()
	env := newStatusEnv(t)
	for _, ts := range []*testServer{env.ts, env.bare} {
		env.sweepAnonymous(t, ts)
	}
	env.accounts(t)
	env.refusals(t)
	env.idpAndTwoFactor(t)
	env.codehost(t)
	user := env.ts.signup(t, "builder@example.com")
	project := env.deployments(t, user)
	env.plansAndDomains(t, user, project)
	env.hooksAndDeletion(t, user, project)
	env.teams(t)
	env.hostsRoutes(t)
	env.apiTokens(t)
	env.placeholders(t)
	env.rec.check(t)
}

// opRoute is one operation of the document, as a request matches it.
type opRoute struct {
	method, id string
	path       *regexp.Regexp
	literals   int // literal path segments: the most specific match wins
}

// statusRecorder is the generated client's transport: it passes requests on
// and notes each answer of the servers under test by operation.
type statusRecorder struct {
	routes   []opRoute
	declared map[string]map[string]bool // operation -> "200", ..., "default"
	mu       sync.Mutex
	hosts    map[string]bool
	seen     map[string]map[int]bool
}

func newStatusRecorder(t *testing.T, doc []byte) *statusRecorder {
	t.Helper()
	var d struct {
		Paths map[string]map[string]struct {
			OperationID string                     `json:"operationId"`
			Responses   map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	r := &statusRecorder{declared: map[string]map[string]bool{}, hosts: map[string]bool{}, seen: map[string]map[int]bool{}}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for p, ops := range d.Paths {
		parts := param.Split(p, -1)
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile("^" + strings.Join(parts, `[^/]+`) + "$")
		lit := strings.Count(p, "/") - strings.Count(p, "{")
		for m, op := range ops {
			r.routes = append(r.routes, opRoute{method: strings.ToUpper(m), id: op.OperationID, path: re, literals: lit})
			r.declared[op.OperationID] = map[string]bool{}
			for code := range op.Responses {
				r.declared[op.OperationID][code] = true
			}
		}
	}
	return r
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.note(req, res.StatusCode)
	}
	return res, err
}

func (r *statusRecorder) note(req *http.Request, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hosts[req.URL.Host] {
		return
	}
	best := -1
	for i, rt := range r.routes {
		if rt.method == req.Method && rt.path.MatchString(req.URL.Path) && (best < 0 || rt.literals > r.routes[best].literals) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	id := r.routes[best].id
	if r.seen[id] == nil {
		r.seen[id] = map[int]bool{}
	}
	r.seen[id][status] = true
}

// client is a generated client of ts through the recorder, as token ("":
// none), keeping cookies and not following redirects (a 302 is an answer).
func (r *statusRecorder) client(t *testing.T, ts *testServer, token string) *apiclient.ClientWithResponses {
	t.Helper()
	r.mu.Lock()
	r.hosts[strings.TrimPrefix(ts.URL, "http://")] = true
	r.mu.Unlock()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Transport: r, Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	opts := []apiclient.ClientOption{apiclient.WithHTTPClient(hc)}
	if token != "" {
		opts = append(opts, apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	}
	c, err := apiclient.NewClientWithResponses(ts.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check compares what was seen with what is declared.
func (r *statusRecorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var missing, undeclared, stale []string
	for id, codes := range r.declared {
		for code := range codes {
			key := id + " " + code
			driven := false
			if code == "default" {
				for s := range r.seen[id] {
					driven = driven || !codes[strconv.Itoa(s)]
				}
			} else {
				n, _ := strconv.Atoi(code)
				driven = r.seen[id][n]
			}
			_, listed := notDriven[key]
			switch {
			case driven && listed:
				stale = append(stale, key)
			case !driven && !listed:
				missing = append(missing, key)
			}
		}
		for s := range r.seen[id] {
			if !codes[strconv.Itoa(s)] && !codes["default"] {
				undeclared = append(undeclared, fmt.Sprintf("%s %d", id, s))
			}
		}
	}
	for key := range notDriven {
		id, code, _ := strings.Cut(key, " ")
		if !r.declared[id][code] {
			stale = append(stale, key+" (not declared)")
		}
	}
	for _, l := range [][]string{missing, undeclared, stale} {
		sort.Strings(l)
	}
	if len(missing)+len(undeclared)+len(stale) > 0 {
		t.Errorf("declared but neither driven nor in notDriven (%d):\n  %s\nanswered but not declared (%d):\n  %s\nin notDriven but driven or not declared (%d):\n  %s",
			len(missing), strings.Join(missing, "\n  "), len(undeclared), strings.Join(undeclared, "\n  "), len(stale), strings.Join(stale, "\n  "))
	}
}

// want fails t unless resp (a generated client's answer) has status.
func want(t *testing.T, what string, resp interface {
	StatusCode() int
}, err error, status int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if resp.StatusCode() != status {
		body := ""
		if b := reflect.ValueOf(resp).Elem().FieldByName("Body"); b.IsValid() {
			body = string(b.Bytes())
		}
		t.Fatalf("%s: %d, want %d: %s", what, resp.StatusCode(), status, body)
	}
}

// statusEnv is the servers the test drives and their clients.
type statusEnv struct {
	rec   *statusRecorder
	ts    *testServer // every provider configured
	bare  *testServer // none: the OAuth routes answer 503
	h     *codehostHarness
	idp   *oauthtest.OIDC
	admin string // an ADMIN's access token
}

func newStatusEnv(t *testing.T) *statusEnv {
	t.Helper()
	h := newCodehostHarness(t, "octocat", "site", "<h1>site</h1>\n")
	idp := oauthtest.NewOIDC(t)
	ts := startServer(t, "", func(c *Config) {
		codehostConfig(c, h.gh, h.fake)
		c.IDPIssuer, c.IDPClientID, c.IDPClientSecret = idp.URL, idp.ClientID, idp.ClientSecret
		c.OAuthRedirectMode = "code"
		// A name server that refuses at once: a domain check answers "pending".
		c.DNSResolvers = []string{"127.0.0.1:1"}
		c.AppsDomain = "apps.example.test"
		c.MaxLogStreams = 1
	})
	status, doc, _ := ts.do(t, "GET", "/openapi-3.0.json", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /openapi-3.0.json: %d", status)
	}
	return &statusEnv{rec: newStatusRecorder(t, doc), ts: ts, bare: startServer(t, "", nil), h: h, idp: idp,
		admin: ts.signup(t, "admin@example.com")}
}

// sweepAnonymous calls every operation of the generated client once without
// credentials, with "x" for every path parameter and zero values for
// parameters and bodies: each answers its refusal (or, for the public
// reads, its success).
func (e *statusEnv) sweepAnonymous(t *testing.T, ts *testServer) {
	t.Helper()
	c := e.rec.client(t, ts, "")
	v := reflect.ValueOf(c)
	ctx := reflect.ValueOf(context.Background())
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Type().Method(i)
		if !strings.HasSuffix(m.Name, "WithResponse") || strings.Contains(m.Name, "WithBody") || strings.Contains(m.Name, "WithFormdataBody") {
			continue
		}
		ft := m.Type // receiver first
		args := []reflect.Value{ctx}
		for j := 2; j < ft.NumIn(); j++ {
			in := ft.In(j)
			switch {
			case ft.IsVariadic() && j == ft.NumIn()-1:
			case in.Kind() == reflect.String:
				args = append(args, reflect.ValueOf("x").Convert(in))
			default:
				args = append(args, reflect.Zero(in))
			}
		}
		out := v.Method(i).Call(args)
		// A zero email the client itself refuses to send is no answer.
		if err, _ := out[1].Interface().(error); err != nil && !strings.Contains(err.Error(), "MarshalJSON") {
			t.Fatalf("%s without credentials: %v", m.Name, err)
		}
	}
}

// accounts: register, log in, the profile, refresh, email verification,
// a password reset and log out, as the generated client's user.
func (e *statusEnv) accounts(t *testing.T) {
	ctx := context.Background()
	anon := e.rec.client(t, e.ts, "")
	const email, pw, pw2 = "stat@example.com", "correct horse battery", "battery staple horse"
	reg, err := anon.AuthRegisterWithResponse(ctx, apiclient.RegisterRequest{Email: email, Password: pw, ConfirmPassword: pw})
	want(t, "register", reg, err, http.StatusCreated)
	login, err := anon.AuthLoginWithResponse(ctx, apiclient.LoginRequest{Email: email, Password: pw})
	want(t, "login", login, err, http.StatusOK)
	c := e.rec.client(t, e.ts, login.JSON200.AccessToken)
	me, err := c.AuthMeWithResponse(ctx)
	want(t, "me", me, err, http.StatusOK)
	name := "Stat"
	upd, err := c.AuthMeUpdateWithResponse(ctx, apiclient.UpdateProfileRequest{Name: &name})
	want(t, "me update", upd, err, http.StatusOK)
	ref, err := anon.AuthRefreshWithResponse(ctx, apiclient.RefreshRequest{RefreshToken: login.JSON200.RefreshToken})
	want(t, "refresh", ref, err, http.StatusOK)
	resend, err := c.AuthVerifyEmailResendWithResponse(ctx)
	want(t, "verify-email resend", resend, err, http.StatusOK)
	ver, err := anon.AuthVerifyEmailWithResponse(ctx, apiclient.VerifyEmailRequest{Token: loggedLink(t, e.ts.Logs, email, "/verify-email?token=")})
	want(t, "verify email", ver, err, http.StatusOK)
	forgot, err := anon.AuthForgotPasswordWithResponse(ctx, apiclient.ForgotPasswordRequest{Email: email})
	want(t, "forgot password", forgot, err, http.StatusOK)
	reset, err := anon.AuthResetPasswordWithResponse(ctx, apiclient.ResetPasswordRequest{
		Token: loggedLink(t, e.ts.Logs, email, "/reset-password?token="), NewPassword: pw2, ConfirmPassword: pw2})
	want(t, "reset password", reset, err, http.StatusOK)
	again, err := anon.AuthLoginWithResponse(ctx, apiclient.LoginRequest{Email: email, Password: pw2})
	want(t, "login after the reset", again, err, http.StatusOK)
	out, err := e.rec.client(t, e.ts, again.JSON200.AccessToken).AuthLogoutWithResponse(ctx, apiclient.LogoutRequest{RefreshToken: &again.JSON200.RefreshToken})
	want(t, "logout", out, err, http.StatusOK)
}

// placeholders: the SPEC 4.7 placeholder CRUD routes, each answered once.
func (e *statusEnv) placeholders(t *testing.T) {
	ctx := context.Background()
	admin := e.rec.client(t, e.ts, e.admin)
	v := reflect.ValueOf(admin)
	call := func(name string, args ...any) {
		t.Helper()
		in := []reflect.Value{reflect.ValueOf(ctx)}
		for _, a := range args {
			in = append(in, reflect.ValueOf(a))
		}
		out := v.MethodByName(name + "WithResponse").Call(in)
		resp := out[0].Interface().(interface{ StatusCode() int })
		err, _ := out[1].Interface().(error)
		status := http.StatusOK
		if strings.HasPrefix(name, "Create") {
			status = http.StatusCreated
		}
		want(t, name, resp, err, status)
	}
	for _, r := range []string{"Admin", "Cluster", "EnvVars", "Logs", "Logstore", "Notification", "Users", "WorkflowEngine"} {
		body := reflect.MakeMap(v.MethodByName("Create" + r + "WithResponse").Type().In(1)).Interface() // {}
		call("List" + r)
		call("Create"+r, body)
		call("Get"+r, "1")
		call("Update"+r, "1", body)
		call("Delete"+r, "1")
	}
}

// browse follows a redirect to a fake provider (which approves at once) and
// answers the query of the callback it sends the browser back to.
func browse(t *testing.T, c *apiclient.ClientWithResponses, location string) url.Values {
	t.Helper()
	hc := c.ClientInterface.(*apiclient.Client).Client
	req, _ := http.NewRequest(http.MethodGet, location, nil)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back, err := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("provider at %s: %d %v", location, res.StatusCode, err)
	}
	return back.Query()
}

// redirectQuery is the query of a 302's Location.
func redirectQuery(t *testing.T, what string, hdr http.Header) url.Values {
	t.Helper()
	u, err := url.Parse(hdr.Get("Location"))
	if err != nil {
		t.Fatalf("%s: Location %q", what, hdr.Get("Location"))
	}
	return u.Query()
}

// idpAndTwoFactor: log in through the identity provider (code mode: the
// callback's code is traded at /auth/oauth/exchange), turn 2FA on, log in
// again (a challenge, traded with a recovery code) and turn it off.
func (e *statusEnv) idpAndTwoFactor(t *testing.T) {
	ctx := context.Background()
	e.idp.SignIn(oauthtest.OIDCUser{Subject: "s-1", Email: "ida@idp.example", EmailVerified: true, Name: "Ida"})
	login := func() url.Values {
		b := e.rec.client(t, e.ts, "")
		start, err := b.OauthIdpStartWithResponse(ctx)
		want(t, "idp start", start, err, http.StatusFound)
		q := browse(t, b, start.HTTPResponse.Header.Get("Location"))
		code, state := q.Get("code"), q.Get("state")
		cb, err := b.OauthIdpCallbackWithResponse(ctx, &apiclient.OauthIdpCallbackParams{Code: &code, State: state})
		want(t, "idp callback", cb, err, http.StatusFound)
		return redirectQuery(t, "idp callback", cb.HTTPResponse.Header)
	}
	anon := e.rec.client(t, e.ts, "")
	ex, err := anon.OauthExchangeWithResponse(ctx, apiclient.OAuthExchangeRequest{Code: login().Get("code")})
	want(t, "exchange", ex, err, http.StatusOK)
	bad, err := anon.OauthExchangeWithResponse(ctx, apiclient.OAuthExchangeRequest{Code: "no-such-code"})
	want(t, "exchange of an unknown code", bad, err, http.StatusBadRequest)
	empty, err := anon.OauthExchangeWithResponse(ctx, apiclient.OAuthExchangeRequest{Code: ""})
	want(t, "exchange of an empty code", empty, err, http.StatusBadRequest)
	long := strings.Repeat("s", 300)
	r1, err := anon.OauthIdpCallbackWithResponse(ctx, &apiclient.OauthIdpCallbackParams{State: long})
	want(t, "idp callback with a state too long", r1, err, http.StatusBadRequest)
	r2, err := anon.OauthCodehostCallbackWithResponse(ctx, &apiclient.OauthCodehostCallbackParams{State: long})
	want(t, "code host callback with a state too long", r2, err, http.StatusBadRequest)

	c := e.rec.client(t, e.ts, ex.JSON200.AccessToken)
	setup, err := c.Auth2faSetupWithResponse(ctx)
	want(t, "2fa setup", setup, err, http.StatusOK)
	code, err := totp.GenerateCode(setup.JSON200.Secret, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	on, err := c.Auth2faVerifyWithResponse(ctx, apiclient.TwoFactorCodeRequest{Code: code})
	want(t, "2fa verify", on, err, http.StatusOK)
	challenge := login().Get("twoFactorChallenge")
	tf, err := anon.Auth2faLoginWithResponse(ctx, apiclient.TwoFactorLoginRequest{Challenge: challenge, Code: on.JSON200.RecoveryCodes[0]})
	want(t, "2fa login", tf, err, http.StatusOK)
	off, err := c.Auth2faDisableWithResponse(ctx, apiclient.TwoFactorCodeRequest{Code: on.JSON200.RecoveryCodes[1]})
	want(t, "2fa disable", off, err, http.StatusOK)
}

// codehost: log in through the code host, then link it to an account and
// install the app (connect, the OAuth round, the install callback), list
// repositories and deliveries, and deliver a signed webhook.
func (e *statusEnv) codehost(t *testing.T) {
	ctx := context.Background()
	e.h.addUser(4242, "octocat")
	e.h.gh.SignIn("octocat")
	b := e.rec.client(t, e.ts, "")
	start, err := b.OauthCodehostStartWithResponse(ctx)
	want(t, "code host start", start, err, http.StatusFound)
	token := e.ts.signup(t, "octo@example.com")
	c := e.rec.client(t, e.ts, token)
	ticket, err := c.OauthCodehostConnectTicketWithResponse(ctx)
	want(t, "connect ticket", ticket, err, http.StatusOK)
	tok := "a-token"
	refused, err := c.OauthCodehostConnectWithResponse(ctx, &apiclient.OauthCodehostConnectParams{Token: &tok})
	want(t, "connect with ?token=", refused, err, http.StatusBadRequest)
	link, err := c.CodehostConnectWithResponse(ctx)
	want(t, "code host connect", link, err, http.StatusOK)
	u, err := url.Parse(link.JSON200.InstallUrl)
	if err != nil || !link.JSON200.LinkFirst {
		t.Fatalf("install link %+v", link.JSON200)
	}
	tk := u.Query().Get("ticket")
	conn, err := c.OauthCodehostConnectWithResponse(ctx, &apiclient.OauthCodehostConnectParams{Ticket: &tk})
	want(t, "connect", conn, err, http.StatusFound)
	q := browse(t, c, conn.HTTPResponse.Header.Get("Location"))
	code := q.Get("code")
	cb, err := c.OauthCodehostCallbackWithResponse(ctx, &apiclient.OauthCodehostCallbackParams{Code: &code, State: q.Get("state")})
	want(t, "code host callback", cb, err, http.StatusFound)
	repo := &githubfake.Repository{ID: 5151, Owner: "octocat", Name: "site", DefaultBranch: "main"}
	e.h.fake.AddInstallation(githubfake.Installation{ID: 91, Account: "octocat", Repositories: []*githubfake.Repository{repo}})
	setup := "install"
	inst, err := c.CodehostAppCallbackWithResponse(ctx, &apiclient.CodehostAppCallbackParams{
		InstallationId: 91, State: redirectQuery(t, "code host callback", cb.HTTPResponse.Header).Get("state"), SetupAction: &setup})
	want(t, "install callback", inst, err, http.StatusFound)
	repos, err := c.CodehostRepositoriesWithResponse(ctx)
	want(t, "repositories", repos, err, http.StatusOK)
	body := []byte(`{"zen":"Keep it logically awesome.","hook_id":1,"installation":{"id":91}}`)
	sig, event, id := githubfake.Sign(e2eWebhookSecret, body), "ping", githubfake.NewDeliveryID()
	hook, err := b.CodehostWebhookWithBodyWithResponse(ctx, &apiclient.CodehostWebhookParams{
		XGitHubEvent: &event, XGitHubDelivery: &id, XHubSignature256: &sig}, "application/json", bytes.NewReader(body))
	want(t, "webhook", hook, err, http.StatusOK)
	dl, err := c.CodehostDeliveriesWithResponse(ctx, &apiclient.CodehostDeliveriesParams{})
	want(t, "deliveries", dl, err, http.StatusOK)
}

// waitStatus polls the deployment's status until it is one of states.
func waitStatus(t *testing.T, c *apiclient.ClientWithResponses, id string, states ...string) string {
	t.Helper()
	var got string
	platformtest.Eventually(t, 3*time.Minute, "deployment "+id+" to be "+strings.Join(states, " or "), func() bool {
		r, err := c.GetDeploymentStatusWithResponse(context.Background(), id)
		want(t, "deployment status", r, err, http.StatusOK)
		got = string(r.JSON200.Status)
		return slices.Contains(states, got)
	})
	return got
}

// deployments: a project deployed to LIVE, its log stream (a stream, a
// resume at its end, a bad cursor, an unknown deployment, a log token), and
// a redeploy held mid-BUILD, where a second stream of the user is one too
// many (KEELSON_MAX_LOG_STREAMS=1), then cancelled and deleted. It answers
// the project's id.
func (e *statusEnv) deployments(t *testing.T, token string) string {
	ctx := context.Background()
	c, anon := e.rec.client(t, e.ts, token), e.rec.client(t, e.ts, "")
	_, bare := newRepo(t, map[string]string{"index.html": "<h1>statuses</h1>\n"})
	p, err := c.CreateProjectWithResponse(ctx, apiclient.CreateProjectRequest{Name: "statuses", RepoUrl: "file://" + bare, Framework: "static", Port: 8080})
	want(t, "create project", p, err, http.StatusCreated)
	list, err := c.ListProjectsWithResponse(ctx, &apiclient.ListProjectsParams{})
	want(t, "list projects", list, err, http.StatusOK)
	get, err := c.GetProjectWithResponse(ctx, p.JSON201.Id)
	want(t, "get project", get, err, http.StatusOK)
	d, err := c.CreateDeploymentWithResponse(ctx, apiclient.CreateDeploymentJSONRequestBody{ProjectId: p.JSON201.Id})
	want(t, "deploy", d, err, http.StatusCreated)
	id := d.JSON201.DeploymentId
	if st := waitStatus(t, c, id, "LIVE", "FAILED", "CANCELLED"); st != "LIVE" {
		t.Fatalf("deployment ended %s", st)
	}
	gd, err := c.GetDeploymentWithResponse(ctx, id)
	want(t, "get deployment", gd, err, http.StatusOK)
	ld, err := c.ListDeploymentsWithResponse(ctx, &apiclient.ListDeploymentsParams{})
	want(t, "list deployments", ld, err, http.StatusOK)
	logs, err := c.StreamDeploymentLogsWithResponse(ctx, id, &apiclient.StreamDeploymentLogsParams{})
	want(t, "log stream", logs, err, http.StatusOK)
	last := regexp.MustCompile(`(?m)^id: (\d+)$`).FindAllStringSubmatch(string(logs.Body), -1)
	if len(last) == 0 {
		t.Fatalf("no log event in %s", logs.Body)
	}
	for after, status := range map[string]int{last[len(last)-1][1]: http.StatusNoContent, "-1": http.StatusBadRequest} {
		r, err := c.StreamDeploymentLogsWithResponse(ctx, id, &apiclient.StreamDeploymentLogsParams{After: &after})
		want(t, "log stream after "+after, r, err, status)
	}
	unknown, err := c.StreamDeploymentLogsWithResponse(ctx, "01900000-0000-7000-8000-000000000000", &apiclient.StreamDeploymentLogsParams{})
	want(t, "log stream of an unknown deployment", unknown, err, http.StatusNotFound)
	lt, err := c.CreateDeploymentLogTokenWithResponse(ctx, id)
	want(t, "log token", lt, err, http.StatusCreated)
	byToken, err := anon.StreamDeploymentLogsWithResponse(ctx, id, &apiclient.StreamDeploymentLogsParams{Token: &lt.JSON201.Token})
	want(t, "log stream by token", byToken, err, http.StatusOK)
	// A second deployment replaces the first, whose kept build a rollback runs again.
	d2, err := c.CreateDeploymentWithResponse(ctx, apiclient.CreateDeploymentJSONRequestBody{ProjectId: p.JSON201.Id})
	want(t, "deploy again", d2, err, http.StatusCreated)
	if st := waitStatus(t, c, d2.JSON201.DeploymentId, "LIVE", "FAILED", "CANCELLED"); st != "LIVE" {
		t.Fatalf("second deployment ended %s", st)
	}
	waitStatus(t, c, id, "CANCELLED") // replaced, just after the second went LIVE
	rb, err := c.RollbackDeploymentWithResponse(ctx, id)
	want(t, "rollback", rb, err, http.StatusCreated)
	if st := waitStatus(t, c, rb.JSON201.DeploymentId, "LIVE", "FAILED", "CANCELLED"); st != "LIVE" {
		t.Fatalf("rollback ended %s", st)
	}
	e.heldBuild(t, c, p.JSON201.Id, id)
	return p.JSON201.Id
}

// heldBuild redeploys deployment id of project with a build that waits for
// a gate: while it builds, one stream is held open and a second answers 429;
// then the deployment is cancelled and deleted.
func (e *statusEnv) heldBuild(t *testing.T, c *apiclient.ClientWithResponses, project, id string) {
	ctx := context.Background()
	gate := filepath.Join(t.TempDir(), "gate")
	cmd := "while [ ! -f " + gate + " ]; do sleep 0.1; done"
	set, err := c.UpdateProjectSettingsWithResponse(ctx, project, apiclient.ProjectSettings{
		Region: "local", PlanName: "free", EnvVars: []apiclient.EnvVarInput{}, BuildCommand: &cmd})
	want(t, "project settings", set, err, http.StatusOK)
	re, err := c.RedeployDeploymentWithResponse(ctx, id)
	want(t, "redeploy", re, err, http.StatusCreated)
	id = re.JSON201.DeploymentId
	waitStatus(t, c, id, "BUILDING")
	held, err := c.ClientInterface.(*apiclient.Client).StreamDeploymentLogs(ctx, id, &apiclient.StreamDeploymentLogsParams{})
	if err != nil || held.StatusCode != http.StatusOK {
		t.Fatalf("held log stream: %v", err)
	}
	more, err := c.StreamDeploymentLogsWithResponse(ctx, id, &apiclient.StreamDeploymentLogsParams{})
	held.Body.Close()
	want(t, "a second log stream", more, err, http.StatusTooManyRequests)
	cancel, err := c.CancelDeploymentWithResponse(ctx, id)
	want(t, "cancel", cancel, err, http.StatusOK)
	waitStatus(t, c, id, "CANCELLED", "FAILED")
	del, err := c.DeleteDeploymentWithResponse(ctx, id)
	want(t, "delete deployment", del, err, http.StatusOK)
}

// plansAndDomains: an admin makes a plan with custom domains and puts the
// user on it; the project moves to it and gets a domain, checked and
// removed; a second plan is made and deleted.
func (e *statusEnv) plansAndDomains(t *testing.T, token, project string) {
	ctx := context.Background()
	c, anon := e.rec.client(t, e.ts, token), e.rec.client(t, e.ts, "")
	admin := e.rec.client(t, e.ts, e.admin)
	yes := true
	body := apiclient.CreatePlanRequest{Name: "domains", Tier: apiclient.CreatePlanRequestTierFREE, CustomDomains: &yes, MaxProjects: 3, MaxDeployments: 100,
		MaxCpuM: 1000, MaxMemoryMi: 512, MaxStorageGi: 1, MaxBandwidthGb: 10, BuildTimeoutMins: 10}
	plan, err := admin.CreatePlanWithResponse(ctx, body)
	want(t, "create plan", plan, err, http.StatusCreated)
	four := int64(4)
	upd, err := admin.UpdatePlanWithResponse(ctx, plan.JSON201.Id, apiclient.UpdatePlanRequest{MaxProjects: &four})
	want(t, "update plan", upd, err, http.StatusOK)
	me, err := c.AuthMeWithResponse(ctx)
	want(t, "me", me, err, http.StatusOK)
	as, err := admin.AssignAccountPlanWithResponse(ctx, plan.JSON201.Id, me.JSON200.Id)
	want(t, "assign plan", as, err, http.StatusNoContent)
	gp, err := anon.GetPlanWithResponse(ctx, plan.JSON201.Id)
	want(t, "get plan", gp, err, http.StatusOK)
	usage, err := c.GetUsageWithResponse(ctx)
	want(t, "usage", usage, err, http.StatusOK)
	set, err := c.UpdateProjectSettingsWithResponse(ctx, project, apiclient.ProjectSettings{
		Region: "local", PlanName: "domains", EnvVars: []apiclient.EnvVarInput{}})
	want(t, "project on the domains plan", set, err, http.StatusOK)
	dom, err := c.CreateDomainWithResponse(ctx, project, apiclient.CreateDomainRequest{Hostname: "www.statuses.example.com"})
	want(t, "create domain", dom, err, http.StatusCreated)
	ls, err := c.ListDomainsWithResponse(ctx, project, &apiclient.ListDomainsParams{})
	want(t, "list domains", ls, err, http.StatusOK)
	gd, err := c.GetDomainWithResponse(ctx, project, dom.JSON201.Id)
	want(t, "get domain", gd, err, http.StatusOK)
	vd, err := c.VerifyDomainWithResponse(ctx, project, dom.JSON201.Id)
	want(t, "verify domain", vd, err, http.StatusOK)
	ud, err := c.UpdateDomainWithResponse(ctx, project, dom.JSON201.Id, apiclient.UpdateDomainRequest{Hsts: &yes})
	want(t, "update domain", ud, err, http.StatusOK)
	dd, err := c.DeleteDomainWithResponse(ctx, project, dom.JSON201.Id)
	want(t, "delete domain", dd, err, http.StatusNoContent)
	body.Name = "short-lived"
	tmp, err := admin.CreatePlanWithResponse(ctx, body)
	want(t, "create plan", tmp, err, http.StatusCreated)
	del, err := admin.DeletePlanWithResponse(ctx, tmp.JSON201.Id)
	want(t, "delete plan", del, err, http.StatusOK)
}

// hooksAndDeletion: a deploy hook made, listed, fired and revoked; then the
// project is deleted and its deletion followed to the end.
func (e *statusEnv) hooksAndDeletion(t *testing.T, token, project string) {
	ctx := context.Background()
	c, anon := e.rec.client(t, e.ts, token), e.rec.client(t, e.ts, "")
	name := "nightly"
	hook, err := c.CreateDeployHookWithResponse(ctx, project, apiclient.CreateDeployHookRequest{Name: &name})
	want(t, "create deploy hook", hook, err, http.StatusCreated)
	hooks, err := c.ListDeployHooksWithResponse(ctx, project)
	want(t, "list deploy hooks", hooks, err, http.StatusOK)
	fire, err := anon.FireDeployHookWithResponse(ctx, path.Base(hook.JSON201.Url))
	want(t, "fire deploy hook", fire, err, http.StatusCreated)
	rm, err := c.DeleteDeployHookWithResponse(ctx, project, hook.JSON201.Id)
	want(t, "delete deploy hook", rm, err, http.StatusNoContent)
	del, err := c.DeleteProjectWithResponse(ctx, project)
	want(t, "delete project", del, err, http.StatusAccepted)
	platformtest.Eventually(t, 2*time.Minute, "the project's deletion", func() bool {
		st, err := c.GetProjectDeleteStatusWithResponse(ctx, project)
		want(t, "delete status", st, err, http.StatusOK)
		return st.JSON200.Status == "DELETED"
	})
}

// refusals drives the errors of the public routes the anonymous sweep
// cannot reach (the client refuses to send a zero email): a taken email, a
// wrong password, an address that is not one; and the callbacks of a
// server with no provider configured (503, naming the missing settings).
func (e *statusEnv) refusals(t *testing.T) {
	ctx := context.Background()
	anon := e.rec.client(t, e.ts, "")
	const email, pw = "taken@example.com", "correct horse battery"
	for i, status := range []int{http.StatusCreated, http.StatusConflict} {
		r, err := anon.AuthRegisterWithResponse(ctx, apiclient.RegisterRequest{Email: email, Password: pw, ConfirmPassword: pw})
		want(t, "register #"+strconv.Itoa(i+1), r, err, status)
	}
	wrong, err := anon.AuthLoginWithResponse(ctx, apiclient.LoginRequest{Email: email, Password: "not the password"})
	want(t, "login with a wrong password", wrong, err, http.StatusUnauthorized)
	bad, err := anon.AuthForgotPasswordWithBodyWithResponse(ctx, "application/json", strings.NewReader(`{"email":"not an address"}`))
	want(t, "forgot password of a non-address", bad, err, http.StatusBadRequest)
	bare := e.rec.client(t, e.bare, "")
	idp, err := bare.OauthIdpCallbackWithResponse(ctx, &apiclient.OauthIdpCallbackParams{State: "x"})
	want(t, "idp callback, no provider", idp, err, http.StatusServiceUnavailable)
	ch, err := bare.OauthCodehostCallbackWithResponse(ctx, &apiclient.OauthCodehostCallbackParams{State: "x"})
	want(t, "code host callback, no provider", ch, err, http.StatusServiceUnavailable)
}
