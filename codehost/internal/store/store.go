// Package store is the codehost module's storage edge: installations, links
// and what each linked user may access, used OAuth states, webhook deliveries
// and the decisions each push led to. Every database error is translated
// here.
package store

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/keelson-dev/keelson/codehost/forge"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Installation states.
const (
	InstallationActive    = "active"
	InstallationSuspended = "suspended"
	InstallationDeleted   = "deleted"
)

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryProcessed = "processed"
	DeliveryFailed    = "failed"
)

// Decisions recorded for a project matched by a push.
const (
	DecisionDeployed       = "deployed"
	DecisionBranchMismatch = "branch mismatch"
	DecisionAutoDeployOff  = "auto-deploy off"
	DecisionSkipMessage    = "skipped by commit message"
	DecisionBranchDeleted  = "branch deleted"
	DecisionNotLinked      = "installation not linked"
	// DecisionNoAccess: the code host, asked with the project owner's own
	// token, does not let the owner access the pushed repository (an
	// outside collaborator on other repositories, removed from the
	// organisation or repository), or the owner's token no longer works.
	DecisionNoAccess      = "no repository access"
	DecisionQuotaExceeded = "quota exceeded"
	DecisionFailed        = "failed"
	// DecisionAlreadyDeployed: a push of a branch and commit that an earlier
	// push already deployed for the project (a replayed delivery under a new
	// delivery id, or a redelivery), so nothing is deployed again.
	DecisionAlreadyDeployed = "commit already deployed"
	DecisionDeploying       = "deploying" // written before Trigger; replaced after
)

// Sources of a delivery: the app, or a repository webhook of one of the hosts
// self-hosters use. A repository webhook is authenticated by a project's
// webhookSecret and acts on that project only.
const (
	SourceApp    = "app"
	SourceGitHub = "github"
	SourceGitea  = "gitea" // Gitea, Forgejo and Gogs share one format
	SourceGitLab = "gitlab"
)

type InstallationRow struct {
	bun.BaseModel       `bun:"table:codehost_installations"`
	InstallationID      int64     `bun:"installation_id,pk"`
	AccountLogin        string    `bun:"account_login,notnull"`
	AccountID           int64     `bun:"account_id,notnull"`
	AccountType         string    `bun:"account_type,notnull"`
	RepositorySelection string    `bun:"repository_selection,notnull"`
	Status              string    `bun:"status,notnull"`
	CreatedAt           time.Time `bun:"created_at,notnull"`
	UpdatedAt           time.Time `bun:"updated_at,notnull"`
}

type LinkRow struct {
	bun.BaseModel  `bun:"table:codehost_links"`
	ID             string    `bun:"id,pk,type:varchar(36)"`
	UserID         string    `bun:"user_id,notnull,type:varchar(36)"`
	InstallationID int64     `bun:"installation_id,notnull"`
	CreatedAt      time.Time `bun:"created_at,notnull"`
	// CheckedAt is when the code host last answered, asked with the
	// user's token, what the user may access through the installation (NULL:
	// never; due for RecheckLinks).
	CheckedAt *time.Time `bun:"checked_at"`
}

// ViewRow is one repository of an installation that the code host, asked
// with the user's own token at the link's last check, let the user access.
// A non-admin sees an organisation installation's push deliveries of these
// repositories only.
type ViewRow struct {
	bun.BaseModel  `bun:"table:codehost_user_repositories"`
	UserID         string `bun:"user_id,pk,type:varchar(36)"`
	InstallationID int64  `bun:"installation_id,pk"`
	RepositoryID   int64  `bun:"repository_id,pk"`
	FullName       string `bun:"full_name,notnull"`
}

type UsedStateRow struct {
	bun.BaseModel `bun:"table:codehost_used_states"`
	ID            string    `bun:"id,pk,type:varchar(36)"`
	ExpiresAt     time.Time `bun:"expires_at,notnull"`
	UsedAt        time.Time `bun:"used_at,notnull"`
}

