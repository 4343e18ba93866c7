package projects

import (
	"context"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/platform/db"
	"github.com/uptrace/bun"
)

// Usage is the caller's use of each quota of their account plan.
type Usage struct {
	Plan        UsagePlan          `json:"plan" doc:"The caller's account plan"`
	PeriodStart time.Time          `json:"periodStart" doc:"Start of the current calendar month (UTC), when deployment counts reset"`
	PeriodEnd   time.Time          `json:"periodEnd" doc:"Start of the next calendar month (UTC)"`
	Projects    Quota              `json:"projects" doc:"Projects (not deleted) counted against maxProjects: the caller's own, and those of the teams that have no plan of their own and so use the caller's (teams they were the first owner of)"`
	Deployments []ProjectDeploys   `json:"deployments" doc:"Deployments started this month per project against its plan's maxDeployments"`
	Counted     bool               `json:"deploymentsCounted" doc:"false when this server cannot count deployments (counts are then 0)"`
	Logs        *LogQuota          `json:"logs,omitempty" doc:"Stored deployment logs against the account's log budget (absent when this server does not count them)"`
	Bandwidth   []ProjectBandwidth `json:"bandwidth,omitempty" doc:"Bytes each project's hosts carried this month through the ingress against its plan's maxBandwidthGb (absent when this server does not meter them)"`
}

// ProjectBandwidth is one project's bandwidth this month.
type ProjectBandwidth struct {
	ProjectID  string `json:"projectId"`
	Slug       string `json:"slug"`
	PlanName   string `json:"planName" doc:"The project's effective plan"`
	UsedBytes  int64  `json:"usedBytes" doc:"Bytes of request and response bodies (and upgraded connections) the ingress carried for the project's hosts this month"`
	LimitBytes int64  `json:"limitBytes" doc:"maxBandwidthGb of the effective plan in bytes (1 GB = 10^9 bytes); past it the project's hosts answer 429 until the month ends or the plan changes. 0 means no limit"`
}

// LogQuota is an account's stored log bytes against its log budget.
type LogQuota struct {
	UsedBytes  int64 `json:"usedBytes" doc:"Bytes of log messages stored for all the account's deployments (build, app and system lines)"`
	LimitBytes int64 `json:"limitBytes" doc:"The account log budget; past it the logs of the oldest ended deployments are deleted (never those of a LIVE deployment or a running build). 0 means no limit"`
}

// UsagePlan is the account plan in a usage report. Limits of 0 mean no limit.
type UsagePlan struct {
	Name             string `json:"name"`
	Tier             string `json:"tier"`
	MaxProjects      int    `json:"maxProjects"`
	MaxDeployments   int    `json:"maxDeployments"`
	MaxMemoryMi      int    `json:"maxMemoryMi"`
	MaxCpuM          int    `json:"maxCpuM"`
	MaxStorageGi     int    `json:"maxStorageGi"`
	BuildTimeoutMins int    `json:"buildTimeoutMins"`
	PriorityBuilds   bool   `json:"priorityBuilds"`
	MaxBandwidthGb   int    `json:"maxBandwidthGb"`
}

// Quota is use against a limit (0: no limit).
type Quota struct {
	Used  int `json:"used"`
	Limit int `json:"limit" doc:"0 means no limit"`
}

// ProjectDeploys is one project's deployments this month.
type ProjectDeploys struct {
	ProjectID string `json:"projectId"`
	Slug      string `json:"slug"`
	PlanName  string `json:"planName" doc:"The project's effective plan"`
	Used      int    `json:"used"`
	Limit     int    `json:"limit" doc:"maxDeployments of the effective plan; 0 means no limit"`
}

