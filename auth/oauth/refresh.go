package oauth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"golang.org/x/oauth2"
)

// tokenRefreshMargin: a code-host user token this close to its expiry is
// refreshed before it is handed out, so a call made with it does not fail
// half-way.
const tokenRefreshMargin = 5 * time.Minute

// sealedTokens are the code host's tokens for a user as an identity stores
// them: sealed, with the access token's expiry.
type sealedTokens struct {
	Access, Refresh string     // sealed; "" when none
	ExpiresAt       *time.Time // nil: the access token does not expire
}

// sealTokens seals the provider's tokens of pr; an access token that expires
// in ExpiresIn seconds expires at now + ExpiresIn.
func (s *Service) sealTokens(pr *profile) (sealedTokens, error) {
	var tk sealedTokens
	var err error
	if pr.AccessToken != "" {
		if tk.Access, err = s.d.Sealer.Seal(pr.AccessToken); err != nil {
			return tk, err
		}
	}
	if pr.RefreshToken != "" {
		if tk.Refresh, err = s.d.Sealer.Seal(pr.RefreshToken); err != nil {
			return tk, err
		}
	}
	if pr.ExpiresIn > 0 {
		at := s.now().Add(time.Duration(pr.ExpiresIn) * time.Second)
		tk.ExpiresAt = &at
	}
	return tk, nil
}

// CodehostAccessToken answers the user's code-host access token (opened from
// its sealed form), or "" when no code-host identity is linked or its token
// expired and cannot be renewed (the user links their code-host account
// again). An expiring token (a GitHub App's user token lasts 8 hours) is
// renewed with its refresh token when it is within 5 minutes of its expiry
// ("Refreshing user access tokens", docs.github.com/en/apps/creating-github-apps/
// authenticating-with-a-github-app/refreshing-user-access-tokens): the new
// access and refresh tokens replace the stored ones, once per identity even
// under concurrent calls. An error is a storage failure or a code host that
// did not answer.
func (s *Service) CodehostAccessToken(ctx context.Context, userID string) (string, error) {
	r, err := s.identityByUser(ctx, providerCodehost, userID)
	if errors.Is(err, platform.ErrNotFound) || err == nil && r.AccessToken == "" {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if r.TokenExpiresAt == nil || s.now().Before(r.TokenExpiresAt.Add(-tokenRefreshMargin)) {
		return s.d.Sealer.Open(r.AccessToken)
	}
	v, err, _ := s.refreshes.Do(r.ID, func() (any, error) { return s.refreshCodehostToken(ctx, r) })
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// refreshCodehostToken renews r's expiring access token with its refresh
// token and stores the new pair. A refresh the code host refuses (expired or
// revoked, or already used by another replica) answers "" unless the stored
// token changed meanwhile.
func (s *Service) refreshCodehostToken(ctx context.Context, r *identityRow) (string, error) {
	if r.RefreshToken == "" {
		return "", nil // expired, and nothing to renew it with
	}
	rt, err := s.d.Sealer.Open(r.RefreshToken)
	if err != nil {
		return "", err
	}
	tok, err := s.codehost.refresh(ctx, rt)
	var refused *oauth2.RetrieveError
	if errors.As(err, &refused) {
		s.log.WarnContext(ctx, "code-host token refresh refused; the user links their code-host account again",
			"user_id", r.UserID, "error", refused.ErrorCode)
		return s.tokenIfChanged(ctx, r)
	}
	if err != nil {
		return "", fmt.Errorf("oauth: refresh the code-host token: %w", err)
	}
	tk, err := s.sealTokens(&profile{AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, ExpiresIn: tok.ExpiresIn})
	if err != nil {
		return "", err
	}
	res, err := s.db.NewUpdate().Model((*identityRow)(nil)).
		Set("access_token = ?", tk.Access).Set("refresh_token = ?", tk.Refresh).Set("token_expires_at = ?", tk.ExpiresAt).
		Set("updated_at = ?", s.now()).Where("id = ? AND access_token = ?", r.ID, r.AccessToken).Exec(ctx)
	if err != nil {
		return "", db.Translate(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return s.tokenIfChanged(ctx, r) // relinked meanwhile: the newer link wins
	}
	return tok.AccessToken, nil
}

// tokenIfChanged answers the identity's stored access token when it is no
// longer r's (renewed or relinked meanwhile), else "".
func (s *Service) tokenIfChanged(ctx context.Context, r *identityRow) (string, error) {
	cur, err := s.identityByUser(ctx, providerCodehost, r.UserID)
	if errors.Is(err, platform.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if cur.AccessToken == "" || cur.AccessToken == r.AccessToken {
		return "", nil
	}
	return s.d.Sealer.Open(cur.AccessToken)
}
