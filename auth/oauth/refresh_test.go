package oauth_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/uptrace/bun"
)

// TestCodehostTokenRefresh: a GitHub App with expiring user tokens (8 hours,
// with a 6-month single-use refresh token: "Refreshing user access tokens",
// docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/refreshing-user-access-tokens,
// played by the fake's token endpoint with grant_type=refresh_token). The
// stored token is handed out until 5 minutes before it expires; then it is
// renewed once, even for concurrent callers, the new pair replaces the old
// (sealed at rest), and the old access token no longer works. A refresh the
// code host refuses answers "" (the user links their code-host account again).
func TestCodehostTokenRefresh(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, sets, func(t *testing.T, bdb *bun.DB) {
		e := newEnv(t, bdb, nil)
		e.gh.ExpireTokens(8*time.Hour, e.clock.Now)
		e.gh.AddUser(octo)
		e.gh.SignIn("octocat")
		id := e.loggedIn(e.flow(newBrowser(t), "/auth/codehost"))
		ctx := context.Background()
		first, err := e.svc.CodehostAccessToken(ctx, id)
		if err != nil || first == "" {
			t.Fatalf("CodehostAccessToken = %q, %v", first, err)
		}
		var stored struct {
			Access  string     `bun:"access_token"`
			Refresh string     `bun:"refresh_token"`
			Expires *time.Time `bun:"token_expires_at"`
		}
		read := func() {
			t.Helper()
			if err := bdb.NewSelect().Table("oauth_identities").Column("access_token", "refresh_token", "token_expires_at").
				Where("user_id = ?", id).Scan(ctx, &stored); err != nil {
				t.Fatal(err)
			}
		}
		read()
		if stored.Refresh == "" || strings.HasPrefix(stored.Refresh, "ghr_") || stored.Expires == nil ||
			stored.Expires.Sub(e.clock.Now()) > 8*time.Hour || stored.Expires.Sub(e.clock.Now()) < 7*time.Hour {
			t.Fatalf("stored tokens: refresh sealed %v, expires %v", stored.Refresh != "", stored.Expires)
		}

		e.clock.Advance(7*time.Hour + 54*time.Minute) // 6 minutes left: still handed out
		if tok, _ := e.svc.CodehostAccessToken(ctx, id); tok != first || e.gh.Refreshed() != 0 {
			t.Fatalf("a token 6 minutes from expiry was replaced (refreshes %d)", e.gh.Refreshed())
		}
		e.clock.Advance(2 * time.Minute) // 4 minutes left: renewed, once for 8 concurrent callers
		got := make([]string, 8)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() {
				tok, err := e.svc.CodehostAccessToken(ctx, id)
				if err != nil {
					t.Error(err)
				}
				got[i] = tok
			})
		}
		wg.Wait()
		second := got[0]
		for _, tok := range got {
			if tok != second || tok == first || tok == "" {
				t.Fatalf("concurrent callers got %q, want one new token", got)
			}
		}
		if n := e.gh.Refreshed(); n != 1 {
			t.Fatalf("%d refreshes, want 1", n)
		}
		if _, ok := e.gh.LoginForToken(first); ok {
			t.Fatal("the old access token still works after the refresh")
		}
		if login, ok := e.gh.LoginForToken(second); !ok || login != "octocat" {
			t.Fatalf("the new token belongs to %q (%v)", login, ok)
		}
		old := stored.Refresh
		read()
		if stored.Refresh == old || stored.Expires.Sub(e.clock.Now()) < 7*time.Hour {
			t.Fatalf("the renewed pair was not stored: expires %v", stored.Expires)
		}
		if tok, _ := e.svc.CodehostAccessToken(ctx, id); tok != second || e.gh.Refreshed() != 1 {
			t.Fatalf("the renewed token was not kept (refreshes %d)", e.gh.Refreshed())
		}

		// The user revokes the app's authorization: once the token expires,
		// no token (link again), and nothing is stored in its place.
		e.gh.RevokeRefreshTokens()
		e.clock.Advance(8 * time.Hour)
		if tok, err := e.svc.CodehostAccessToken(ctx, id); err != nil || tok != "" {
			t.Fatalf("after a refused refresh: %q, %v", tok, err)
		}
		if logs := e.logs.String(); strings.Contains(logs, first) || strings.Contains(logs, second) || !strings.Contains(logs, "bad_refresh_token") {
			t.Fatal("the logs hold a token, or do not say why the refresh was refused")
		}
	})
}
