package projects

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/projects/internal/auditsum"
	"github.com/keelson-dev/keelson/projects/internal/envvars"
	"github.com/keelson-dev/keelson/projects/slugs"
	"github.com/uptrace/bun"
)

// CreateInput is the body of POST /projects (SPEC 4.4).
type CreateInput struct {
	Name                 string `json:"name" minLength:"1" maxLength:"100" doc:"Display name; the slug is derived from it"`
	RepoURL              string `json:"repoUrl" minLength:"1" maxLength:"2048" doc:"https URL of the git repository (no credentials), e.g. https://github.com/owner/repo; file:// or an absolute path only when the server allows local repositories"`
	Framework            string `json:"framework" minLength:"1" maxLength:"50" pattern:"^[A-Za-z0-9][A-Za-z0-9._+-]*$" patternDescription:"letters, digits, dot, underscore, plus or hyphen" doc:"Framework preset, e.g. node, go, static"`
	Port                 int    `json:"port" minimum:"1" maximum:"65535" doc:"Port the app declares (the runtime passes the port it assigns in PORT)"`
	IsPrivate            bool   `json:"isPrivate,omitempty" doc:"The repository is private (default false)"`
	AutoDeploy           bool   `json:"autoDeploy,omitempty" doc:"Deploy on pushes to autoDeployBranch (default false)"`
	AutoDeployBranch     string `json:"autoDeployBranch,omitempty" maxLength:"255" pattern:"^[A-Za-z0-9._/-]*$" patternDescription:"a git branch name" doc:"Branch to deploy (empty: the repository's default branch)"`
	CodehostRepositoryID string `json:"codehostRepositoryId,omitempty" maxLength:"64" pattern:"^[A-Za-z0-9_.:-]*$" patternDescription:"the code host's repository id" doc:"Repository id at the code host"`
	WebhookSecret        string `json:"webhookSecret,omitempty" maxLength:"256" writeOnly:"true" doc:"Write-only; sealed at rest, never answered"`
	TeamID               string `json:"teamId,omitempty" maxLength:"36" doc:"Create the project in this team (the caller must be its admin or owner); absent: the caller's own"`
}

// EnvVarIn is an env var in a settings update.
type EnvVarIn struct {
	Key      string `json:"key" minLength:"1" maxLength:"128" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" patternDescription:"a letter or underscore, then letters, digits or underscores" doc:"Name; unique (case-sensitive) within the project; PORT is reserved"`
	Value    string `json:"value" maxLength:"16384" doc:"Value; for a secret, \"********\" keeps the stored value"`
	IsSecret bool   `json:"isSecret,omitempty" doc:"Seal at rest and mask in responses (default false)"`
}

// SettingsInput is the body of PATCH /projects/:id/settings (SPEC 4.4). The
// required fields replace; optional fields left out keep their value.
type SettingsInput struct {
	Region               string     `json:"region" minLength:"1" maxLength:"64" doc:"One of the server's regions (KEELSON_REGIONS)"`
	PlanName             string     `json:"planName" minLength:"1" maxLength:"64" doc:"An existing plan, not above the owner's account plan tier"`
	EnvVars              []EnvVarIn `json:"envVars" maxItems:"100" doc:"The full set of env vars (replaces the stored set), at most 100, 256 KiB in total"`
	StartCommand         *string    `json:"startCommand,omitempty" maxLength:"4096" doc:"Start command (empty: the framework preset)"`
	BuildCommand         *string    `json:"buildCommand,omitempty" maxLength:"4096" doc:"Build command (empty: the framework preset)"`
	IsPrivate            *bool      `json:"isPrivate,omitempty" doc:"The repository is private"`
	AutoDeploy           *bool      `json:"autoDeploy,omitempty" doc:"Deploy on pushes to autoDeployBranch"`
	AutoDeployBranch     *string    `json:"autoDeployBranch,omitempty" maxLength:"255" pattern:"^[A-Za-z0-9._/-]*$" patternDescription:"a git branch name" doc:"Branch to deploy (empty: the default branch)"`
	CodehostRepositoryID *string    `json:"codehostRepositoryId,omitempty" maxLength:"64" pattern:"^[A-Za-z0-9_.:-]*$" patternDescription:"the code host's repository id" doc:"Repository id at the code host"`
	WebhookSecret        *string    `json:"webhookSecret,omitempty" maxLength:"256" writeOnly:"true" doc:"Write-only; empty string removes it"`
	HTTPSRedirect        *bool      `json:"httpsRedirect,omitempty" doc:"Redirect plain HTTP to HTTPS once a certificate is held (true, the default), or serve plain HTTP too (false). Changing it needs admin"`
	Host                 *string    `json:"host,omitempty" maxLength:"64" pattern:"^[A-Za-z0-9._:-]*$" patternDescription:"a host id (GET /hosts)" doc:"Pin the project's apps to this host (GET /hosts), or \"\" to unpin. Changing it needs the platform ADMIN role; an unknown host is a 400"`
}

