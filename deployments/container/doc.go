// Package container is Keelson's isolating deployments.Runtime: it builds each
// deployment into an image and runs it as one container on the local Docker
// engine (Engine API through the moby client), with the plan's memory and CPU
// as hard limits. It is the default whenever an engine answers; the process
// runtime (deployments/process) remains for development and single-tenant use.
//
// It is not a scheduler: one engine, one machine. The ingress proxy
// (deployments/ingress) stays in the server and reaches each app at its
// address on the instance's app network (a bridge of this host); no port is
// published.
//
// BUILD: the repository is cloned with git on the host into
// <DataDir>/containers/<deploymentID>/src (the credential stays in the
// server's git process: it never enters a container, an image or a build
// context), then sent without .git as the context of a classic-builder build
// (no BuildKit session needed). A regular file named Dockerfile at the root is
// used whatever the framework (framework "docker" requires one); otherwise the
// framework preset becomes a generated Dockerfile (see Images): go and node are
// multi-stage (builder image, then a small run image, running as uid 65534);
// static copies dist/, public/, build/ or the root into a busybox httpd image.
// A project's own BuildCommand/StartCommand run in the preset's builder image.
// Build containers get the plan's memory (no swap on top) and CPU, a pids
// limit for the whole build (a cgroup parent the runtime makes and removes:
// the classic builder has no pids option; no parent, no build), the plan's
// storage limit measured while the build runs (the checkout plus each
// stage's layers over its base and the running step's writable layer; over
// it the build is cancelled),
// run on a network of their own with inter-container traffic off, and are removed on
// success, failure, timeout and cancellation alike (the engine cancels a
// build whose API request is closed). Build output goes to the deployment's
// log, masked. Secret variables are NOT available at build time (no build
// args, no labels): they reach the app as environment variables when its
// container is created. Images are tagged keelson/<instance>-<project>:<deployment>;
// the project's newest successful build is also tagged :cache so the next
// build reuses its layers (dependency download layers included), and that is
// the one image a project keeps beyond its existing deployments. Cleanup
// removes the deployment's tag; CleanupProject removes the rest.
//
// With a Registry, Publish pushes each build as
// <repository>/<project>:<deployment> and returns it by digest, which the
// deployment records; a host whose engine lacks a deployment's image pulls
// it by that digest (never by a tag) when the app starts, and tags it as its
// own keelson/<instance>-<project>:<deployment>. Only that local tag is kept
// (the push tag and the engine's digest references are removed), so Cleanup
// removes a pulled image like a built one. Nothing is ever deleted from the
// registry.
//
// PROVISION: one container per deployment, named and labelled with the
// deployment, the project and this server's instance (a random id kept in its
// data dir, so servers sharing an engine never touch each other's containers,
// and a server started again on the same dir adopts its own). Limits
// are set at create time: memory = MemoryMi with MemorySwap equal (no swap),
// NanoCPUs from CPUMillis, a pids limit, every capability dropped,
// no-new-privileges, never privileged, no mount of any host path, the
// instance's one app network (inter-container traffic off, so apps cannot
// reach each other; one network however many apps, so Docker's address pools
// do not bound their number), PORT and the job's env. The container's address on
// the app network and its PORT are the upstream the ingress proxies to (no
// port is published: a start spawns no docker-proxy and adds no NAT rules;
// the host reaches its own bridges, and the egress rules let the answers
// back in). The app counts as started when GET / gets any HTTP answer.
// Its stdout and stderr flow to the deployment's log (masked). When it exits
// the runtime says why in plain words ("app killed: out of memory (limit 64
// MiB)") and starts it again with backoff; after MaxRestarts crashes within
// RestartWindow it gives up and says so.
//
// EGRESS (see Egress): builds and apps reach the public internet only. New
// installs iptables rules for the instance's two bridges (the engine's
// DOCKER-USER chain for what they send elsewhere, INPUT for what they send to
// this host) and refuses to make a Runtime when it cannot, unless
// Egress.Open; Close removes them. What the engine fetches on the host's own
// network is refused before a build starts: a Dockerfile's ADD from a URL,
// images on a private registry (FROM, COPY --from), base images whose ONBUILD
// triggers ADD a URL. Git submodules are never fetched.
//
// Lifecycle: Stop and Cleanup remove the container for good.
// Start of a deployment whose container already runs (a server restarted, even
// after kill -9) adopts it by name and label instead of starting a second one;
// a container that is gone or stopped is created/started again from the image.
// Errors from the engine are translated into messages a user understands at
// this package's edge; the raw engine text goes to the operator's log.
package container