type DeliveryRow struct {
	bun.BaseModel  `bun:"table:codehost_deliveries"`
	ID             string     `bun:"id,pk,type:varchar(36)"`
	DeliveryID     string     `bun:"delivery_id,notnull,type:varchar(100)"`
	Event          string     `bun:"event,notnull,type:varchar(64)"`
	Action         string     `bun:"action,notnull"`
	InstallationID int64      `bun:"installation_id,notnull"`
	Repository     string     `bun:"repository,notnull"`
	SignatureValid bool       `bun:"signature_valid,notnull"`
	Status         string     `bun:"status,notnull,type:varchar(16)"`
	Detail         string     `bun:"detail,notnull"`
	Payload        []byte     `bun:"payload"`
	ReceivedAt     time.Time  `bun:"received_at,notnull"`
	ProcessedAt    *time.Time `bun:"processed_at"`
	// Source is SourceApp or the host of a repository webhook; a repository
	// webhook's row belongs to the one project (and owner) whose
	// webhookSecret authenticated it.
	Source    string `bun:"source,notnull,type:varchar(16)"`
	ProjectID string `bun:"project_id,notnull,type:varchar(36)"`
	OwnerID   string `bun:"owner_id,notnull,type:varchar(36)"`
}

type DecisionRow struct {
	bun.BaseModel `bun:"table:codehost_decisions"`
	ID            string `bun:"id,pk,type:varchar(36)"`
	DeliveryRowID string `bun:"delivery_row_id,notnull,type:varchar(36)"`
	ProjectID     string `bun:"project_id,notnull,type:varchar(36)"`
	OwnerID       string `bun:"owner_id,notnull,type:varchar(36)"`
	Decision      string `bun:"decision,notnull"`
	DeploymentID  string `bun:"deployment_id,notnull"`
	Detail        string `bun:"detail,notnull"`
	// PushKey is "<branch>@<commit>" while the decision deploys or deployed,
	// and "" otherwise; unique per project (codehost_decisions_push).
	PushKey   string    `bun:"push_key,notnull,default:''"`
	CreatedAt time.Time `bun:"created_at,notnull"`
}

// Store reads and writes the module's tables.
type Store struct{ DB bun.IDB }

func (s Store) UseState(ctx context.Context, id string, exp, now time.Time) error {
	// Forget states that can no longer verify anyway, so the table stays small.
	if _, err := s.DB.NewDelete().Model((*UsedStateRow)(nil)).Where("expires_at < ?", now.Add(-time.Hour)).Exec(ctx); err != nil {
		return db.Translate(err)
	}
	_, err := s.DB.NewInsert().Model(&UsedStateRow{ID: id, ExpiresAt: exp, UsedAt: now}).Exec(ctx)
	return db.Translate(err)
}

func (s Store) UpsertInstallation(ctx context.Context, in *forge.Installation, status string, now time.Time) error {
	row := &InstallationRow{
		InstallationID: in.ID, AccountLogin: Clean(in.AccountLogin, 255), AccountID: in.AccountID,
		AccountType: Clean(in.AccountType, 32), RepositorySelection: Clean(in.RepositorySelection, 32),
		Status: status, CreatedAt: now, UpdatedAt: now,
	}
	q := s.DB.NewInsert().Model(row).On("CONFLICT (installation_id) DO UPDATE").
		Set("status = EXCLUDED.status").Set("updated_at = EXCLUDED.updated_at")
	if in.AccountLogin != "" {
		q = q.Set("account_login = EXCLUDED.account_login").Set("account_id = EXCLUDED.account_id").
			Set("account_type = EXCLUDED.account_type")
	}
	if in.RepositorySelection != "" {
		q = q.Set("repository_selection = EXCLUDED.repository_selection")
	}
	_, err := q.Exec(ctx)
	return db.Translate(err)
}

func (s Store) SetInstallationStatus(ctx context.Context, id int64, status string, now time.Time) error {
	_, err := s.DB.NewUpdate().Model((*InstallationRow)(nil)).Set("status = ?", status).Set("updated_at = ?", now).
		Where("installation_id = ?", id).Exec(ctx)
	return db.Translate(err)
}

// linkedUsers returns the users other than userID linked to installation id.
func (s Store) OtherLinkedUsers(ctx context.Context, id int64, userID string) ([]string, error) {
	var users []string
	err := s.DB.NewSelect().Model((*LinkRow)(nil)).Column("user_id").
		Where("installation_id = ? AND user_id <> ?", id, userID).Scan(ctx, &users)
	return users, db.Translate(err)
}

func (s Store) Link(ctx context.Context, userID string, installationID int64, now time.Time) error {
	_, err := s.DB.NewInsert().Model(&LinkRow{ID: platform.NewID(), UserID: userID, InstallationID: installationID, CreatedAt: now}).
		On("CONFLICT (user_id, installation_id) DO NOTHING").Exec(ctx)
	return db.Translate(err)
}

// userInstallations returns the installations userID linked, in the given states.
func (s Store) UserInstallations(ctx context.Context, userID string, states ...string) ([]InstallationRow, error) {
	var rows []InstallationRow
	q := s.DB.NewSelect().Model(&rows).
		Where("installation_id IN (SELECT installation_id FROM codehost_links WHERE user_id = ?)", userID).
		Order("installation_id")
	if len(states) > 0 {
		q = q.Where("status IN (?)", bun.List(states))
	}
	err := q.Scan(ctx)
	return rows, db.Translate(err)
}

