package apitokens

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// CreateRequest is the body of POST /auth/tokens.
type CreateRequest struct {
	Name      string     `json:"name" minLength:"1" maxLength:"100" doc:"What the token is for, e.g. \"CI deploys\""`
	Scopes    []string   `json:"scopes" minItems:"1" maxItems:"32" doc:"Permissions the token may use, e.g. [\"deployments:write\"]; any scope on a resource also reads it: projects:read, projects:write, projects:create, projects:delete, secrets:write, plans:write, deployments:read, deployments:write, deployments:delete, domains:read, domains:write, hooks:read, hooks:write, members:read, members:write, teams:write, audit:read"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty" doc:"When the token stops working (RFC 3339, in the future); absent: never"`
	TeamID    string     `json:"teamId,omitempty" maxLength:"36" doc:"Bind the token to this team's projects (the caller must be a member whose role holds every scope); absent: every project the caller can reach"`
}

// Token is an API token as listed: never its secret.
type Token struct {
	ID           string     `json:"id" doc:"Token id (UUID), for DELETE /auth/tokens/{id}"`
	Name         string     `json:"name"`
	Prefix       string     `json:"prefix" doc:"The token's first characters (kls_ and its id part), to recognise it; not secret"`
	Scopes       []string   `json:"scopes"`
	TeamID       string     `json:"teamId,omitempty" doc:"The team the token is bound to; absent: none"`
	CreatedAt    time.Time  `json:"createdAt"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty" doc:"Absent: never expires"`
	LastUsedAt   *time.Time `json:"lastUsedAt,omitempty" doc:"Last use, written at most once a minute; absent: never used"`
	LastUsedAddr string     `json:"lastUsedAddr,omitempty" doc:"Client address of that use"`
}

// CreatedToken is the answer of POST /auth/tokens: the only time the
// secret is shown.
type CreatedToken struct {
	Token
	Secret string `json:"token" doc:"The token (kls_...), shown only in this answer; send it as Authorization: Bearer"`
}

// SchemaName methods name these types in the OpenAPI document.
func (CreateRequest) SchemaName() string { return "CreateAPITokenRequest" }
func (Token) SchemaName() string         { return "APIToken" }
func (CreatedToken) SchemaName() string  { return "CreatedAPIToken" }

func (r *tokenRow) out() Token {
	t := Token{ID: r.ID, Name: r.Name, Prefix: platform.APITokenPrefix + r.Lookup, Scopes: strings.Fields(r.Scopes),
		TeamID: r.TeamID, CreatedAt: r.CreatedAt.UTC(), LastUsedAddr: r.LastUsedAddr}
	if r.ExpiresAt != nil {
		e := r.ExpiresAt.UTC()
		t.ExpiresAt = &e
	}
	if r.LastUsedAt != nil {
		u := r.LastUsedAt.UTC()
		t.LastUsedAt = &u
	}
	return t
}

// checkScopes answers the scopes de-duplicated in the order of
// platform.Permissions, or a 400 naming the first unknown one.
func checkScopes(in []string) ([]string, error) {
	known := platform.Permissions()
	var out []string
	for i, sc := range in {
		if !slices.Contains(known, platform.Permission(sc)) {
			return nil, platform.Invalidf("scopes[%d]: unknown scope %q; known scopes: %s", i, truncate(sc, 40), joinPerms(known))
		}
	}
	for _, p := range known {
		if slices.Contains(in, string(p)) {
			out = append(out, string(p))
		}
	}
	return out, nil
}

func joinPerms(ps []platform.Permission) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Create stores a new token of userID and answers it, with its secret.
func (s *Service) Create(ctx context.Context, userID string, in *CreateRequest) (*CreatedToken, error) {
	name := strings.TrimSpace(in.Name)
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, platform.Invalid("name: must not be blank nor hold control characters")
	}
	scopes, err := checkScopes(in.Scopes)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if in.ExpiresAt != nil && !in.ExpiresAt.After(now) {
		return nil, platform.Invalid("expiresAt: must be in the future")
	}
	if in.TeamID != "" {
		if err := s.checkTeam(ctx, userID, in.TeamID, scopes); err != nil {
			return nil, err
		}
	}
	token, lookup, hash := newToken()
	row := &tokenRow{ID: platform.NewID(), UserID: userID, TeamID: in.TeamID, Name: name, Lookup: lookup, Hash: hash,
		Scopes: strings.Join(scopes, " "), CreatedAt: now}
	if in.ExpiresAt != nil {
		e := in.ExpiresAt.UTC().Truncate(time.Microsecond)
		row.ExpiresAt = &e
	}
	err = db.InsertCapped(ctx, s.d.DB, row, db.Cap{Lock: "keelson:apitokens:" + userID, Column: "user_id", Value: userID,
		Max: s.d.MaxPerUser, Full: platform.Forbidden(fmt.Sprintf("API token limit reached: %d per account; delete one first", s.d.MaxPerUser)).WithCode("TOKEN_LIMIT"),
	}, func(ctx context.Context, tx bun.Tx) error {
		return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: "token.create", ResourceType: "token", ResourceID: row.ID,
			OwnerID: cmp.Or(row.TeamID, userID), Summary: fmt.Sprintf("%q, scopes %s", row.Name, row.Scopes)})
	})
	if err != nil {
		return nil, translate("create", err)
	}
	s.d.Log.InfoContext(ctx, "api token created", "token_id", row.ID, "user_id", userID, "scopes", row.Scopes, "team_id", row.TeamID)
	return &CreatedToken{Token: row.out(), Secret: token}, nil
}