func (in *CreateInput) validate(allowLocal bool) (repo, key string, err error) {
	if strings.TrimSpace(in.Name) == "" {
		return "", "", platform.Invalid("name: must not be blank")
	}
	for _, f := range []struct{ name, v string }{
		{"name", in.Name}, {"framework", in.Framework}, {"webhookSecret", in.WebhookSecret},
	} {
		if err := noNUL(f.name, f.v); err != nil {
			return "", "", err
		}
	}
	if in.Port < 1 || in.Port > 65535 {
		return "", "", platform.Invalid("port: must be an integer from 1 to 65535")
	}
	if err := checkBranch("autoDeployBranch", in.AutoDeployBranch); err != nil {
		return "", "", err
	}
	return checkRepoURL(in.RepoURL, allowLocal)
}

// Create stores a new project of user (or of in.TeamID), after checking
// the maxProjects quota it counts against (PlanSource.QuotaPlan) atomically
// with the insert.
func (s *Service) Create(ctx context.Context, user string, in CreateInput) (*Project, error) {
	repo, key, err := in.validate(s.d.AllowLocalRepos)
	if err != nil {
		return nil, err
	}
	owner, err := s.createOwner(ctx, user, in.TeamID)
	if err != nil {
		return nil, err
	}
	base := slugs.Base(strings.TrimSpace(in.Name))
	if err := slugs.CheckReserved(strings.TrimSpace(in.Name), base, s.d.ReservedSlugs); err != nil {
		return nil, err
	}
	// Read the plan before the transaction: the plan source uses the pool,
	// and SQLite has one connection.
	plan, quota, err := s.d.Plans.QuotaPlan(ctx, owner)
	if err != nil {
		return nil, wrap("account plan", err)
	}
	if err := s.create.prepare(ctx, s.d.DB); err != nil {
		return nil, wrap("prepare", err)
	}
	sealedHook := ""
	if in.WebhookSecret != "" {
		if sealedHook, err = s.d.Sealer.Seal(in.WebhookSecret); err != nil {
			return nil, fmt.Errorf("projects: seal webhook secret: %w", err)
		}
	}
	now := s.now()
	row := &projectRow{
		ID: platform.NewID(), OwnerID: owner, TeamID: in.TeamID, CreatedBy: user, QuotaID: quota, Name: strings.TrimSpace(in.Name), RepoURL: repo, RepoKey: key,
		Framework: in.Framework, Port: in.Port, IsPrivate: in.IsPrivate, AutoDeploy: in.AutoDeploy,
		AutoDeployBranch: in.AutoDeployBranch, CodehostRepositoryID: in.CodehostRepositoryID,
		WebhookSecret: sealedHook, Region: s.d.Regions[0], EnvVars: "[]", Status: StatusActive,
		CreatedAt: now, UpdatedAt: now,
	}
	// A slug taken between our check and the insert (by another owner, whose
	// lock we do not hold) is a unique violation: retry with a new suffix.
	for attempt := 0; ; attempt++ {
		// The quota slot is taken last: its upsert locks the quota account's
		// counter row until the commit (on Postgres), so the other creates
		// counted against it wait for one statement and the commit, not for
		// the whole transaction. A create over the quota rolls back its insert.
		err = db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
			if row.Slug, err = s.freeSlug(ctx, tx, base, attempt > 0); err != nil {
				return err
			}
			if err := s.create.insertProject(ctx, s.d.DB, tx, row); err != nil {
				return err
			}
			if err := s.record(ctx, tx, row, "project.create", "created "+strconv.Quote(row.Name)); err != nil {
				return err
			}
			return s.takeSlot(ctx, tx, quota, plan)
		})
		s.changed(owner)
		if err = db.Translate(err); isConflict(err) && attempt < 5 {
			continue
		}
		break
	}
	if err != nil {
		return nil, wrap("create", err)
	}
	s.d.Logger.InfoContext(ctx, "project created", "project_id", row.ID, "owner_id", owner, "slug", row.Slug)
	out, err := row.toProject()
	if err != nil {
		return nil, err
	}
	out.PlanName = plan.Name // follows the account plan (stored "")
	return out, nil
}