// setView records what userID may access through installationID as of now:
// repos replace the stored view, and the link is marked checked.
func (s Store) SetView(ctx context.Context, userID string, installationID int64, repos []forge.Repository, now time.Time) error {
	return db.InTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*ViewRow)(nil)).
			Where("user_id = ? AND installation_id = ?", userID, installationID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		rows := make([]ViewRow, 0, len(repos))
		for _, r := range repos {
			if r.ID > 0 {
				rows = append(rows, ViewRow{UserID: userID, InstallationID: installationID, RepositoryID: r.ID, FullName: Clean(r.FullName, 255)})
			}
		}
		if len(rows) > 0 {
			if _, err := tx.NewInsert().Model(&rows).On("CONFLICT DO NOTHING").Exec(ctx); err != nil {
				return db.Translate(err)
			}
		}
		_, err := tx.NewUpdate().Model((*LinkRow)(nil)).Set("checked_at = ?", now).
			Where("user_id = ? AND installation_id = ?", userID, installationID).Exec(ctx)
		return db.Translate(err)
	})
}

// unlink removes userID's link to installationID and its stored view.
func (s Store) Unlink(ctx context.Context, userID string, installationID int64) error {
	return db.InTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewDelete().Model((*ViewRow)(nil)).
			Where("user_id = ? AND installation_id = ?", userID, installationID).Exec(ctx); err != nil {
			return db.Translate(err)
		}
		_, err := tx.NewDelete().Model((*LinkRow)(nil)).
			Where("user_id = ? AND installation_id = ?", userID, installationID).Exec(ctx)
		return db.Translate(err)
	})
}

// dueLinks returns up to limit links to active installations last checked
// before cutoff (or never), the longest unchecked first.
func (s Store) DueLinks(ctx context.Context, cutoff time.Time, limit int) ([]LinkRow, error) {
	var rows []LinkRow
	err := s.DB.NewSelect().Model(&rows).
		Where("(checked_at IS NULL OR checked_at < ?)", cutoff).
		Where("installation_id IN (SELECT installation_id FROM codehost_installations WHERE status = ?)", InstallationActive).
		OrderExpr("checked_at IS NOT NULL, checked_at, id").Limit(int64(limit)).Scan(ctx)
	return rows, db.Translate(err)
}

func (s Store) IsLinked(ctx context.Context, userID string, installationID int64) (bool, error) {
	n, err := s.DB.NewSelect().Model((*LinkRow)(nil)).
		Where("user_id = ? AND installation_id = ?", userID, installationID).Count(ctx)
	return n > 0, db.Translate(err)
}

func (s Store) InstallationStatus(ctx context.Context, id int64) (string, error) {
	var status string
	err := s.DB.NewSelect().Model((*InstallationRow)(nil)).Column("status").Where("installation_id = ?", id).Scan(ctx, &status)
	return status, db.Translate(err)
}

// insertDelivery stores a new delivery; a repeated delivery id is ErrConflict.
func (s Store) InsertDelivery(ctx context.Context, d *DeliveryRow) error {
	if d.Source == "" {
		d.Source = SourceApp
	}
	_, err := s.DB.NewInsert().Model(d).Exec(ctx)
	return db.Translate(err)
}

// pendingDeliveries returns up to limit pending deliveries with ids above
// after, oldest first.
func (s Store) PendingDeliveries(ctx context.Context, after string, limit int) ([]DeliveryRow, error) {
	var rows []DeliveryRow
	err := s.DB.NewSelect().Model(&rows).Where("status = ? AND id > ?", DeliveryPending, after).
		Order("id ASC").Limit(int64(limit)).Scan(ctx)
	return rows, db.Translate(err)
}

func (s Store) FinishDelivery(ctx context.Context, id string, e *forge.Event, status, detail string, now time.Time) error {
	q := s.DB.NewUpdate().Model((*DeliveryRow)(nil)).
		Set("status = ?", status).Set("detail = ?", Clean(detail, 2000)).Set("processed_at = ?", now).
		Set("payload = NULL").Where("id = ?", id)
	if e != nil {
		q = q.Set("action = ?", Clean(e.Action, 64)).Set("installation_id = ?", e.InstallationID)
		if e.Push != nil {
			q = q.Set("repository = ?", Clean(e.Push.Repository.FullName, 255))
		}
	}
	_, err := q.Exec(ctx)
	return db.Translate(err)
}

