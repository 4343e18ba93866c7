package projects

import (
	"context"
	"errors"
	"time"

	"github.com/keelson-dev/keelson/platform"
	"github.com/keelson-dev/keelson/platform/db"
	"github.com/keelson-dev/keelson/projects/internal/envvars"
	"github.com/uptrace/bun"
)

type projectRow struct {
	bun.BaseModel `bun:"table:projects"`

	ID                   string    `bun:"id,pk,type:varchar(36)"`
	OwnerID              string    `bun:"owner_id,notnull,type:varchar(36)"`              // the account: a user, or the team (TeamID)
	TeamID               string    `bun:"team_id,notnull,type:varchar(36),default:''"`    // "" for a personal project
	CreatedBy            string    `bun:"created_by,notnull,type:varchar(36),default:''"` // the user who created or last moved it
	QuotaID              string    `bun:"quota_id,notnull,type:varchar(36),default:''"`   // the account whose maxProjects counter holds its slot (counts.go)
	Name                 string    `bun:"name,notnull"`
	Slug                 string    `bun:"slug,notnull,type:varchar(40)"`
	RepoURL              string    `bun:"repo_url,notnull"`
	RepoKey              string    `bun:"repo_key,notnull"` // normalized repoUrl, for ProjectsForRepository
	Framework            string    `bun:"framework,notnull"`
	Port                 int       `bun:"port,notnull"`
	IsPrivate            bool      `bun:"is_private,notnull"`
	AutoDeploy           bool      `bun:"auto_deploy,notnull"`
	AutoDeployBranch     string    `bun:"auto_deploy_branch,notnull"`
	CodehostRepositoryID string    `bun:"codehost_repository_id,notnull"`
	WebhookSecret        string    `bun:"webhook_secret,notnull"` // sealed; "" when none
	Region               string    `bun:"region,notnull"`
	PlanName             string    `bun:"plan_name,notnull"` // "" follows the account plan (answered as its name)
	EnvVars              string    `bun:"env_vars,notnull"`  // JSON []storedEnv, secret values sealed
	StartCommand         string    `bun:"start_command,notnull"`
	BuildCommand         string    `bun:"build_command,notnull"`
	KeepHTTP             bool      `bun:"keep_http,notnull,default:false"` // httpsRedirect false; stored inverted so the default is false
	Host                 string    `bun:"host,notnull,default:''"`         // the host id its apps are pinned to; "" any
	Status               string    `bun:"status,notnull,type:varchar(16)"`
	ErrorMessage         string    `bun:"error_message,notnull"`
	TeardownAt           time.Time `bun:"teardown_at,nullzero"` // when the current teardown attempt began
	CreatedAt            time.Time `bun:"created_at,notnull"`
	UpdatedAt            time.Time `bun:"updated_at,notnull"`
	DeletedAt            time.Time `bun:"deleted_at,nullzero"`
}

// storedEnv is one env var at rest (projects/internal/envvars).
type storedEnv = envvars.Stored

var decodeEnv, encodeEnv = envvars.Decode, envvars.Encode

