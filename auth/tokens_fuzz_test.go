package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/dbtest"
	"github.com/keelson-dev/keelson/platform/secret"
)

// The token parsers under arbitrary input: the access JWT (Authenticate), the
// opaque refresh token (Refresh) and the reset token (ResetPassword). The
// property: no panic; anything that is not the genuine token is a 401
// platform error (never a 5xx, never another user's principal); the genuine
// token still works. Seeds: testdata/fuzz/Fuzz*.

type fuzzEnv struct {
	svc           *auth.Service
	userID        string
	access        string
	refreshPrefix string
}

func newFuzzEnv(f *testing.F) *fuzzEnv {
	bdb := dbtest.SQLite(f, auth.Migrations())
	sealer, err := secret.New("fuzz-seal-key-0123456789abcdef0123456789ab")
	if err != nil {
		f.Fatal(err)
	}
	svc, err := auth.New(auth.Deps{DB: bdb, Sealer: sealer, JWTSecret: []byte("fuzz-jwt-secret-0123456789abcdef0123456789")})
	if err != nil {
		f.Fatal(err)
	}
	u, err := svc.CreateUser(context.Background(), auth.CreateUserParams{Email: "fuzz@example.com", Password: "correct horse battery"})
	if err != nil {
		f.Fatal(err)
	}
	pair, err := svc.IssueTokens(context.Background(), u.ID)
	if err != nil {
		f.Fatal(err)
	}
	return &fuzzEnv{svc: svc, userID: u.ID, access: pair.AccessToken, refreshPrefix: pair.RefreshToken[:8]}
}

// is401 fails unless err is a 401 platform error.
func is401(t *testing.T, what string, err error) {
	t.Helper()
	var pe *platform.Error
	if !errors.As(err, &pe) || pe.Status != 401 || !errors.Is(err, platform.ErrUnauthorized) {
		t.Fatalf("%s: got %v, want a 401", what, err)
	}
}

func FuzzAuthenticate(f *testing.F) {
	e := newFuzzEnv(f)
	parts := strings.Split(e.access, ".")
	for _, s := range []string{e.access, "", ".", "..", "a.b.c", e.access + "x", parts[0] + "." + parts[1] + ".",
		parts[0] + ".." + parts[2], "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + ".",
		strings.ToUpper(e.access), "Bearer " + e.access} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		p, err := e.svc.Authenticate(context.Background(), token)
		if err == nil {
			// Only the genuine token (of the only user) may authenticate.
			if token != e.access || p.UserID != e.userID {
				t.Fatalf("token %q authenticated as %+v", token, p)
			}
			return
		}
		is401(t, "Authenticate", err)
	})
}

func FuzzRefreshToken(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range []string{"", e.refreshPrefix, strings.Repeat("A", 43), "\x00", "' OR 1=1 --", strings.Repeat("é", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		// The genuine refresh token is 32 random bytes: a fuzzer finding it
		// would be a break of SHA-256 or crypto/rand; any answer but 401 is a bug.
		_, err := e.svc.Refresh(context.Background(), token)
		is401(t, "Refresh", err)
	})
}

func FuzzResetToken(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range []string{"", strings.Repeat("A", 43), "\x00", "%00", strings.Repeat("z", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		err := e.svc.ResetPassword(context.Background(), token, "another good password")
		var pe *platform.Error
		if !errors.As(err, &pe) || pe.Status >= 500 || pe.Status < 400 {
			t.Fatalf("ResetPassword(%q): %v, want a 4xx", token, err)
		}
	})
}