// freeSlug returns base if no live project has it, else base with a random
// suffix that no live project has.
func (s *Service) freeSlug(ctx context.Context, tx bun.Tx, base string, forceSuffix bool) (string, error) {
	cand := base
	if forceSuffix {
		cand = slugs.WithSuffix(base)
	}
	for i := 0; i < 10; i++ {
		var n int
		if err := s.create.slug.QueryRowTx(ctx, s.d.DB, tx, cand).Scan(&n); err != nil {
			return "", err
		}
		if n == 0 {
			return cand, nil
		}
		cand = slugs.WithSuffix(base)
	}
	return "", platform.Conflict("could not find a free slug; try another name")
}

func notFound() error { return platform.NotFound("project not found") }

// Get returns project id as user may read it; a project they hold no role
// on, an absent or a DELETED one is a 404.
func (s *Service) Get(ctx context.Context, user, id string) (*Project, error) {
	row, _, err := s.get(ctx, s.d.DB, user, id, false, platform.ProjectsRead)
	if err != nil {
		return nil, err
	}
	p, err := row.toProject()
	if err != nil {
		return nil, err
	}
	return p, s.fillPlanName(ctx, row.OwnerID, p)
}

// fillPlanName answers projects that follow their owner's account plan
// (planName stored empty) with that plan's name: a project always shows its
// plan, so what GET answers can be sent back to PATCH /settings unchanged.
func (s *Service) fillPlanName(ctx context.Context, owner string, ps ...*Project) error {
	var acct *Plan
	for _, p := range ps {
		if p.PlanName != "" {
			continue
		}
		if acct == nil {
			a, err := s.d.Plans.AccountPlan(ctx, owner)
			if err != nil {
				return wrap("account plan", err)
			}
			acct = a
		}
		p.PlanName = acct.Name
	}
	return nil
}

// ListParams filter and page List.
type ListParams struct {
	Status string // "" all but DELETED
	Limit  int
	After  *platform.Cursor
}

