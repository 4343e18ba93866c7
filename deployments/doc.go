// Package deployments holds deployment records and their routes (SPEC 4.5),
// the Engine interface that orchestrates their workflows, the Activities that
// do each step through a Runtime, the log store and the SSE log route.
// Engines and runtimes live in sub-packages: deployments/local (the embedded
// engine), deployments/process (the process runtime), deployments/ingress
// (the built-in proxy). It does not know projects: it reads them through
// ProjectSource, which the host wires.
//
// Wiring (the same shape as every module):
//
//	svc, err := deployments.New(deployments.Deps{DB: bdb, Auth: authn, Projects: src, Runtime: rt,
//		LogTokenKey: key, NewEngine: func(ed deployments.EngineDeps) (deployments.Engine, error) {
//			return local.New(local.Config{Store: ed.Store, Activities: ed.Activities})
//		}})
//	_ = svc.Register(api)                       // routes
//	_ = db.Migrate(ctx, bdb, deployments.Migrations())
//	_ = svc.Start(ctx)                          // the engine's worker loop
//	defer svc.Close(ctx)                        // engine, runtime's apps, log writer
//
// New builds the store, the log writer and the activities; engines get them
// through EngineDeps and depend only on small interfaces of the store.
//
// Decisions:
//   - Statuses are SPEC's (QUEUED, BUILDING, PROVISIONING, CONFIGURING_DNS,
//     LIVE, FAILED, CANCELLED). Only a project's current deployment is LIVE; a
//     deployment replaced by a newer LIVE one ends CANCELLED with
//     supersededBy / replacedAt set.
//   - Quota: a plan's maxDeployments caps deployments started per project per
//     calendar month (UTC), counted in deployment_usage so deleting
//     deployments does not give quota back; check and insert are atomic.
//   - Logs: each line is masked (secret env values and git credentials become
//     ***), numbered per deployment, stored, then fanned out. The log stream's
//     contract is in sse.go; browsers use POST /deployments/{id}/logs/token
//     and ?token= (see token.go).
//   - Logs across processes (API replicas and Temporal workers on one
//     Postgres database): a sink's numbering survives lines another process
//     stored for the same deployment, and Logs.LinesStored /
//     DeploymentEnded / Resync, fed by deployments/pgnotify (LISTEN/NOTIFY),
//     bring those lines to this process's streams in order.
//   - Log storage: per-deployment caps (LogsConfig), retention of ended
//     deployments' logs (Deps.LogRetention), and a per-account budget
//     (LogsConfig.AccountBudget, logs_budget.go) that deletes the oldest
//     ended deployments' logs first and never a LIVE or running one's.
//   - Deleting a deployment cancels it if it runs, stops its app, removes its
//     route (only if the route still points at it), its workspace, its logs
//     and its record. TeardownProject does that for every deployment of a project.
package deployments
