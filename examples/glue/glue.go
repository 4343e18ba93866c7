// Package glue adapts Keelson's modules to one another. Each module declares
// the small interfaces it needs of others (deployments.ProjectSource,
// domains.Access, teams.Users, ...); the types here are how one module's
// service answers another's, mostly by copying a record into the asking
// module's own type. The reference server (examples/server) and the
// embedding example (examples/embed) both build the service with them; an
// embedder may import this package or copy the few adapters it needs.
//
// It holds no logic of its own and starts nothing. The questions a module
// asks of one built after it are not here: they read that module's tables
// (teams.Members, projects.Counts, fleet.Usage, bandwidth.Usage), and
// notifications are events (platform/events).
package glue

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/uptrace/bun"

	"github.com/keelson-dev/keelson/auth"
	"github.com/keelson-dev/keelson/auth/apitokens"
	"github.com/keelson-dev/keelson/auth/oauth"
	"github.com/keelson-dev/keelson/auth/teams"
	"github.com/keelson-dev/keelson/codehost"
	"github.com/keelson-dev/keelson/deployments"
	"github.com/keelson-dev/keelson/deployments/bandwidth"
	"github.com/keelson-dev/keelson/deployments/hosts"
	"github.com/keelson-dev/keelson/plans"
	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/projects"
	"github.com/keelson-dev/keelson/projects/domains"
)

// Bearer sends API tokens (by their prefix) to the tokens module and
// every other bearer token to the auth module's sessions.
type Bearer struct {
	Sessions platform.Authenticator
	Tokens   platform.Authenticator
}

func (b Bearer) Authenticate(ctx context.Context, token string) (platform.Principal, error) {
	if platform.IsAPIToken(token) {
		return b.Tokens.Authenticate(ctx, token)
	}
	return b.Sessions.Authenticate(ctx, token)
}

// TokenUsers adapts the auth module to apitokens.Users.
type TokenUsers struct{ Auth *auth.Service }

func (u TokenUsers) UserByID(ctx context.Context, id string) (*apitokens.User, error) {
	x, err := u.Auth.UserByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return &apitokens.User{ID: x.ID, Email: x.Email}, nil
}

// BandwidthProjects adapts the projects module to bandwidth.Projects.
type BandwidthProjects struct{ Projects *projects.Service }

func (b BandwidthProjects) ProjectBySlug(ctx context.Context, slug string) (*bandwidth.Project, error) {
	p, err := b.Projects.ProjectBySlug(ctx, slug)
	if err != nil {
		return nil, err
	}
	return &bandwidth.Project{ID: p.ID, OwnerID: p.OwnerID, Slug: p.Slug, PlanName: p.Plan.Name,
		MaxBandwidthGb: p.Plan.MaxBandwidthGb}, nil
}

// ProjectRepos adapts the projects module to codehost.ProjectLookup.
type ProjectRepos struct{ Projects *projects.Service }

func (p ProjectRepos) ProjectsForRepository(ctx context.Context, urls []string, repoID string) ([]codehost.RepoProject, error) {
	links, err := p.Projects.ProjectsForRepository(ctx, urls, repoID)
	if err != nil {
		return nil, err
	}
	out := make([]codehost.RepoProject, len(links))
	for i, l := range links {
		out[i] = codehost.RepoProject{
			ProjectID: l.ProjectID, OwnerID: l.OwnerID, AutoDeploy: l.AutoDeploy,
			AutoDeployBranch: l.AutoDeployBranch, RepoURL: l.RepoURL, HasWebhookSecret: l.HasWebhookSecret,
		}
	}
	return out, nil
}