// List returns owner's projects, newest first, and the cursor of the next page.
func (s *Service) List(ctx context.Context, owner string, p ListParams) ([]*Project, string, error) {
	out, err := s.listRows(ctx, owner, p, p.Limit+1)
	if err != nil {
		return nil, "", err
	}
	out, next := platform.TrimPage(out, p.Limit, func(last *Project) platform.Cursor {
		return platform.Cursor{Time: last.CreatedAt, ID: last.ID}
	})
	if err := s.fillPlanName(ctx, owner, out...); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

func (in *SettingsInput) validate() error {
	if len(in.EnvVars) > MaxEnvVars {
		return platform.Invalidf("envVars: at most %d variables", MaxEnvVars)
	}
	seen := map[string]bool{}
	total := 0
	for i, e := range in.EnvVars {
		field := fmt.Sprintf("envVars[%d]", i)
		if !envKeyRE.MatchString(e.Key) || len(e.Key) > MaxEnvKeyLen {
			return platform.Invalidf("%s.key: must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most %d characters)", field, MaxEnvKeyLen)
		}
		if msg, ok := reservedEnv[e.Key]; ok {
			return platform.Invalidf("%s.key: %s", field, msg)
		}
		if seen[e.Key] {
			return platform.Invalidf("%s.key: duplicate key %s", field, e.Key)
		}
		seen[e.Key] = true
		if utf8.RuneCountInString(e.Value) > MaxEnvValueLen {
			return platform.Invalidf("%s.value: at most %d characters", field, MaxEnvValueLen)
		}
		if err := noNUL(field+".value", e.Value); err != nil {
			return err
		}
		if e.IsSecret && e.Value != Mask && len(strings.TrimSpace(e.Value)) < MinSecretLen {
			return platform.Invalidf("%s.value: a secret value must be at least %d characters (not counting surrounding spaces): "+
				"shorter ones cannot be masked in deployment logs safely; lengthen it or set isSecret to false", field, MinSecretLen)
		}
		total += len(e.Key) + len(e.Value)
	}
	if total > MaxEnvTotalBytes {
		return platform.Invalidf("envVars: at most %d bytes of keys and values in total", MaxEnvTotalBytes)
	}
	for _, f := range []struct {
		name string
		v    *string
	}{
		{"startCommand", in.StartCommand}, {"buildCommand", in.BuildCommand},
		{"webhookSecret", in.WebhookSecret}, {"codehostRepositoryId", in.CodehostRepositoryID},
	} {
		if f.v != nil {
			if err := noNUL(f.name, *f.v); err != nil {
				return err
			}
		}
	}
	if in.AutoDeployBranch != nil {
		if err := checkBranch("autoDeployBranch", *in.AutoDeployBranch); err != nil {
			return err
		}
	}
	return nil
}

// UpdateSettings applies a settings update to project id as user
// (developer; secrets and httpsRedirect admin; another plan owner).
func (s *Service) UpdateSettings(ctx context.Context, user, id string, in SettingsInput) (*Project, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	if err := s.checkRegion(in.Region); err != nil {
		return nil, err
	}
	cur, role, err := s.get(ctx, s.d.DB, user, id, false, platform.ProjectsWrite)
	if err != nil {
		return nil, err
	}
	owner := cur.OwnerID
	if err := s.checkSettingsRole(ctx, role, cur, &in); err != nil {
		return nil, err
	}
	if err := s.checkHost(ctx, cur, in.Host); err != nil {
		return nil, err
	}
	if cur.Status != StatusActive {
		return nil, platform.Conflict("project is being deleted (status " + cur.Status + "); its settings cannot change")
	}
	if in.PlanName != cur.PlanName {
		if err := s.checkPlanChoice(ctx, owner, in.PlanName); err != nil {
			return nil, err
		}
	}
	env, err := s.mergeEnv(cur, in.EnvVars)
	if err != nil {
		return nil, err
	}
	upd, err := s.applySettings(cur, in, env)
	if err != nil {
		return nil, err
	}
	err = s.storeSettings(ctx, cur, upd, env)
	s.changed(owner)
	if err != nil {
		return nil, wrap("update settings", err)
	}
	s.d.Logger.InfoContext(ctx, "project settings updated", "project_id", id, "env_vars", len(env), "plan", upd.PlanName)
	if upd.PlanName != cur.PlanName {
		s.published(ctx, "plan changed", s.events.PlanChanged.Publish(ctx, PlanChanged{ProjectID: id}))
	}
	if upd.KeepHTTP != cur.KeepHTTP {
		s.published(ctx, "httpsRedirect changed", s.events.HTTPSRedirectChanged.Publish(ctx, HTTPSRedirectChanged{ProjectID: id}))
	}
	out, err := upd.toProject()
	if err != nil {
		return nil, err
	}
	return out, s.fillPlanName(ctx, owner, out)
}

// applySettings is cur with the settings update in applied (env: the merged
// env vars; a new webhook secret sealed).
func (s *Service) applySettings(cur *projectRow, in SettingsInput, env []storedEnv) (*projectRow, error) {
	upd := *cur
	upd.Region, upd.PlanName, upd.EnvVars = in.Region, in.PlanName, encodeEnv(env)
	setStr(&upd.StartCommand, in.StartCommand)
	setStr(&upd.BuildCommand, in.BuildCommand)
	setStr(&upd.AutoDeployBranch, in.AutoDeployBranch)
	setStr(&upd.CodehostRepositoryID, in.CodehostRepositoryID)
	setStr(&upd.IsPrivate, in.IsPrivate)
	setStr(&upd.AutoDeploy, in.AutoDeploy)
	if in.HTTPSRedirect != nil {
		upd.KeepHTTP = !*in.HTTPSRedirect
	}
	setStr(&upd.Host, in.Host)
	if in.WebhookSecret != nil {
		upd.WebhookSecret = ""
		if *in.WebhookSecret != "" {
			var err error
			if upd.WebhookSecret, err = s.d.Sealer.Seal(*in.WebhookSecret); err != nil {
				return nil, fmt.Errorf("projects: seal webhook secret: %w", err)
			}
		}
	}
	upd.UpdatedAt = s.now()
	return &upd, nil
}

// storeSettings writes upd over cur, with its audit row, in one
// transaction; a project deleted meanwhile is a conflict.
func (s *Service) storeSettings(ctx context.Context, cur, upd *projectRow, env []storedEnv) error {
	return db.InTx(ctx, s.d.DB, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Model(upd).
			Column("region", "plan_name", "env_vars", "start_command", "build_command", "auto_deploy_branch",
				"codehost_repository_id", "is_private", "auto_deploy", "webhook_secret", "keep_http", "host", "updated_at").
			Where("id = ? AND owner_id = ? AND status = ?", cur.ID, cur.OwnerID, StatusActive).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 { // deleted between the read and the write
			return platform.Conflict("project is being deleted; its settings cannot change")
		}
		return s.record(ctx, tx, upd, "project.update", settingsSummary(cur, upd, env))
	})
}