// Usage reports owner's use of their quotas.
func (s *Service) Usage(ctx context.Context, owner string) (*Usage, error) {
	acct, err := s.d.Plans.AccountPlan(ctx, owner)
	if err != nil {
		return nil, wrap("account plan", err)
	}
	var rows []projectRow
	if err := s.d.DB.NewSelect().Model(&rows).Column("id", "slug", "plan_name").
		Where("owner_id = ? AND status <> ?", owner, StatusDeleted).
		OrderExpr("created_at ASC, id ASC").Scan(ctx); err != nil {
		return nil, wrap("usage", err)
	}
	// The owner's projects and those of the teams that borrow their plan.
	live, err := countedAgainst(ctx, s.d.DB, owner)
	if err != nil {
		return nil, wrap("usage", err)
	}
	counts := map[string]int{}
	counted := s.d.Deployments != nil
	if counted {
		counts, err = s.d.Deployments.DeploymentsThisMonth(ctx, owner)
		switch {
		case errors.Is(err, ErrNotCounted):
			counts, counted = map[string]int{}, false
		case err != nil:
			return nil, wrap("deployments this month", err)
		}
	}
	now := s.now()
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	u := &Usage{
		Plan: UsagePlan{Name: acct.Name, Tier: acct.Tier, MaxProjects: acct.MaxProjects, MaxDeployments: acct.MaxDeployments,
			MaxMemoryMi: acct.MaxMemoryMi, MaxCpuM: acct.MaxCpuM, MaxStorageGi: acct.MaxStorageGi,
			BuildTimeoutMins: acct.BuildTimeoutMins, PriorityBuilds: acct.PriorityBuilds, MaxBandwidthGb: acct.MaxBandwidthGb},
		PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0),
		Projects:    Quota{Used: live, Limit: acct.MaxProjects},
		Deployments: make([]ProjectDeploys, 0, len(rows)),
		Counted:     counted,
	}
	if s.d.Logs != nil {
		used, budget, err := s.d.Logs.LogUsage(ctx, owner)
		if err != nil {
			return nil, wrap("log usage", err)
		}
		u.Logs = &LogQuota{UsedBytes: used, LimitBytes: budget}
	}
	plans := map[string]*Plan{}
	for _, r := range rows {
		p, ok := plans[r.PlanName]
		if !ok {
			if p, err = s.effectivePlan(ctx, owner, r.PlanName, acct); err != nil {
				return nil, err
			}
			plans[r.PlanName] = p
		}
		u.Deployments = append(u.Deployments, ProjectDeploys{ProjectID: r.ID, Slug: r.Slug, PlanName: p.Name,
			Used: counts[r.ID], Limit: p.MaxDeployments})
	}
	if s.d.Bandwidth != nil {
		if u.Bandwidth, err = s.bandwidth(ctx, u.Deployments, plans); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// bandwidth is each project's bytes this month against its effective plan
// (by name in plans, as Usage found them).
func (s *Service) bandwidth(ctx context.Context, projects []ProjectDeploys, plans map[string]*Plan) ([]ProjectBandwidth, error) {
	byName := make(map[string]*Plan, len(plans))
	ids := make([]string, len(projects))
	for i, p := range projects {
		ids[i] = p.ProjectID
	}
	for _, p := range plans {
		byName[p.Name] = p
	}
	used, perGB, err := s.d.Bandwidth.BandwidthThisMonth(ctx, ids)
	if err != nil {
		return nil, wrap("bandwidth", err)
	}
	out := make([]ProjectBandwidth, 0, len(projects))
	for _, p := range projects {
		out = append(out, ProjectBandwidth{ProjectID: p.ProjectID, Slug: p.Slug, PlanName: p.PlanName,
			UsedBytes: used[p.ProjectID], LimitBytes: int64(byName[p.PlanName].MaxBandwidthGb) * perGB})
	}
	return out, nil
}

// ProjectPlan is a live project's owner and effective plan, found by slug.
type ProjectPlan struct {
	ID, OwnerID, Slug string
	Plan              *Plan
}

// ProjectBySlug returns the ACTIVE project whose slug is slug, with its
// effective plan (for the ingress' bandwidth limit). Anything else is
// ErrNotFound.
func (s *Service) ProjectBySlug(ctx context.Context, slug string) (*ProjectPlan, error) {
	row := new(projectRow)
	plan, err := s.activeWithPlan(ctx, row, s.d.DB.NewSelect().Model(row).Column("id", "owner_id", "slug", "plan_name").
		Where("slug = ?", slug), "project by slug")
	if err != nil {
		return nil, err
	}
	return &ProjectPlan{ID: row.ID, OwnerID: row.OwnerID, Slug: row.Slug, Plan: plan}, nil
}

// KeepHTTPSlugs are the slugs of the ACTIVE projects whose httpsRedirect is
// false: the ingress serves their hosts on plain HTTP as well as HTTPS.
func (s *Service) KeepHTTPSlugs(ctx context.Context) ([]string, error) {
	var out []string
	err := s.d.DB.NewSelect().Model((*projectRow)(nil)).Column("slug").
		Where("keep_http AND status = ?", StatusActive).Order("slug").Scan(ctx, &out)
	return out, wrap("keep-HTTP slugs", err)
}

// activeWithPlan scans the ACTIVE project q selects into row and returns its
// effective plan. No such project is ErrNotFound; what names the lookup in
// other errors.
func (s *Service) activeWithPlan(ctx context.Context, row *projectRow, q *bun.SelectQuery, what string) (*Plan, error) {
	if err := q.Where("status = ?", StatusActive).Limit(1).Scan(ctx); err != nil {
		if err = db.Translate(err); isNotFound(err) {
			return nil, notFound()
		}
		return nil, wrap(what, err)
	}
	acct, err := s.d.Plans.AccountPlan(ctx, row.OwnerID)
	if err != nil {
		return nil, wrap("account plan", err)
	}
	return s.effectivePlan(ctx, row.OwnerID, row.PlanName, acct)
}

// PinnedHost is the host id project id is pinned to ("" for any).
func (s *Service) PinnedHost(ctx context.Context, id string) (host string, err error) {
	err = s.d.DB.NewSelect().Model((*projectRow)(nil)).Column("host").Where("id = ?", id).Scan(ctx, &host)
	return host, wrap("pinned host", err)
}