// Migrations are the projects tables, for the host's db.Migrate.
func Migrations() db.MigrationSet {
	m := (*projectRow)(nil)
	return db.MigrationSet{Module: "projects", Migrations: []db.Migration{{
		ID: "0001_init",
		Up: db.Steps(
			db.CreateTables(m),
			// A slug is unique among projects that are not DELETED, so a deleted
			// project's slug may be reused (partial index: SQLite and Postgres).
			func(ctx context.Context, idb bun.IDB) error {
				_, err := idb.NewCreateIndex().Model(m).Index("projects_slug_live_key").Unique().
					Column("slug").Where("status <> 'DELETED'").IfNotExists().Exec(ctx)
				return err
			},
			db.CreateIndex(m, "projects_owner_created_idx", false, "owner_id", "created_at", "id"),
			db.CreateIndex(m, "projects_repo_key_idx", false, "repo_key"),
			db.CreateIndex(m, "projects_codehost_repo_idx", false, "codehost_repository_id"),
			db.CreateIndex(m, "projects_plan_name_idx", false, "plan_name"),
			db.CreateIndex(m, "projects_status_idx", false, "status"),
		),
	}, {
		// The maxProjects counter per owner (counts.go), filled from the rows.
		ID: "0002_project_counts",
		Up: db.Steps(db.CreateTables((*projectCountRow)(nil)), backfillCounts),
	}, {
		// Postgres: tell every replica's list cache (listcache.go).
		ID: "0003_list_notify",
		Up: listTriggers,
	}, {
		// Projects owned by a team (owner_id is then the team's id).
		ID: "0004_team_projects",
		Up: db.Steps(
			db.AddColumn("projects", "team_id", "varchar(36) NOT NULL DEFAULT ''"),
			db.AddColumn("projects", "created_by", "varchar(36) NOT NULL DEFAULT ''"),
			func(ctx context.Context, idb bun.IDB) error {
				_, err := idb.ExecContext(ctx, "UPDATE projects SET created_by = owner_id WHERE created_by = ''")
				return err
			},
			db.CreateIndex(m, "projects_team_idx", false, "team_id"),
		),
	}, {
		// httpsRedirect false: the ingress serves the project's hosts on plain HTTP too.
		ID: "0005_keep_http",
		Up: db.AddColumn("projects", "keep_http", "BOOLEAN NOT NULL DEFAULT FALSE"),
	}, {
		// host: the project's apps run only on that host (Deps.CheckHost).
		ID: "0006_host",
		Up: db.AddColumn("projects", "host", "VARCHAR(64) NOT NULL DEFAULT ''"),
	}, {
		// quota_id: the counter holding the project's slot (counts.go); older rows were counted under their owner.
		ID: "0007_quota_id",
		Up: db.Steps(db.AddColumn("projects", "quota_id", "varchar(36) NOT NULL DEFAULT ''"), backfillQuotaIDs),
	}}}
}

// Project is a project as the API answers it. Secrets never appear: secret
// env values are "********" and the webhook secret is only hasWebhookSecret.
type Project struct {
	ID                   string      `json:"id" doc:"Project id (UUID)"`
	TeamID               string      `json:"teamId,omitempty" doc:"The team that owns the project; absent for a personal project"`
	Name                 string      `json:"name" doc:"Display name"`
	Slug                 string      `json:"slug" doc:"Unique URL-safe name; the app answers at <slug>.<apps-domain>. Never changes."`
	RepoURL              string      `json:"repoUrl" doc:"Repository URL"`
	Framework            string      `json:"framework" doc:"Framework preset"`
	Port                 int         `json:"port" doc:"Port the app declares"`
	IsPrivate            bool        `json:"isPrivate" doc:"The repository is private"`
	AutoDeploy           bool        `json:"autoDeploy" doc:"Deploy on pushes to autoDeployBranch"`
	AutoDeployBranch     string      `json:"autoDeployBranch" doc:"Branch deployed (empty: the repository's default branch)"`
	CodehostRepositoryID string      `json:"codehostRepositoryId" doc:"Repository id at the code host"`
	HasWebhookSecret     bool        `json:"hasWebhookSecret" doc:"A webhook secret is set (the secret itself is write-only)"`
	Region               string      `json:"region" doc:"Region"`
	PlanName             string      `json:"planName" doc:"Plan of the project: the plan chosen in its settings, else the owner's account plan (which it then follows)"`
	EnvVars              []EnvVarOut `json:"envVars" doc:"Environment variables; secret values are masked"`
	StartCommand         string      `json:"startCommand" doc:"Start command (empty: the framework preset)"`
	BuildCommand         string      `json:"buildCommand" doc:"Build command (empty: the framework preset)"`
	Host                 string      `json:"host,omitempty" doc:"The host (GET /hosts) the project's apps are pinned to: placed only there, failing when it cannot take them; absent: any host"`
	HTTPSRedirect        bool        `json:"httpsRedirect" doc:"Plain HTTP to the app's hosts redirects (308) to HTTPS once the ingress holds a certificate for the host (default true); false serves plain HTTP too"`
	Status               string      `json:"status" enum:"ACTIVE,DELETING,FAILED" doc:"ACTIVE, DELETING, or FAILED (a teardown failed; DELETE retries)"`
	ErrorMessage         string      `json:"errorMessage,omitempty" doc:"Why the last teardown failed"`
	CreatedAt            time.Time   `json:"createdAt" doc:"Creation time (RFC 3339, UTC)"`
	UpdatedAt            time.Time   `json:"updatedAt" doc:"Last change (RFC 3339, UTC)"`
}

