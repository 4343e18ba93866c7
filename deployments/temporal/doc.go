// Package temporal runs Keelson deployments on Temporal (go.temporal.io/sdk),
// for when one machine is not enough: API replicas start and cancel
// workflows (Engine), workers on any number of machines run them (NewWorker).
//
// A deployment is one workflow whose id is its workflowName ("deploy-<id>").
// BUILD, PROVISION and DNS are activities that call the same
// deployments.Activities (and so the same deployments.Runtime and the same
// database writes) as the embedded engine; only the orchestration differs:
//
//   - BUILD runs on any worker of the shared task queue, bounded by the plan's
//     build timeout, heart-beating; if its worker is lost (no heartbeat within
//     Timeouts.Heartbeat) Temporal retries it on another worker, which puts the
//     deployment back to QUEUED first (deployments.Activities.Recover). A
//     failing build command is a non-retryable error: the deployment ends FAILED.
//   - PROVISION and DNS run on the building worker's own task queue (its
//     workspace and app are local to it). If that worker is lost, the round
//     starts over from BUILD elsewhere (Timeouts.Rounds times at most).
//   - Cancelling the workflow cancels the running activity through its
//     heartbeat; the runtime kills its processes; the deployment ends CANCELLED.
//   - Before BUILD, a deployment takes a build slot under the fair-share
//     rules the embedded engine follows too (deployments.SlotPolicy):
//     WorkerConfig.BuildSlots at once across every worker, an owner at most
//     their share (WorkerConfig.Shares, plan-driven; WorkerConfig.PerUser by
//     default), FREE owners together at most WorkerConfig.FreeSlots, and a
//     free slot to a priority owner, then the owner with the fewest running,
//     then the oldest. The queue is in the shared database. Past its turn
//     the deployment stays QUEUED, says why once in its log and asks again
//     on a timer. The slot is given back once LIVE or ended (see slots.go
//     for why none is held for ever).
//   - A LIVE deployment's workflow stays open until SignalRelease (a newer
//     deployment of the project went live, or it is deleted): then it stops its
//     app on its worker and ends. ControlRuntime is how an API replica asks for that.
//
// The workflow keeps its own view of the steps (QueryState); the status route
// reads the database row, which the activities write, and Engine.Sync
// describes the workflow to settle rows whose workflow ended without recording
// it (terminated, timed out).
//
// Live logs: workers store lines in the shared database; a log stream on any
// API replica gets them through deployments/pgnotify (Postgres LISTEN/NOTIFY),
// which the reference server wires whenever the database is Postgres.
//
// What it is not: a scheduler of workers. The build slots bound builds
// across the cluster; which worker runs a build is Temporal's task queue.
// Deployments of one project are not serialised across workers beyond the
// conditional state updates of deployments.Activities.
package temporal
