// Package process is Keelson's default deployments.Runtime: it clones a
// project's repository with git, runs its build command and starts it as a
// plain child process of the server, then routes the project's host to it in the
// built-in ingress proxy (deployments/ingress).
//
// It is meant for one machine and trusted-enough code: apps run as the server's
// own user, without a sandbox. A container or cluster runtime implements the
// same interface where isolation matters.
//
// Layout under Config.DataDir:
//
//	workspaces/<deploymentID>/src   the checkout; the build and the app run here
//	workspaces/<deploymentID>/home  HOME of the build and the app
//	workspaces/<deploymentID>/tmp   TMPDIR
//	cache/                          shared by every build (GOCACHE, GOPATH and
//	                                GOMODCACHE, npm's cache), so rebuilds are fast
//	run/                            one record per running process group (see
//	                                Processes), swept by New after a kill -9
//
// Git: only https repositories are cloned, plus file:// URLs and absolute paths
// when Config.AllowLocalRepos is set. Git runs with GIT_ALLOW_PROTOCOL limited
// to those, no system or global config, no credential helpers and no prompts.
// A Job's GitAuth reaches git as an http.<origin>.extraHeader through
// GIT_CONFIG_COUNT/KEY/VALUE environment variables: never in argv, the URL,
// .git/config or a log line, and only sent to the repository's own origin.
// Repository URLs holding credentials are refused. Submodules are not fetched.
//
// Environment: builds and apps never inherit the server's environment (it
// holds KEELSON_JWT_SECRET and friends). They get PATH, HOME, TMPDIR, the
// shared caches (GOCACHE, GOPATH, GOMODCACHE, GOFLAGS=-modcacherw,
// npm_config_cache), then the job's variables (which may override any of
// those), and for the app PORT last. Secret values of the job (and the git
// credential) are replaced by *** in every line this package sends to the
// LogSink and in every error it returns.
//
// Presets, used when a job's command is empty, keyed by Framework (case-insensitive):
//
//	go, golang                      build: go build -trimpath -o ./.keelson/app .   start: ./.keelson/app
//	node, nodejs, express, next,    build: (npm ci || npm install) && npm run build --if-present
//	nextjs, nest, nestjs            start: npm start
//	static, html                    no build; start: an in-process file server
//
// The static server runs inside the server process (no child process): it
// serves the first of dist/, public/, build/ that exists, else the checkout,
// and never serves a path with a dot-segment (so not .git). The checkout is
// opened as an os.Root and the served directory inside it: a dist/ (or
// public/, build/) that is a symlink leading out of the checkout fails Start
// with a message saying so, and a served file or directory that links out of
// the served directory answers 404. Any other framework needs explicit
// commands. A checkout whose .keelson (where the go preset writes its binary)
// is a symlink or a file is refused by Build and Start.
//
// Start: the app gets a free loopback port in PORT and counts as started when
// GET http://127.0.0.1:PORT/ gets any HTTP response (even a 404 or 500) within
// Config.HealthTimeout, and every socket listening where that request can
// land (127.0.0.1, 0.0.0.0 or :: on PORT, read from /proc/net/tcp and tcp6)
// is held by a process of the app (a socket:[inode] in its /proc/<pid>/fd).
// So another process that bound the port before the app (a second server on
// the machine) never makes the app healthy and is never routed to: the app
// is started once more on another port, as when it exits because another
// process took its port. An answer whose listener cannot be told to be the
// app's (a process of the app whose descriptors cannot be read) does not
// count either. If it exits or times out first, Start fails with its last
// output lines. Stop first waits (up to Config.StopGrace) for requests the
// ingress still has in flight to the deployment, so a swap (route the new
// deployment, then stop the old) loses no request.
//
// Processes: each git command, and each build command and app (under
// `sh -c`), runs in its own process group; a timeout, a cancellation or Stop signals the whole
// group (SIGTERM, then SIGKILL after Config.StopGrace for apps; SIGKILL for
// builds). Whatever a group started dies with it, even what left the group or
// the session (`setsid cmd &`, a daemon's double fork): each group has its own
// cgroup when the server may create one (v2 under the server's cgroup, entered
// at fork; else the v1 pids hierarchy), and every process it starts carries a
// KEELSON_PROCESS_TAG environment variable; when the leader exits, or the
// group is stopped, everything found by cgroup, tag or process group is
// killed until none is left. Without a writable cgroup (a server that is not
// root), a process that both leaves the session and replaces its environment
// (`setsid env -i ...`) is not found. Each running group is recorded in
// <DataDir>/run; New kills what a server killed with -9 left running on the
// same data dir (by record, tag and cgroup) before it starts anything, so a
// restarted server never runs an app next to its orphan. Apps also get
// Pdeathsig=SIGKILL (it reaches the group leader only). A crashed app is
// restarted with exponential backoff on the same
// port when it is free (else on a new one, and the ingress follows); after
// Config.MaxRestarts crashes within Config.RestartWindow the runtime gives up,
// logs it to the deployment's log and leaves the route answering 502.
//
// Limits: BuildTimeout kills the build command (the clone has its own
// Config.CloneTimeout). StorageGi is checked after the build against the
// apparent size of the deployment's workspace (the shared caches are not
// counted). MemoryMi and CPUMillis are NOT enforced for plain processes (an
// rlimit on address space breaks Go and Node runtimes, and cgroups need
// privileges this runtime does not assume); use a container runtime when they
// must hold. Priority has no effect (builds are not queued here).
package process