// settingsSummary names what changed from cur to upd (env: upd's env
// vars), values left out.
func settingsSummary(cur, upd *projectRow, env []storedEnv) string {
	old, _ := decodeEnv(cur.EnvVars)
	return auditsum.Settings([]auditsum.Field{{"region", cur.Region, upd.Region}, {"planName", cur.PlanName, upd.PlanName},
		{"startCommand", cur.StartCommand, upd.StartCommand}, {"buildCommand", cur.BuildCommand, upd.BuildCommand},
		{"autoDeployBranch", cur.AutoDeployBranch, upd.AutoDeployBranch}, {"codehostRepositoryId", cur.CodehostRepositoryID, upd.CodehostRepositoryID},
		{"isPrivate", strconv.FormatBool(cur.IsPrivate), strconv.FormatBool(upd.IsPrivate)},
		{"autoDeploy", strconv.FormatBool(cur.AutoDeploy), strconv.FormatBool(upd.AutoDeploy)},
		{"webhookSecret", cur.WebhookSecret, upd.WebhookSecret}, {"host", cur.Host, upd.Host}}, envvars.Map(old), envvars.Map(env))
}

func setStr[T any](dst, v *T) {
	if v != nil {
		*dst = *v
	}
}

// checkPlanChoice: name must exist, be public or the owner's account plan,
// and not be above the account plan's tier.
func (s *Service) checkPlanChoice(ctx context.Context, owner, name string) error {
	plan, err := s.d.Plans.PlanByName(ctx, name)
	if err != nil {
		if isNotFound(err) {
			return platform.Invalidf("planName: no plan named %q", name)
		}
		return wrap("plan by name", err)
	}
	acct, err := s.d.Plans.AccountPlan(ctx, owner)
	if err != nil {
		return wrap("account plan", err)
	}
	if !plan.Public && plan.Name != acct.Name {
		return platform.Forbidden(fmt.Sprintf("planName: plan %s is not public; only accounts an admin assigns it to may use it", plan.Name))
	}
	if plan.TierRank > acct.TierRank {
		return platform.Forbidden(fmt.Sprintf("plan tier quota: plan %s is tier %s, above the limit of your account plan %s (tier %s)",
			plan.Name, plan.Tier, acct.Name, acct.Tier)).WithCode("QUOTA_EXCEEDED")
	}
	return nil
}

// mergeEnv seals new secret values and keeps stored ones sent back masked.
func (s *Service) mergeEnv(cur *projectRow, in []EnvVarIn) ([]storedEnv, error) {
	old, err := decodeEnv(cur.EnvVars)
	if err != nil {
		return nil, err
	}
	ins := make([]envvars.In, len(in))
	for i, e := range in {
		ins[i] = envvars.In{Key: e.Key, Value: e.Value, Secret: e.IsSecret}
	}
	return envvars.Merge(old, ins, Mask, s.d.Sealer.Seal)
}

// PlanInUse reports whether a project that is not DELETED uses plan name
// (plans.UsageChecker).
func (s *Service) PlanInUse(ctx context.Context, name string) (bool, error) {
	return Counts{DB: s.d.DB}.PlanInUse(ctx, name)
}

// effectivePlan is the project's plan unless it is unset, gone, or above the
// owner's account plan; then the account plan.
func (s *Service) effectivePlan(ctx context.Context, owner, planName string, acct *Plan) (*Plan, error) {
	if planName == "" || planName == acct.Name {
		return acct, nil
	}
	p, err := s.d.Plans.PlanByName(ctx, planName)
	if isNotFound(err) {
		s.d.Logger.WarnContext(ctx, "project plan not found; using the account plan", "plan", planName, "owner_id", owner)
		return acct, nil
	}
	if err != nil {
		return nil, wrap("plan by name", err)
	}
	if p.TierRank > acct.TierRank {
		return acct, nil
	}
	return p, nil
}