func (s Store) DecisionsOf(ctx context.Context, deliveryRowID string) ([]DecisionRow, error) {
	var rows []DecisionRow
	err := s.DB.NewSelect().Model(&rows).Where("delivery_row_id = ?", deliveryRowID).Scan(ctx)
	return rows, db.Translate(err)
}

// insertDecision records that the delivery is about to act on the project. It
// returns ErrConflict when a decision for the pair exists already.
func (s Store) InsertDecision(ctx context.Context, d *DecisionRow) error {
	d.Detail = Clean(d.Detail, 1000)
	_, err := s.DB.NewInsert().Model(d).Exec(ctx)
	return db.Translate(err)
}

// updateDecision settles a decision; one that did not deploy gives up its
// push key, so a later push of the same commit may deploy.
func (s Store) UpdateDecision(ctx context.Context, id, decision, deploymentID, detail string) error {
	q := s.DB.NewUpdate().Model((*DecisionRow)(nil))
	if decision != DecisionDeployed {
		q = q.Set("push_key = ''")
	}
	_, err := q.Set("decision = ?", decision).
		Set("deployment_id = ?", Clean(deploymentID, 100)).Set("detail = ?", Clean(detail, 1000)).
		Where("id = ?", id).Exec(ctx)
	return db.Translate(err)
}

type DeliveryFilter struct {
	UserID    string // "" with All: everything (admins)
	All       bool
	ProjectID string
	AfterID   string // keyset: ids below this one
	Limit     int
}

// listDeliveries returns deliveries visible to f.UserID, newest first: those
// that came from a personal installation they linked (the provider confirmed
// it is their own account's when they linked it), the pushes of an
// organisation's installation they linked to the repositories the provider
// let them access at the link's last check, and repository-webhook
// deliveries signed with the secret of one of their projects. A project a user typed a repository URL into
// does not make that repository's deliveries theirs. With f.ProjectID, only
// deliveries that decided something for that project.
func (s Store) ListDeliveries(ctx context.Context, f DeliveryFilter) ([]DeliveryRow, error) {
	var rows []DeliveryRow
	q := s.DB.NewSelect().Model(&rows).
		ExcludeColumn("payload").
		Order("id DESC").Limit(int64(f.Limit))
	if f.ProjectID != "" {
		sub := s.DB.NewSelect().Model((*DecisionRow)(nil)).Column("delivery_row_id").Where("project_id = ?", f.ProjectID)
		if !f.All {
			sub = sub.Where("owner_id = ?", f.UserID)
		}
		q = q.Where("id IN (?)", sub)
	}
	if !f.All {
		// Everything of a personal installation the user linked (only its own
		// account may link it); of an organisation's, the pushes to the
		// repositories the code host let the user access at the link's last
		// check. A repository-webhook delivery (owner_id set) was
		// authenticated by its project's own secret: it is that project
		// owner's.
		q = q.WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("installation_id IN (SELECT l.installation_id FROM codehost_links AS l "+
				"JOIN codehost_installations AS i ON i.installation_id = l.installation_id "+
				"WHERE l.user_id = ? AND i.account_type <> 'Organization')", f.UserID).
				WhereOr("(repository <> '' AND (installation_id, repository) IN "+
					"(SELECT installation_id, full_name FROM codehost_user_repositories WHERE user_id = ?))", f.UserID).
				WhereOr("(owner_id <> '' AND owner_id = ?)", f.UserID)
		})
	}
	if f.AfterID != "" {
		q = q.Where("id < ?", f.AfterID)
	}
	err := q.Scan(ctx)
	return rows, db.Translate(err)
}

func (s Store) DecisionsFor(ctx context.Context, deliveryRowIDs []string, ownerID string, all bool) ([]DecisionRow, error) {
	if len(deliveryRowIDs) == 0 {
		return nil, nil
	}
	var rows []DecisionRow
	q := s.DB.NewSelect().Model(&rows).Where("delivery_row_id IN (?)", bun.List(deliveryRowIDs)).Order("created_at", "id")
	if !all {
		q = q.Where("owner_id = ?", ownerID)
	}
	err := q.Scan(ctx)
	return rows, db.Translate(err)
}

// clean makes s storable on both dialects and bounded: valid UTF-8, no NUL,
// at most max bytes (cut on a rune boundary).
// Clean makes s storable (valid UTF-8, no NUL) and at most max bytes long.
func Clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// IsConflict reports a unique violation.
func IsConflict(err error) bool { return errors.Is(err, platform.ErrConflict) }