// checkTeam refuses a team the creator is not a member of (404) or whose
// role there does not hold every scope (403 naming the first).
func (s *Service) checkTeam(ctx context.Context, userID, teamID string, scopes []string) error {
	role := platform.MemberRole("")
	if platform.ValidID(teamID) {
		var err error
		if role, err = s.d.Teams.MemberRole(ctx, teamID, userID); err != nil {
			return fmt.Errorf("apitokens: team role: %w", err)
		}
	}
	if role == "" {
		return platform.NotFound("teamId: team not found")
	}
	for _, sc := range scopes {
		if !role.Allows(platform.Permission(sc)) {
			return platform.Denied(role, platform.Permission(sc))
		}
	}
	return nil
}

// List answers userID's tokens, newest first (at most MaxPerUser).
func (s *Service) List(ctx context.Context, userID string) ([]Token, error) {
	var rows []tokenRow
	err := s.d.DB.NewSelect().Model(&rows).Where("user_id = ?", userID).OrderExpr("created_at DESC, id DESC").Scan(ctx)
	if err != nil {
		return nil, translate("list", err)
	}
	out := make([]Token, len(rows))
	for i := range rows {
		out[i] = rows[i].out()
	}
	return out, nil
}

// Delete revokes userID's token id: it stops working at once.
func (s *Service) Delete(ctx context.Context, userID, id string) error {
	err := db.DeleteScoped(ctx, s.d.DB, id, "user_id", userID, platform.NotFound("token not found"),
		func(ctx context.Context, tx bun.Tx, row *tokenRow) error {
			return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: "token.revoke", ResourceType: "token", ResourceID: id,
				OwnerID: cmp.Or(row.TeamID, userID), Summary: fmt.Sprintf("%q", row.Name)})
		})
	if err != nil {
		return translate("delete", err)
	}
	s.d.Log.InfoContext(ctx, "api token revoked", "token_id", id, "user_id", userID)
	return nil
}

func translate(op string, err error) error {
	var pe *platform.Error
	if errors.As(err, &pe) {
		return pe
	}
	return fmt.Errorf("apitokens: %s: %w", op, db.Translate(err))
}

var errBadToken = platform.Unauthorized("invalid or revoked API token")

// Authenticate implements platform.Authenticator for API tokens: a
// well-formed token whose row exists, matches in constant time and has not
// expired, of a creator who still exists. The principal is the creator,
// narrowed by the token's scopes and team.
func (s *Service) Authenticate(ctx context.Context, token string) (platform.Principal, error) {
	lookup, ok := parseToken(token)
	if !ok {
		return platform.Principal{}, errBadToken
	}
	row := new(tokenRow)
	if err := s.d.DB.NewSelect().Model(row).Where("lookup = ?", lookup).Scan(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return platform.Principal{}, errBadToken
		}
		return platform.Principal{}, fmt.Errorf("apitokens: authenticate: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(hashOf(token)), []byte(row.Hash)) != 1 {
		return platform.Principal{}, errBadToken
	}
	now := s.now()
	if row.ExpiresAt != nil && !now.Before(*row.ExpiresAt) {
		return platform.Principal{}, platform.Unauthorized("API token expired at " + row.ExpiresAt.UTC().Format(time.RFC3339))
	}
	u, err := s.d.Users.UserByID(ctx, row.UserID)
	if errors.Is(err, platform.ErrNotFound) {
		s.dropUser(ctx, row.UserID)
		return platform.Principal{}, errBadToken
	}
	if err != nil {
		return platform.Principal{}, fmt.Errorf("apitokens: creator: %w", err)
	}
	s.touch(ctx, row, now)
	scopes := make([]platform.Permission, 0, 4)
	for _, sc := range strings.Fields(row.Scopes) {
		scopes = append(scopes, platform.Permission(sc))
	}
	return platform.Principal{UserID: u.ID, Email: u.Email, Role: platform.RoleUser, TokenID: row.ID, Scopes: scopes, TeamID: row.TeamID}, nil
}

// touch records the token's use when the last one written is older than
// TouchEvery: at most one write per token per TouchEvery, whichever
// replica serves it (the condition is in the UPDATE). A failure is logged.
func (s *Service) touch(ctx context.Context, row *tokenRow, now time.Time) {
	if row.LastUsedAt != nil && now.Sub(*row.LastUsedAt) < s.d.TouchEvery {
		return
	}
	addr := truncate(platform.ClientAddr(ctx), 60)
	_, err := s.d.DB.NewUpdate().Model((*tokenRow)(nil)).Set("last_used_at = ?", now).Set("last_used_addr = ?", addr).
		Where("id = ? AND (last_used_at IS NULL OR last_used_at <= ?)", row.ID, now.Add(-s.d.TouchEvery)).Exec(ctx)
	if err != nil {
		s.d.Log.WarnContext(ctx, "api token: record last use", "token_id", row.ID, "err", err)
	}
}

// TeamDeleted deletes the tokens bound to a deleted team (teams.Dependents):
// they could reach nothing any more.
func (s *Service) TeamDeleted(ctx context.Context, teamID string) error {
	_, err := s.d.DB.NewDelete().Model((*tokenRow)(nil)).Where("team_id = ?", teamID).Exec(ctx)
	return translate("team deleted", err)
}

// dropUser deletes the tokens of a deleted account, so none outlives it.
func (s *Service) dropUser(ctx context.Context, userID string) {
	if _, err := s.d.DB.NewDelete().Model((*tokenRow)(nil)).Where("user_id = ?", userID).Exec(ctx); err != nil {
		s.d.Log.WarnContext(ctx, "api tokens of a deleted account", "user_id", userID, "err", err)
	}
}
