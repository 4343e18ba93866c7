package codehost

import (
	"context"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/codehost/forge"
	"github.com/keelson-dev/keelson/codehost/internal/store"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// StatusContext is the context of the commit statuses Keelson posts (the
// label the code host shows next to the commit).
const StatusContext = "keelson/deploy"

// Commit status states, as GitHub names them.
const (
	StatePending = "pending"
	StateSuccess = "success"
	StateFailure = "failure"
	StateError   = "error"
)

// CommitStatus is one status of a commit.
type CommitStatus struct {
	State       string // StatePending, StateSuccess, StateFailure or StateError
	TargetURL   string // optional: where the status links to
	Description string // at most 140 characters
	Context     string
}

// CommitStatuses posts commit statuses as an app installation (the GitHub
// adapter implements it with POST /repos/{owner}/{repo}/statuses/{sha}).
type CommitStatuses interface {
	PostCommitStatus(ctx context.Context, installationID int64, fullName, sha string, st CommitStatus) error
}

// DeploymentResult is where a deployment stands.
type DeploymentResult struct {
	Ended     bool   // LIVE, FAILED or CANCELLED
	Succeeded bool   // LIVE
	URL       string // the deployed URL, when it succeeded
	Error     string // why it did not, when it ended otherwise
}

// DeploymentResults tells how a deployment stands. The deployments module,
// adapted by the host, implements it.
type DeploymentResults interface {
	// DeploymentResult returns platform.ErrNotFound for a deployment that is gone.
	DeploymentResult(ctx context.Context, ownerID, deploymentID string) (*DeploymentResult, error)
}

// statusRow is a push deployment whose final commit status is still owed.
type statusRow struct {
	bun.BaseModel  `bun:"table:codehost_commit_statuses"`
	ID             string    `bun:"id,pk,type:varchar(36)"`
	DeploymentID   string    `bun:"deployment_id,notnull,type:varchar(100)"`
	OwnerID        string    `bun:"owner_id,notnull,type:varchar(36)"`
	InstallationID int64     `bun:"installation_id,notnull"`
	Repository     string    `bun:"repository,notnull"` // owner/name
	CommitSHA      string    `bun:"commit_sha,notnull,type:varchar(64)"`
	Done           bool      `bun:"done,notnull"`
	Attempts       int       `bun:"attempts,notnull"`
	CreatedAt      time.Time `bun:"created_at,notnull"`
}

// maxStatusAttempts bounds how often a final status is tried before it is given up.
const maxStatusAttempts = 3

// statusStarted posts "pending" for a push deployment of an app installation
// and remembers to post how it ends. Failing to post is logged; it never
// fails the deployment.
func (s *Service) statusStarted(ctx context.Context, installationID int64, p *Push, ownerID, deploymentID string) {
	if s.d.Statuses == nil || p == nil || installationID <= 0 || deploymentID == "" {
		return
	}
	if p.Repository.FullName == "" || !forge.CommitRE.MatchString(p.After) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	row := &statusRow{ID: platform.NewID(), DeploymentID: deploymentID, OwnerID: ownerID, InstallationID: installationID,
		Repository: store.Clean(p.Repository.FullName, 255), CommitSHA: p.After, CreatedAt: s.now()}
	if _, err := s.d.DB.NewInsert().Model(row).Exec(ctx); err != nil {
		s.d.Log.ErrorContext(ctx, "codehost: remember commit status", "deployment_id", deploymentID, "err", db.Translate(err))
	}
	err := s.d.Statuses.PostCommitStatus(ctx, installationID, p.Repository.FullName, p.After, CommitStatus{
		State: StatePending, Description: "Deploying " + shortSHA(p.After) + " on Keelson", Context: StatusContext,
	})
	if err != nil {
		s.d.Log.WarnContext(ctx, "codehost: post pending commit status", "repository", p.Repository.FullName,
			"sha", p.After, "deployment_id", deploymentID, "err", err)
	}
}

// ReportStatuses posts the final commit status of every push deployment that
// ended since the last pass. The worker calls it; it returns how many it posted.
func (s *Service) ReportStatuses(ctx context.Context) (int, error) {
	if s.d.Statuses == nil {
		return 0, nil
	}
	var rows []statusRow
	if err := s.d.DB.NewSelect().Model(&rows).Where("done = ?", false).Order("id").Limit(100).Scan(ctx); err != nil {
		return 0, db.Translate(err)
	}
	posted := 0
	for _, r := range rows {
		res, err := s.d.Results.DeploymentResult(ctx, r.OwnerID, r.DeploymentID)
		if errors.Is(err, platform.ErrNotFound) {
			res = &DeploymentResult{Ended: true, Error: "the deployment was deleted"}
		} else if err != nil {
			return posted, err
		}
		if !res.Ended {
			continue
		}
		st := CommitStatus{State: StateSuccess, TargetURL: res.URL, Description: "Deployed on Keelson", Context: StatusContext}
		if res.URL != "" {
			st.Description = store.Clean("Deployed to "+res.URL, 140)
		}
		if !res.Succeeded {
			msg := res.Error
			if msg == "" {
				msg = "the deployment did not go live"
			}
			st = CommitStatus{State: StateFailure, Description: store.Clean("Deployment failed: "+msg, 140), Context: StatusContext}
		}
		// Claim the row first, so two replicas never post the same status twice.
		res2, err := s.d.DB.NewUpdate().Model((*statusRow)(nil)).Set("done = ?", true).Set("attempts = attempts + 1").
			Where("id = ? AND done = ? AND attempts = ?", r.ID, false, r.Attempts).Exec(ctx)
		if err != nil {
			return posted, db.Translate(err)
		}
		if n, _ := res2.RowsAffected(); n != 1 {
			continue // another worker has it
		}
		if err := s.d.Statuses.PostCommitStatus(ctx, r.InstallationID, r.Repository, r.CommitSHA, st); err != nil {
			s.d.Log.WarnContext(ctx, "codehost: post final commit status", "repository", r.Repository,
				"sha", r.CommitSHA, "deployment_id", r.DeploymentID, "attempt", r.Attempts+1, "err", err)
			if r.Attempts+1 < maxStatusAttempts {
				if _, err := s.d.DB.NewUpdate().Model((*statusRow)(nil)).Set("done = ?", false).
					Where("id = ?", r.ID).Exec(context.WithoutCancel(ctx)); err != nil {
					return posted, db.Translate(err)
				}
			}
			continue
		}
		posted++
	}
	return posted, nil
}
