#!/usr/bin/env bash
# Check the self-hosting kit:
# - compose.yaml is accepted by docker-compose (v1 from Debian, or `docker
#   compose` v2) and its worker runs the Docker runtime with the engine socket;
# - .dockerignore keeps .git, data/ and secrets out of the build context;
# - the Dockerfile builds the reference server from local base images (no
#   registry: scripts/local-images.sh's keelson/go:local and keelson/base:local,
#   with git) with vendored modules (no proxy in the build);
# - the image runs as 65532 with git; without the socket's group it stops
#   saying "permission denied"; with the socket mounted, the default role (all)
#   answers the API and deploys an app through its ingress;
# - compose.yaml's stack, from that image and local images, comes up healthy,
#   deploys an app and leaves nothing behind (.ci/compose-check.sh).
#
# Usage: .ci/docker-check.sh   (from the repo root; needs Docker)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO_IMAGE=keelson/go:local
BASE_IMAGE=keelson/base:local
STATIC_IMAGE=keelson/static:local
TAG="keelson-ci/server:check-$$"
die() { echo "docker-check: ERROR: $*" >&2; exit 1; }

. .ci/compose.sh
echo "docker-check: $("${compose[@]}" version 2>/dev/null | head -n1)"
cfg="$(KEELSON_JWT_SECRET=check-jwt-secret-0123456789abcdef KEELSON_SECRET_KEY=check-seal-key-0123456789abcdef \
  "${compose[@]}" -f compose.yaml config)" || die "compose.yaml rejected by ${compose[*]} config"
# The worker service runs the Docker runtime with the engine's socket and group.
worker="$(awk '/^  worker:/{w=1; print; next} /^  [a-z]/{w=0} w' <<<"$cfg")"
grep -q 'KEELSON_RUNTIME: docker' <<<"$worker" || die "compose.yaml: the worker does not set KEELSON_RUNTIME: docker"
grep -q '/var/run/docker.sock:/var/run/docker.sock' <<<"$worker" || die "compose.yaml: the worker does not mount the engine socket"
grep -q '/sys/fs/cgroup:/sys/fs/cgroup' <<<"$worker" || die "compose.yaml: the worker does not mount the host's cgroups"
echo "docker-check: compose.yaml accepted; its worker runs the Docker runtime on the mounted socket"

bash scripts/local-images.sh go base static >/dev/null || die "scripts/local-images.sh go base static failed"
for img in "$GO_IMAGE" "$BASE_IMAGE" "$STATIC_IMAGE"; do
  docker image inspect "$img" >/dev/null 2>&1 || die "image $img missing after scripts/local-images.sh"
done
ctx="$(mktemp -d /tmp/keelson-docker-check.XXXXXX)"
name="keelson-check-$$"
cleanup() {
  # Stopped first, so the server stops its apps and removes its firewall rules.
  docker stop -t 60 "$name" >/dev/null 2>&1 || true
  docker rm -f -v "$name" >/dev/null 2>&1 || true
  # What the server in the container built and ran (its instance's labels).
  docker ps -aq --filter label=dev.keelson.instance="${instance:-none}" | xargs -r docker rm -f -v >/dev/null 2>&1 || true
  docker images -q --filter label=dev.keelson.instance="${instance:-none}" | xargs -r docker rmi -f >/dev/null 2>&1 || true
  docker network ls -q --filter label=dev.keelson.instance="${instance:-none}" | xargs -r docker network rm >/dev/null 2>&1 || true
  docker image rm -f "$TAG" "$TAG-ctx" >/dev/null 2>&1 || true
  rm -rf "$ctx" "$ctx.build.log"
}
trap cleanup EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$ctx"/ 2>/dev/null || cp -r . "$ctx"/
cp .dockerignore Dockerfile "$ctx"/
(cd "$ctx" && go mod vendor -e 2>/dev/null)

# .dockerignore: a context holding .git, a data dir with secrets and a .env
# sends none of them.
mkdir -p "$ctx/.git" "$ctx/data" "$ctx/examples/server/data" "$ctx/vendor/example.com/m/data"
echo secret >"$ctx/data/jwt-secret"; echo secret >"$ctx/examples/server/data/secret-key"; echo KEELSON_JWT_SECRET=x >"$ctx/.env"
echo embedded >"$ctx/vendor/example.com/m/data/table"
printf 'FROM %s\nCOPY . /ctx\nRUN [ ! -e /ctx/.git ] && [ ! -e /ctx/data ] && [ ! -e /ctx/examples/server/data ] && [ ! -e /ctx/.env ] && [ -e /ctx/go.mod ] && [ -e /ctx/vendor/example.com/m/data/table ]\n' "$STATIC_IMAGE" \
  | DOCKER_BUILDKIT=0 docker build -q -t "$TAG-ctx" --label keelson-ci=docker-check -f - "$ctx" >/dev/null 2>&1 \
  || die ".dockerignore lets .git, data/ or .env into the build context, or keeps a vendored module's data/ out"
rm -rf "$ctx/vendor/example.com"
echo "docker-check: .dockerignore keeps .git, data/ and .env out of the context, and vendored modules' data/ in"

start=$SECONDS
DOCKER_BUILDKIT=0 docker build -q -t "$TAG" --label keelson-ci=docker-check \
  --build-arg GO_IMAGE="$GO_IMAGE" --build-arg RUNTIME_IMAGE="$BASE_IMAGE" "$ctx" >"$ctx.build.log" 2>&1 \
  || die "docker build failed: $(tail -n 15 "$ctx.build.log")"