// OwnsProject implements codehost.ProjectLookup.
func (p ProjectRepos) OwnsProject(ctx context.Context, userID, projectID string) (bool, error) {
	_, err := p.Projects.Get(ctx, userID, projectID)
	if errors.Is(err, platform.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// MayDeploy implements codehost.ProjectLookup with the decision a push
// deployment's trigger takes for the member it deploys as (the deployments
// module's Access, ProjectAccess here): userID's role on the project holds
// deployments:write. It is decided by that role alone, so the principal of
// the request that asks (another member, maybe with an API token) is left
// out. No role or too low a role is false; any other error is returned.
func (p ProjectRepos) MayDeploy(ctx context.Context, userID, projectID string) (bool, error) {
	err := ProjectAccess(p).Authorize(platform.WithPrincipal(ctx, platform.Principal{}), userID, projectID, platform.DeploymentsWrite)
	if errors.Is(err, platform.ErrNotFound) || errors.Is(err, platform.ErrForbidden) {
		return false, nil
	}
	return err == nil, err
}

// DeploymentResults adapts the deployments module to codehost.DeploymentResults
// (the final commit status of a push deployment).
type DeploymentResults struct{ Deployments *deployments.Service }

func (r DeploymentResults) DeploymentResult(ctx context.Context, ownerID, id string) (*codehost.DeploymentResult, error) {
	d, err := r.Deployments.Get(ctx, ownerID, id)
	if err != nil {
		return nil, err
	}
	res := &codehost.DeploymentResult{Ended: d.Status.Terminal(), Succeeded: d.Status == deployments.StatusLive}
	switch {
	case d.Status == deployments.StatusLive:
		res.URL = d.DeployedURL
	case d.Status == deployments.StatusCancelled:
		res.Error = "the deployment was cancelled"
	case res.Ended:
		res.Error = d.ErrorMessage
	}
	return res, nil
}

// OAuthConnector adapts the oauth module to codehost.IdentityConnector: a
// one-time connect ticket, bound to the asking browser by its cookie, whose
// successful link continues to next (the app's install page).
type OAuthConnector struct{ OAuth *oauth.Service }

func (c OAuthConnector) ConnectFirst(ctx context.Context, userID, next string) (string, *http.Cookie, error) {
	t, err := c.OAuth.IssueConnectTicket(ctx, userID, next)
	if err != nil {
		return "", nil, err
	}
	return t.ConnectURL, t.Cookie, nil
}

// PushDeployer adapts the deployments module to codehost.Deployer; a
// quota refusal passes through as its 403 *platform.Error.
type PushDeployer struct{ Deployments *deployments.Service }

func (t PushDeployer) Trigger(ctx context.Context, projectID, ownerID, sha, reason string) (string, error) {
	d, err := t.Deployments.Trigger(ctx, deployments.TriggerParams{ProjectID: projectID, OwnerID: ownerID, CommitSHA: sha, Reason: reason})
	if err != nil {
		return "", err
	}
	return d.ID, nil
}

// CodehostGit adapts the codehost module to deployments.GitCredentials and
// RepoAccess: installation tokens for the private repositories of the
// project owner's installations that the owner may access themselves.
//
// It is the one question between modules that runs against the build
// order: codehost triggers deployments, and deployments asks codehost for
// clone credentials, both at run time, and neither answer is in a table
// alone (the code host is asked with the owner's token). So it reads the
// service the host stores in *Codehost once codehost is built, before any
// module starts; a nil service answers as a code host with no app does.
type CodehostGit struct{ Codehost **codehost.Service }

// CheckRepoAccess implements deployments.RepoAccess: a deployment of a
// private repository of the owner's installations is queued only when the
// code host, asked with the owner's own token, lets the owner access it.
func (g CodehostGit) CheckRepoAccess(ctx context.Context, projectID, repoURL string) error {
	if *g.Codehost == nil {
		return nil
	}
	return (*g.Codehost).CheckRepoAccess(ctx, projectID, repoURL)
}

func (g CodehostGit) GitAuthFor(ctx context.Context, projectID, repoURL string) (*deployments.GitAuth, error) {
	if *g.Codehost == nil {
		return nil, nil
	}
	auth, err := (*g.Codehost).GitAuthFor(ctx, projectID, repoURL)
	if err != nil || auth == nil {
		return nil, err
	}
	return &deployments.GitAuth{Username: auth.Username, Password: auth.Password}, nil
}

// HookDeployer adapts the deployments module to deployhooks.Deployer.
type HookDeployer struct{ Deployments *deployments.Service }

func (d HookDeployer) Trigger(ctx context.Context, projectID, ownerID, reason string) (string, error) {
	dep, err := d.Deployments.Trigger(ctx, deployments.TriggerParams{ProjectID: projectID, OwnerID: ownerID, Reason: reason})
	if err != nil {
		return "", err
	}
	return dep.ID, nil
}

// DomainProjects adapts the projects and plans modules to domains.Projects.
type DomainProjects struct {
	Projects *projects.Service
	Plans    *plans.Service
}

func (d DomainProjects) Project(ctx context.Context, ownerID, projectID string) (*domains.Project, error) {
	// The effective plan (a project's own plan, capped by its owner's);
	// ErrNotFound once the project is being deleted or belongs to another
	// owner account.
	info, err := d.Projects.ProjectForDeploy(ctx, projectID)
	if err != nil {
		return nil, err
	}
	if info.OwnerID != ownerID {
		return nil, platform.NotFound("project not found")
	}
	pl, err := d.Plans.PlanByName(ctx, info.PlanName)
	if err != nil {
		// %v: a missing plan must not read as a missing project (whose
		// domains the periodic check deletes).
		return nil, fmt.Errorf("plan %q of project %s: %v", info.PlanName, projectID, err)
	}
	return &domains.Project{Slug: info.Slug, PlanName: pl.Name, CustomDomains: pl.CustomDomains}, nil
}

// ProjectOwner adapts the projects module's authorisation to domains.Access
// and deployhooks.Projects.
type ProjectOwner struct{ Projects *projects.Service }

func (d ProjectOwner) Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) (string, error) {
	acc, err := d.Projects.Authorize(ctx, userID, projectID, perm)
	if err != nil {
		return "", err
	}
	return acc.OwnerID, nil
}

// MailNotifier mails a user through the auth module's mailer (SMTP, or the
// log without KEELSON_SMTP_URL); an owner account that is a team is told
// through its first owner.
type MailNotifier struct {
	Users  *auth.Service
	Mailer auth.Mailer
	Teams  *teams.Service
}

func (n MailNotifier) Notify(ctx context.Context, userID, subject, text string) error {
	if owner, err := n.Teams.TeamOwner(ctx, userID); err == nil {
		userID = owner
	}
	u, err := n.Users.UserByID(ctx, userID)
	if err != nil {
		return fmt.Errorf("user %s: %v", userID, err)
	}
	return n.Mailer.Send(ctx, auth.Mail{To: u.Email, Subject: subject, Text: text})
}

// BuildShares gives the engines each owner's share of the build slots from
// their account plan: PerUser at once, twice that on a plan with
// priorityBuilds (whose builds are also taken first); an account on a
// FREE-tier plan counts against the engine's free build slots. An engine that
// cannot read the plan uses the default share, counted as FREE.
type BuildShares struct {
	Plans   *plans.Service
	Teams   *teams.Service
	PerUser int // builds one owner runs at once
}

func (b BuildShares) BuildShare(ctx context.Context, ownerID string) (deployments.Share, error) {
	p, err := AccountPlan(ctx, b.Plans, b.Teams, ownerID)
	if err != nil {
		return deployments.Share{}, err
	}
	sh := deployments.Share{Max: b.PerUser, Priority: p.PriorityBuilds, Free: p.Tier == plans.TierFree}
	if p.PriorityBuilds {
		sh.Max = 2 * b.PerUser
	}
	return sh, nil
}

// PlanSource adapts the plans module to projects.PlanSource; an account
// is a user or a team (whose plan is its own, else its owner's).
type PlanSource struct {
	Plans *plans.Service
	Teams *teams.Service
}

func (p PlanSource) PlanByName(ctx context.Context, name string) (*projects.Plan, error) {
	pl, err := p.Plans.PlanByName(ctx, name)
	if err != nil {
		return nil, err
	}
	return toProjectsPlan(pl), nil
}

func (p PlanSource) AccountPlan(ctx context.Context, accountID string) (*projects.Plan, error) {
	pl, err := AccountPlan(ctx, p.Plans, p.Teams, accountID)
	if err != nil {
		return nil, err
	}
	return toProjectsPlan(pl), nil
}

// QuotaPlan implements projects.PlanSource (see QuotaPlan).
func (p PlanSource) QuotaPlan(ctx context.Context, accountID string) (*projects.Plan, string, error) {
	pl, quota, err := QuotaPlan(ctx, p.Plans, p.Teams, accountID)
	if err != nil {
		return nil, "", err
	}
	return toProjectsPlan(pl), quota, nil
}

func toProjectsPlan(p *plans.Plan) *projects.Plan {
	return &projects.Plan{
		Name: p.Name, Tier: string(p.Tier), TierRank: p.Tier.Rank(),
		MaxProjects: p.MaxProjects, MaxDeployments: p.MaxDeployments, MaxMemoryMi: p.MaxMemoryMi,
		MaxCpuM: p.MaxCpuM, MaxStorageGi: p.MaxStorageGi, BuildTimeoutMins: p.BuildTimeoutMins,
		PriorityBuilds: p.PriorityBuilds, Public: p.Public, MaxBandwidthGb: p.MaxBandwidthGb,
	}
}

// ProjectAccess adapts the projects module's one authorisation point to
// deployments.Access.
type ProjectAccess struct{ Projects *projects.Service }

func (p ProjectAccess) Authorize(ctx context.Context, userID, projectID string, perm platform.Permission) error {
	_, err := p.Projects.Authorize(ctx, userID, projectID, perm)
	return err
}

func (p ProjectAccess) Accounts(ctx context.Context, userID string) ([]string, error) {
	return p.Projects.Accounts(ctx, userID)
}

// DeploySource adapts the projects module to deployments.ProjectSource,
// with a pinned host's task queue from the hosts register in DB.
type DeploySource struct {
	Projects *projects.Service
	DB       bun.IDB
}

func (s DeploySource) ProjectForDeploy(ctx context.Context, projectID string) (*deployments.DeploySpec, error) {
	p, err := s.Projects.ProjectForDeploy(ctx, projectID)
	if err != nil {
		return nil, err
	}
	env := make([]deployments.EnvVar, len(p.Env))
	for i, e := range p.Env {
		env[i] = deployments.EnvVar{Key: e.Key, Value: e.Value, Secret: e.Secret}
	}
	spec := &deployments.DeploySpec{
		OwnerID: p.OwnerID, Slug: p.Slug, Name: p.Name, RepoURL: p.RepoURL, Branch: p.Branch,
		Framework: p.Framework, Port: p.Port, BuildCommand: p.BuildCommand, StartCommand: p.StartCommand,
		Region: p.Region, Env: env,
		Limits: deployments.Limits{
			BuildTimeout: time.Duration(p.BuildTimeoutMins) * time.Minute,
			MemoryMi:     p.MaxMemoryMi, CPUMillis: p.MaxCpuM, StorageGi: p.MaxStorageGi, Priority: p.PriorityBuilds,
		},
		MaxDeploymentsPerMonth: p.MaxDeployments, PlanName: p.PlanName, PinnedHost: p.Host,
	}
	if p.Host != "" {
		if spec.PinnedQueue, err = hosts.QueueOf(ctx, s.DB, p.Host); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// TeamUsers adapts the auth module to teams.Users.
type TeamUsers struct{ Auth *auth.Service }

func (u TeamUsers) UserByID(ctx context.Context, id string) (*teams.User, error) {
	x, err := u.Auth.UserByID(ctx, id)
	if err != nil {
		return nil, err
	}
	return &teams.User{ID: x.ID, Email: x.Email, EmailVerified: x.EmailVerified}, nil
}

// TeamMailer adapts the auth module's mailer to teams.Mailer.
type TeamMailer struct{ Mailer auth.Mailer }

func (m TeamMailer) Send(ctx context.Context, to, subject, text string) error {
	return m.Mailer.Send(ctx, auth.Mail{To: to, Subject: subject, Text: text})
}

// TeamPlans adapts the plans module to teams.Plans.
type TeamPlans struct{ Plans *plans.Service }

func (p TeamPlans) TeamPlan(ctx context.Context, teamID, ownerID string) (string, bool, error) {
	pl, err := p.Plans.TeamPlan(ctx, teamID, ownerID)
	if err != nil {
		return "", false, err
	}
	return pl.Name, pl.TeamMembers, nil
}

// AccountPlan is the plan of an owner account: a user's account plan, or a
// team's plan (its own, else its first owner's account plan).
func AccountPlan(ctx context.Context, p *plans.Service, t *teams.Service, accountID string) (*plans.Plan, error) {
	pl, _, err := QuotaPlan(ctx, p, t, accountID)
	return pl, err
}

// QuotaPlan is AccountPlan with the account whose plan it is, which counts
// the projects against its maxProjects: the account itself (a user, or a
// team with a plan of its own), else the team's first owner.
func QuotaPlan(ctx context.Context, p *plans.Service, t *teams.Service, accountID string) (*plans.Plan, string, error) {
	if t != nil {
		owner, err := t.TeamOwner(ctx, accountID)
		switch {
		case err == nil:
			pl, own, err := p.OwnTeamPlan(ctx, accountID)
			if err != nil || own {
				return pl, accountID, err
			}
			accountID = owner
		case !errors.Is(err, platform.ErrNotFound):
			return nil, "", err
		}
	}
	pl, err := p.AccountPlan(ctx, accountID)
	return pl, accountID, err
}