// EnvVarOut is an env var in a response.
type EnvVarOut struct {
	Key      string `json:"key" doc:"Name"`
	Value    string `json:"value" doc:"Value; \"********\" when isSecret"`
	IsSecret bool   `json:"isSecret" doc:"Sealed at rest and masked in responses"`
}

// Mask is the value a secret env var is answered with; sending it back in a
// settings update keeps the stored secret.
const Mask = "********"

// envOut is the stored env vars as answered: secret values masked.
func envOut(stored string) ([]EnvVarOut, error) {
	if stored == "" || stored == "[]" {
		return []EnvVarOut{}, nil
	}
	env, err := decodeEnv(stored)
	if err != nil {
		return nil, err
	}
	out := make([]EnvVarOut, 0, len(env))
	for _, e := range env {
		v := e.V
		if e.S {
			v = Mask
		}
		out = append(out, EnvVarOut{Key: e.K, Value: v, IsSecret: e.S})
	}
	return out, nil
}

func (r *projectRow) toProject() (*Project, error) {
	out, err := envOut(r.EnvVars)
	if err != nil {
		return nil, err
	}
	return &Project{
		ID: r.ID, TeamID: r.TeamID, Name: r.Name, Slug: r.Slug, RepoURL: r.RepoURL, Framework: r.Framework, Port: r.Port,
		IsPrivate: r.IsPrivate, AutoDeploy: r.AutoDeploy, AutoDeployBranch: r.AutoDeployBranch,
		CodehostRepositoryID: r.CodehostRepositoryID, HasWebhookSecret: r.WebhookSecret != "",
		Region: r.Region, PlanName: r.PlanName, EnvVars: out, StartCommand: r.StartCommand,
		BuildCommand: r.BuildCommand, HTTPSRedirect: !r.KeepHTTP, Host: r.Host, Status: r.Status, ErrorMessage: r.ErrorMessage,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}, nil
}

// EnvVar is an env var with its plaintext value, for the runtime.
type EnvVar struct {
	Key    string
	Value  string
	Secret bool
}

// DeployInfo is everything deployments needs of a project, with the limits
// of its effective plan (0 means no limit; BuildTimeoutMins 0: runtime default).
type DeployInfo struct {
	ID           string
	OwnerID      string
	Name         string
	Slug         string
	RepoURL      string
	Branch       string // autoDeployBranch, or "" for the default branch
	Framework    string
	Port         int
	BuildCommand string
	StartCommand string
	Region       string
	Host         string   // the host the project is pinned to ("" for any)
	Env          []EnvVar // plaintext; never log or store it

	PlanName         string
	MaxDeployments   int // per project per calendar month, UTC
	MaxMemoryMi      int
	MaxCpuM          int
	MaxStorageGi     int
	BuildTimeoutMins int
	PriorityBuilds   bool
}

// RepoLink is a project linked to a repository, for the code-host webhook.
type RepoLink struct {
	ProjectID string
	// OwnerID is the user whose code-host link serves the project and as
	// whom its pushes deploy: its owner, or for a team's project the member
	// who created it or moved it into the team (who must still hold
	// developer there for a push to deploy).
	OwnerID          string
	Slug             string
	AutoDeploy       bool
	AutoDeployBranch string
	RepoURL          string
	// HasWebhookSecret: the project has a webhookSecret, so a repository
	// webhook may be signed with it.
	HasWebhookSecret bool
}

func wrap(op string, err error) error { return platform.Wrap("projects: "+op, db.Translate(err)) }

func isNotFound(err error) bool { return errors.Is(err, platform.ErrNotFound) }
func isConflict(err error) bool { return errors.Is(err, platform.ErrConflict) }

// SchemaName methods name these types in the OpenAPI document (platform.SchemaNamer).
func (EnvVarOut) SchemaName() string { return "EnvVar" }