echo "docker-check: image built in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
[[ "$(docker image inspect -f '{{.Config.User}}' "$TAG")" == "65532:65532" ]] || die "image does not run as non-root 65532"
docker run --rm --entrypoint git "$TAG" --version >/dev/null || die "no git in the image"
docker run --rm --entrypoint iptables "$TAG" --version >/dev/null || die "no iptables in the image (the egress fence needs it)"

# A bad setting is refused by name.
out="$(docker run --rm --label keelson-ci=docker-check -e KEELSON_ENGINE=cron "$TAG" 2>&1)" && die "a bad KEELSON_ENGINE was accepted"
grep -q 'KEELSON_ENGINE' <<<"$out" || die "the server in the image did not run: $out"
# No engine: the default role refuses to start naming KEELSON_RUNTIME.
out="$(docker run --rm --label keelson-ci=docker-check -e KEELSON_RUNTIME_WAIT=1s "$TAG" 2>&1)" && die "the image started with no engine"
grep -q 'KEELSON_RUNTIME' <<<"$out" || die "no engine, but the error does not name KEELSON_RUNTIME: $out"
# The socket without its group: permission denied, said so.
sock=/var/run/docker.sock
if [[ "$(stat -c %a "$sock")" != *6 && "$(stat -c %g "$sock")" != 0 ]]; then
  out="$(docker run --rm --label keelson-ci=docker-check -v "$sock:$sock" "$TAG" 2>&1)" && die "the image started without access to the socket"
  grep -q 'permission denied.*--group-add' <<<"$out" || die "a socket the user may not open is not reported as permission denied: $out"
  echo "docker-check: without the socket's group: ${out##*KEELSON_RUNTIME: }" | cut -c1-160
fi

# The default role (all) on the mounted engine: the API answers and a static
# app deploys and answers through the ingress.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
api="127.0.0.1:$(free_port)"; ingress="127.0.0.1:$(free_port)"
repo="$ctx/app-repo"
mkdir -p "$repo/public" && echo 'hello from the docker check' >"$repo/public/index.html"
git -C "$repo" init -q -b main && git -C "$repo" -c user.email=ci@keelson.dev -c user.name=ci add -A \
  && git -C "$repo" -c user.email=ci@keelson.dev -c user.name=ci commit -qm app
# As README "Self-hosting kit" runs it: root (builds' process limit is a
# cgroup the server makes in the host's hierarchy), the host's network and
# cgroups, the engine socket.
docker run -d --name "$name" --label keelson-ci=docker-check --network host \
  --user 0 --cap-add NET_ADMIN --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup -v "$sock:$sock" -v "$repo:/repo:ro" \
  -e KEELSON_ADDR="$api" -e KEELSON_INGRESS_ADDR="$ingress" -e KEELSON_ALLOW_LOCAL_REPOS=true \
  -e KEELSON_IMAGE_STATIC="$STATIC_IMAGE" "$TAG" >/dev/null || die "docker run failed"
for _ in $(seq 60); do curl -fsS "http://$api/healthz" >/dev/null 2>&1 && break; sleep 1; done
curl -fsS "http://$api/healthz" >/dev/null || die "the API did not answer: $(docker logs "$name" 2>&1 | tail -5)"
instance="$(docker logs "$name" 2>&1 | sed -n 's/.*"instance":"\([a-z0-9]*\)".*/\1/p' | head -1)"
echo "docker-check: the image's API answers (runtime instance ${instance:-?})"
j() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
call() { curl -fsS -X "$1" "http://$api$2" -H 'Content-Type: application/json' ${token:+-H "Authorization: Bearer $token"} ${3:+-d "$3"}; }
call POST /auth/register '{"email":"ci@keelson.dev","password":"docker-check-pw","confirmPassword":"docker-check-pw"}' >/dev/null \
  || die "register failed"
token="$(call POST /auth/login '{"email":"ci@keelson.dev","password":"docker-check-pw"}' | j "['accessToken']")"
project="$(call POST /projects '{"name":"check-app","repoUrl":"/repo","framework":"static","port":8080}' | j "['id']")" || die "creating the project failed"
dep="$(call POST /deployments "{\"projectId\":\"$project\"}" | j "['deploymentId']")" || die "deploying failed"
status=""
for _ in $(seq 180); do
  status="$(call GET "/deployments/$dep/status" | j "['status']")"
  [[ "$status" == LIVE || "$status" == FAILED || "$status" == CANCELLED ]] && break
  sleep 1
done
[[ "$status" == LIVE ]] || die "the deployment ended $status: $(call GET "/deployments/$dep/status"; docker logs "$name" 2>&1 | tail -5)"
got="$(curl -fsS -H 'Host: check-app.localhost' "http://$ingress/")" || die "the app does not answer through the ingress"
[[ "$got" == 'hello from the docker check' ]] || die "the app answered $got"
echo "docker-check: an app deployed through the image's server answers through its ingress"
docker stop -t 60 "$name" >/dev/null || die "the server did not stop"

# The same image as compose.yaml's api replicas and worker.
bash .ci/compose-check.sh "$TAG" || die "compose.yaml's stack failed (.ci/compose-check.sh)"