// ProjectForDeploy returns what deployments needs to deploy project id, with
// plaintext env values and its effective plan's limits. Absent projects and
// projects that are not ACTIVE (DELETING, DELETED, FAILED) are ErrNotFound.
// It does not check the owner: the caller compares OwnerID.
func (s *Service) ProjectForDeploy(ctx context.Context, id string) (*DeployInfo, error) {
	if !platform.ValidID(id) {
		return nil, notFound()
	}
	row := new(projectRow)
	plan, err := s.activeWithPlan(ctx, row, s.d.DB.NewSelect().Model(row).Where("id = ?", id), "project for deploy")
	if err != nil {
		return nil, err
	}
	stored, err := decodeEnv(row.EnvVars)
	if err != nil {
		return nil, err
	}
	env := make([]EnvVar, 0, len(stored))
	for _, e := range stored {
		v := e.V
		if e.S {
			if v, err = s.d.Sealer.Open(e.V); err != nil {
				return nil, fmt.Errorf("projects: open sealed env var %s of project %s: %w", e.K, id, err)
			}
		}
		env = append(env, EnvVar{Key: e.K, Value: v, Secret: e.S})
	}
	return &DeployInfo{
		ID: row.ID, OwnerID: row.OwnerID, Name: row.Name, Slug: row.Slug, RepoURL: row.RepoURL,
		Branch: row.AutoDeployBranch, Framework: row.Framework, Port: row.Port,
		BuildCommand: row.BuildCommand, StartCommand: row.StartCommand, Region: row.Region, Host: row.Host, Env: env,
		PlanName: plan.Name, MaxDeployments: plan.MaxDeployments, MaxMemoryMi: plan.MaxMemoryMi,
		MaxCpuM: plan.MaxCpuM, MaxStorageGi: plan.MaxStorageGi, BuildTimeoutMins: plan.BuildTimeoutMins,
		PriorityBuilds: plan.PriorityBuilds,
	}, nil
}

// WebhookSecret returns the plaintext webhook secret of project id ("" when
// none), for the code-host integration. Absent or non-ACTIVE is ErrNotFound.
func (s *Service) WebhookSecret(ctx context.Context, id string) (string, error) {
	if !platform.ValidID(id) {
		return "", notFound()
	}
	var sealed string
	err := s.d.DB.NewSelect().Model((*projectRow)(nil)).Column("webhook_secret").
		Where("id = ? AND status = ?", id, StatusActive).Scan(ctx, &sealed)
	if err != nil {
		if err = db.Translate(err); isNotFound(err) {
			return "", notFound()
		}
		return "", wrap("webhook secret", err)
	}
	if sealed == "" {
		return "", nil
	}
	v, err := s.d.Sealer.Open(sealed)
	if err != nil {
		return "", fmt.Errorf("projects: open webhook secret of project %s: %w", id, err)
	}
	return v, nil
}

// ProjectsForRepository returns the ACTIVE projects whose normalized repoUrl
// is one of repoURLs' or whose codehostRepositoryId is codehostRepoID (when
// not empty).
func (s *Service) ProjectsForRepository(ctx context.Context, repoURLs []string, codehostRepoID string) ([]RepoLink, error) {
	var keys []string
	for _, u := range repoURLs {
		if k := NormalizeRepoURL(u); k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 && codehostRepoID == "" {
		return nil, nil
	}
	var rows []projectRow
	q := s.d.DB.NewSelect().Model(&rows).Where("status = ?", StatusActive).
		WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			if len(keys) > 0 {
				q = q.WhereOr("repo_key IN (?)", bun.In(keys))
			}
			if codehostRepoID != "" {
				q = q.WhereOr("codehost_repository_id = ?", codehostRepoID)
			}
			return q
		}).OrderExpr("created_at ASC, id ASC")
	if err := q.Scan(ctx); err != nil {
		return nil, wrap("projects for repository", err)
	}
	out := make([]RepoLink, 0, len(rows))
	for _, r := range rows {
		owner := r.OwnerID
		if r.TeamID != "" {
			owner = r.CreatedBy // a team has no code-host link: the member who created or moved it in acts
		}
		out = append(out, RepoLink{ProjectID: r.ID, OwnerID: owner, Slug: r.Slug, AutoDeploy: r.AutoDeploy,
			AutoDeployBranch: r.AutoDeployBranch, RepoURL: r.RepoURL, HasWebhookSecret: r.WebhookSecret != ""})
	}
	return out, nil
}

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (CreateInput) SchemaName() string    { return "CreateProjectRequest" }
func (SettingsInput) SchemaName() string  { return "ProjectSettings" }
func (EnvVarIn) SchemaName() string       { return "EnvVarInput" }
func (ProjectDeploys) SchemaName() string { return "ProjectDeploymentUsage" }
