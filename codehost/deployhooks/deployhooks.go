// Package deployhooks gives a project secret URLs that deploy its branch head
// when anything POSTs to them: for CI pipelines, cron jobs and code hosts that
// cannot sign a webhook. The URL is the credential: it is shown once, stored
// only as a SHA-256 hash, listed by a short prefix, and revoked by deleting it.
//
// It reaches projects and deployments only through the small interfaces it
// declares (Projects, Deployer); a deployment it starts meets the same quotas
// as any other. It is not the code-host webhook (package codehost).
package deployhooks

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/audit"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Projects is what deploy hooks need from the projects module.
type Projects interface {
	// Authorize answers the project's owner account (a user or a team) when
	// userID's role on project projectID holds perm; an error wrapping
	// platform.ErrNotFound when they hold none (or it does not exist), a 403
	// *platform.Error when their role is lower.
	Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) (ownerID string, err error)
}

// Deployer starts a deployment of a project's branch head as userID (the
// hook's creator, who must still be allowed to deploy it). A quota refusal
// is a 403 *platform.Error naming the quota.
type Deployer interface {
	Trigger(ctx context.Context, projectID, userID, reason string) (deploymentID string, err error)
}

// Deps are what the module needs from its host.
type Deps struct {
	// DB holds the deploy_hooks table (see Migrations).
	DB *bun.DB
	// Auth authenticates the owner routes.
	Auth platform.Authenticator
	// Projects checks ownership.
	Projects Projects
	// Deployer starts deployments.
	Deployer Deployer
	// PublicURL is the API's public origin; hook URLs are PublicURL/deploy-hooks/<token>.
	PublicURL string
	// MaxPerProject caps the hooks of one project. Default 20.
	MaxPerProject int
	// Audit records creates and deletes in their transaction. Optional.
	Audit audit.Recorder
	// Log receives the module's messages. Default: discard.
	Log *slog.Logger
	// Clock tells the time. Default platform.SystemClock.
	Clock platform.Clock
}

func (d Deps) validate() error {
	var errs platform.Problems
	errs.Require("DB", d.DB != nil)
	errs.Require("Auth", d.Auth != nil)
	errs.Require("Projects", d.Projects != nil)
	errs.Require("Deployer", d.Deployer != nil)
	errs.RequireHTTPURL("PublicURL", d.PublicURL)
	return errors.Join(errs...)
}

// Service is the deploy-hook module.
type Service struct{ d Deps }

// New checks d and builds the service; add its routes with Register.
func New(d Deps) (*Service, error) {
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("deployhooks: %w", err)
	}
	platform.Defaults(&d.Clock, &d.Log)
	d.MaxPerProject = cmp.Or(d.MaxPerProject, 20)
	d.PublicURL = strings.TrimRight(d.PublicURL, "/")
	return &Service{d: d}, nil
}

type hookRow struct {
	bun.BaseModel `bun:"table:deploy_hooks"`
	ID            string     `bun:"id,pk,type:varchar(36)"`
	ProjectID     string     `bun:"project_id,notnull,type:varchar(36)"`
	OwnerID       string     `bun:"owner_id,notnull,type:varchar(36)"` // the user who created it, as whom it deploys
	Name          string     `bun:"name,notnull"`
	TokenHash     string     `bun:"token_hash,notnull,type:varchar(64)"` // hex SHA-256 of the token
	Prefix        string     `bun:"prefix,notnull,type:varchar(16)"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	LastUsedAt    *time.Time `bun:"last_used_at"`
}

// Migrations are the module's tables, for the host to run.
func Migrations() db.MigrationSet {
	return db.MigrationSet{Module: "deployhooks", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables((*hookRow)(nil)),
			db.CreateIndex((*hookRow)(nil), "deploy_hooks_token_hash", true, "token_hash"),
			db.CreateIndex((*hookRow)(nil), "deploy_hooks_project", false, "project_id", "created_at"),
		),
	}}}
}

// tokenPrefix starts every token, so a leaked one is recognisable (secret scanners).
const tokenPrefix = "kdh_"

// prefixLen is how much of a token listings show.
const prefixLen = len(tokenPrefix) + 6

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func hashToken(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// Hook is a deploy hook as listed: never its token.
type Hook struct {
	ID         string     `json:"id"`
	ProjectID  string     `json:"projectId"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix" doc:"The first characters of the hook's URL token, to tell hooks apart"`
	CreatedAt  time.Time  `json:"createdAt"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
}

func (r *hookRow) out() Hook {
	return Hook{ID: r.ID, ProjectID: r.ProjectID, Name: r.Name, Prefix: r.Prefix, CreatedAt: r.CreatedAt.UTC(), LastUsedAt: r.LastUsedAt}
}

// Create makes a deploy hook for the project (hooks:write) and returns it
// with its URL, the only time the URL is available. The hook deploys as
// ownerID, the caller, for as long as they may deploy the project.
func (s *Service) Create(ctx context.Context, ownerID, projectID, name string) (*Hook, string, error) {
	account, err := s.checkOwner(ctx, ownerID, projectID, platform.HooksWrite)
	if err != nil {
		return nil, "", err
	}
	tok, err := newToken()
	if err != nil {
		return nil, "", err
	}
	row := &hookRow{ID: platform.NewID(), ProjectID: projectID, OwnerID: ownerID, Name: name,
		TokenHash: hashToken(tok), Prefix: tok[:prefixLen], CreatedAt: s.d.Clock.Now().UTC().Truncate(time.Microsecond)}
	err = db.InsertCapped(ctx, s.d.DB, row, db.Cap{Lock: "keelson:deploy-hooks:" + projectID, Column: "project_id", Value: projectID,
		Max: s.d.MaxPerProject, Full: platform.Forbidden(fmt.Sprintf("a project has at most %d deploy hooks; delete one first", s.d.MaxPerProject)),
	}, func(ctx context.Context, tx bun.Tx) error {
		return s.record(ctx, tx, account, row, "hook.create", "created deploy hook")
	})
	if err != nil {
		return nil, "", db.Translate(err)
	}
	h := row.out()
	return &h, s.d.PublicURL + "/deploy-hooks/" + tok, nil
}

// List returns the hooks of the project (hooks:read), oldest first.
func (s *Service) List(ctx context.Context, ownerID, projectID string) ([]Hook, error) {
	if _, err := s.checkOwner(ctx, ownerID, projectID, platform.HooksRead); err != nil {
		return nil, err
	}
	var rows []hookRow
	if err := s.d.DB.NewSelect().Model(&rows).Where("project_id = ?", projectID).
		Order("created_at", "id").Scan(ctx); err != nil {
		return nil, db.Translate(err)
	}
	out := make([]Hook, len(rows))
	for i := range rows {
		out[i] = rows[i].out()
	}
	return out, nil
}

// Delete revokes a hook of the project (hooks:write).
func (s *Service) Delete(ctx context.Context, ownerID, projectID, hookID string) error {
	account, err := s.checkOwner(ctx, ownerID, projectID, platform.HooksWrite)
	if err != nil {
		return err
	}
	return db.DeleteScoped(ctx, s.d.DB, hookID, "project_id", projectID, platform.NotFound("deploy hook not found"),
		func(ctx context.Context, tx bun.Tx, row *hookRow) error {
			return s.record(ctx, tx, account, row, "hook.delete", "deleted deploy hook")
		})
}

// record writes the audit row of a change to hook row of account's project, in tx.
func (s *Service) record(ctx context.Context, tx bun.IDB, account string, row *hookRow, action, summary string) error {
	if row.Name != "" {
		summary += " " + strconv.Quote(row.Name)
	}
	return audit.Record(ctx, s.d.Audit, tx, audit.Entry{Action: action, ResourceType: "hook", ResourceID: row.ID,
		OwnerID: account, ProjectID: row.ProjectID, Summary: summary + " (" + row.Prefix + "...)"})
}

// errUnknownHook answers every token that is not a live hook's, however it is wrong.
var errUnknownHook = platform.NotFound("deploy hook not found (revoked, or never existed)")

// Fire starts a deployment of the project of the hook whose token this is.
func (s *Service) Fire(ctx context.Context, token string) (string, error) {
	if !strings.HasPrefix(token, tokenPrefix) || len(token) > 100 {
		return "", errUnknownHook
	}
	row := new(hookRow)
	if err := s.d.DB.NewSelect().Model(row).Where("token_hash = ?", hashToken(token)).Scan(ctx); err != nil {
		if err = db.Translate(err); errors.Is(err, platform.ErrNotFound) {
			return "", errUnknownHook
		}
		return "", err
	}
	reason := "deploy hook " + row.Prefix
	if row.Name != "" {
		reason = "deploy hook " + row.Name + " (" + row.Prefix + ")"
	}
	id, err := s.d.Deployer.Trigger(ctx, row.ProjectID, row.OwnerID, reason)
	if errors.Is(err, platform.ErrNotFound) {
		// The project is gone: so is its hook.
		if _, derr := s.d.DB.NewDelete().Model((*hookRow)(nil)).Where("id = ?", row.ID).Exec(context.WithoutCancel(ctx)); derr != nil {
			s.d.Log.WarnContext(ctx, "deployhooks: delete hook of a deleted project", "hook_id", row.ID, "err", derr)
		}
		return "", errUnknownHook
	}
	if err != nil {
		return "", err
	}
	now := s.d.Clock.Now().UTC().Truncate(time.Microsecond)
	if _, err := s.d.DB.NewUpdate().Model((*hookRow)(nil)).Set("last_used_at = ?", now).Where("id = ?", row.ID).
		Exec(context.WithoutCancel(ctx)); err != nil {
		s.d.Log.WarnContext(ctx, "deployhooks: record last use", "hook_id", row.ID, "err", err)
	}
	return id, nil
}

// checkOwner answers the project's owner account when userID holds perm on it.
func (s *Service) checkOwner(ctx context.Context, userID, projectID string, perm platform.Permission) (string, error) {
	if !platform.ValidID(projectID) {
		return "", platform.NotFound("project not found")
	}
	account, err := s.d.Projects.Authorize(ctx, userID, projectID, perm)
	if errors.Is(err, platform.ErrNotFound) {
		return "", platform.NotFound("project not found")
	}
	return account, err
}

var _ platform.Module = (*Service)(nil)

// Migrations returns the module's tables (the package's Migrations), for platform.Module.
func (s *Service) Migrations() db.MigrationSet { return Migrations() }

// Start and Close do nothing: the module has no background work.
func (s *Service) Start(context.Context) error { return nil }

func (s *Service) Close(context.Context) error { return nil }
