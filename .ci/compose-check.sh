#!/usr/bin/env bash
# compose.yaml end to end, from local images (no registry):
# - the secrets come from the one printf line compose.yaml's header gives;
# - `up` brings Postgres, the Temporal dev server (keelson/temporal:local, the
#   CLI .ci/temporal-cli.sh built), two API replicas and the worker on the
#   Docker runtime up, and each role reports healthy (the engine's healthcheck
#   and its /readyz);
# - an account registered on one replica logs in on the other, creates a
#   project from a local repository, deploys it; the deployment goes LIVE and
#   the app answers through the worker's ingress;
# - after the project is deleted, `down -v` leaves no container, network or
#   volume of the stack, no container, network or image labelled with the
#   worker's instance (but the deleted project's build cache: a known gap,
#   printed) and none of its firewall chains.
#
# Usage: .ci/compose-check.sh IMAGE   (the server's image, built from the
# Dockerfile: .ci/docker-check.sh passes the one it built). Needs Docker,
# docker-compose (or `docker compose`), the Postgres image
# (KEELSON_TEST_POSTGRES_IMAGE, .ci/postgres-image.sh), keelson/static:local
# and a Temporal CLI for keelson/temporal:local (scripts/local-images.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
image="${1:?usage: .ci/compose-check.sh IMAGE}"
die() { echo "compose-check: ERROR: $*" >&2; exit 1; }
log() { echo "compose-check: $*"; }

. .ci/compose.sh
POSTGRES_IMAGE="${KEELSON_TEST_POSTGRES_IMAGE:-keelson-test/postgres:15}"
STATIC_IMAGE=keelson/static:local
TEMPORAL_IMAGE="keelson/temporal:local"
bash scripts/local-images.sh static temporal >/dev/null || die "scripts/local-images.sh static temporal failed"
for img in "$image" "$POSTGRES_IMAGE" "$STATIC_IMAGE" "$TEMPORAL_IMAGE"; do
  docker image inspect "$img" >/dev/null 2>&1 || die "image $img missing"
done

proj="keelsonci$$"
tag="ci-$$"
work="$(mktemp -d /tmp/keelson-compose-check.XXXXXX)"
dc=("${compose[@]}" -p "$proj" --env-file "$work/.env" -f compose.yaml -f "$work/ci.yaml")
instance=""
cleanup() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    "${dc[@]}" ps >&2 2>/dev/null || true
    "${dc[@]}" logs --tail 15 >&2 2>/dev/null || true
  fi
  "${dc[@]}" down -v --remove-orphans -t 120 >/dev/null 2>&1 || true
  if [[ -n "$instance" ]]; then
    docker ps -aq --filter "label=dev.keelson.instance=$instance" | xargs -r docker rm -f -v >/dev/null 2>&1 || true
    docker images -q --filter "label=dev.keelson.instance=$instance" | xargs -r docker rmi -f >/dev/null 2>&1 || true
    docker network ls -q --filter "label=dev.keelson.instance=$instance" | xargs -r docker network rm >/dev/null 2>&1 || true
  fi
  docker image rm "keelson:$tag" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
docker tag "$image" "keelson:$tag"

# The secrets, with the line compose.yaml's header gives, run as written.
line="$(sed -n 's/^#   \(printf .*> \.env\)$/\1/p' compose.yaml)"
[[ -n "$line" ]] || die "compose.yaml's header has no printf line writing .env"
(cd "$work" && eval "$line")
grep -Eq '^KEELSON_JWT_SECRET=[0-9a-f]{64}$' "$work/.env" && grep -Eq '^KEELSON_SECRET_KEY=[0-9a-f]{64}$' "$work/.env" \
  || die "compose.yaml's printf line did not write both secrets: $(cut -d= -f1 "$work/.env" | tr '\n' ' ')"

# Local images and free loopback ports, in .env as a user without a registry
# would name them.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ingress_port="$(free_port)" probe_port="$(free_port)"
cat >>"$work/.env" <<EOF
KEELSON_TAG=$tag
POSTGRES_IMAGE=$POSTGRES_IMAGE
TEMPORAL_IMAGE=$TEMPORAL_IMAGE
KEELSON_IMAGE_STATIC=$STATIC_IMAGE
POSTGRES_PORT=$(free_port)
TEMPORAL_PORT=$(free_port)
INGRESS_PORT=$ingress_port
WORKER_PROBE_PORT=$probe_port
WORKER_METRICS_PORT=$(free_port)
EOF
# The app's repository, on the worker (which clones it) and the replicas.
repo="$work/app-repo"
mkdir -p "$repo/public" && echo 'hello from the compose check' >"$repo/public/index.html"
git -C "$repo" init -q -b main && git -C "$repo" -c user.email=ci@keelson.dev -c user.name=ci add -A \
  && git -C "$repo" -c user.email=ci@keelson.dev -c user.name=ci commit -qm app
cat >"$work/ci.yaml" <<EOF
services:
  api:
    environment:
      KEELSON_ALLOW_LOCAL_REPOS: "true"
    volumes: ["$repo:/repo:ro"]
  worker:
    environment:
      KEELSON_ALLOW_LOCAL_REPOS: "true"
    volumes: ["$repo:/repo:ro"]
EOF

start=$SECONDS
"${dc[@]}" up -d --no-build --scale api=2 >"$work/up.log" 2>&1 || die "compose up failed: $(tail -5 "$work/up.log")"
# Every container of the stack healthy (each role has a healthcheck).
mapfile -t ids < <("${dc[@]}" ps -q)
[[ ${#ids[@]} -eq 5 ]] || die "expected 5 containers (postgres, temporal, 2 api, worker), got ${#ids[@]}"
for _ in $(seq 240); do
  states="$(docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}={{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "${ids[@]}" | sort)"
  grep -qv '=healthy$' <<<"$states" || break
  grep -q '=unhealthy$\|=exited$' <<<"$states" && die "a role is not healthy: $(tr '\n' ' ' <<<"$states")"
  sleep 1
done
grep -qv '=healthy$' <<<"$states" && die "the stack did not become healthy in 240 s: $(tr '\n' ' ' <<<"$states")"
log "stack up and healthy in $((SECONDS - start))s: $(tr '\n' ' ' <<<"$states")"

# Each role answers: both replicas' /readyz through their published ports,
# the worker's probe address.
api1="$("${dc[@]}" port --index=1 api 8080)" api2="$("${dc[@]}" port --index=2 api 8080)"
[[ -n "$api1" && -n "$api2" && "$api1" != "$api2" ]] || die "the two api replicas are not both published ($api1, $api2)"
for a in "$api1" "$api2" "127.0.0.1:$probe_port"; do
  curl -fsS "http://$a/readyz" >/dev/null || die "$a/readyz does not answer"
done
instance="$("${dc[@]}" logs worker 2>&1 | sed -n 's/.*"instance":"\([a-z0-9]*\)".*/\1/p' | head -1)"
[[ -n "$instance" ]] || die "the worker did not log its runtime instance (is it on the Docker runtime?)"
log "readyz answers on api $api1, api $api2 and the worker (runtime instance $instance)"

# An app deployed through the stack: register on one replica, the rest on the other.
j() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
call() {
  local api="$1"; shift
  curl -fsS -X "$1" "http://$api$2" -H 'Content-Type: application/json' ${token:+-H "Authorization: Bearer $token"} ${3:+-d "$3"}
}
token=""
call "$api1" POST /auth/register '{"email":"ci@keelson.dev","password":"compose-check-pw","confirmPassword":"compose-check-pw"}' >/dev/null \
  || die "register failed"
token="$(call "$api2" POST /auth/login '{"email":"ci@keelson.dev","password":"compose-check-pw"}' | j "['accessToken']")" \
  || die "login on the second replica failed"
project="$(call "$api2" POST /projects '{"name":"compose-app","repoUrl":"/repo","framework":"static","port":8080}' | j "['id']")" \
  || die "creating the project failed"
dstart=$SECONDS
dep="$(call "$api2" POST /deployments "{\"projectId\":\"$project\"}" | j "['deploymentId']")" || die "deploying failed"
status=""
for _ in $(seq 240); do
  status="$(call "$api1" GET "/deployments/$dep/status" | j "['status']")"
  [[ "$status" == LIVE || "$status" == FAILED || "$status" == CANCELLED ]] && break
  sleep 1
done
[[ "$status" == LIVE ]] || die "the deployment ended $status: $(call "$api1" GET "/deployments/$dep/status")"
got="$(curl -fsS -H 'Host: compose-app.localhost' "http://127.0.0.1:$ingress_port/")" || die "the app does not answer through the worker's ingress"
[[ "$got" == 'hello from the compose check' ]] || die "the app answered $got"
log "an app deployed through the stack went LIVE in $((SECONDS - dstart))s and answers through the ingress"

# Deleting the project removes its app and images; down -v the rest.
call "$api1" DELETE "/projects/$project" >/dev/null || die "deleting the project failed"
for _ in $(seq 120); do
  status="$(call "$api1" GET "/projects/$project/delete-status" | j "['status']")"
  [[ "$status" == DELETED || "$status" == FAILED ]] && break
  sleep 1
done
[[ "$status" == DELETED ]] || die "the project's deletion ended $status"
dstart=$SECONDS
"${dc[@]}" down -v -t 120 >"$work/down.log" 2>&1 || die "compose down -v failed: $(tail -5 "$work/down.log")"
left=()
for kind in container network volume; do
  while read -r x; do [[ -n "$x" ]] && left+=("$kind $x"); done < <(
    case $kind in
      container) docker ps -a --format '{{.Names}}' --filter "label=com.docker.compose.project=$proj"
                 docker ps -a --format '{{.Names}}' --filter "label=dev.keelson.instance=$instance" ;;
      network) docker network ls --format '{{.Name}}' --filter "label=com.docker.compose.project=$proj"
               docker network ls --format '{{.Name}}' --filter "label=dev.keelson.instance=$instance" ;;
      volume) docker volume ls --format '{{.Name}}' --filter "label=com.docker.compose.project=$proj" ;;
    esac)
done
# Known gap: an API replica's project teardown cannot reach the worker's
# engine (temporal.ControlRuntime has no CleanupProject), so the project's
# build cache images stay on the worker's engine; said here, removed below.
# (the project's images and the legacy builder's intermediate images under them).
cached=""
for id in $(docker images -a -q --filter "label=dev.keelson.instance=$instance" --filter "label=dev.keelson.project=$project" | sort -u); do
  while [[ -n "$id" && "$cached" != *"${id#sha256:}"* ]]; do
    cached+="${id#sha256:}"$'\n'
    id="$(docker image inspect -f '{{.Parent}}' "$id" 2>/dev/null || true)"
    [[ -n "$id" && "$(docker image inspect -f '{{index .Config.Labels "dev.keelson.instance"}}' "$id" 2>/dev/null)" == "$instance" ]] || id=""
  done
done
cached="$(cut -c1-12 <<<"$cached" | sed '/^$/d' | sort -u)"
while read -r x; do [[ -n "$x" ]] && ! grep -qx "$x" <<<"$cached" && left+=("image $x"); done < <(
  docker images -a -q --filter "label=dev.keelson.instance=$instance" | sort -u)
[[ -z "$cached" ]] || log "KNOWN GAP: the deleted project's $(wc -l <<<"$cached") build cache image(s) stay on the worker's engine (project teardown on an API replica does not reach the worker); removed by this check"
chain_id="$(printf %s "$instance" | sha256sum | cut -c1-8)"
for save in iptables-save iptables-legacy-save iptables-nft-save; do
  command -v "$save" >/dev/null 2>&1 || continue
  while read -r x; do [[ -n "$x" ]] && left+=("$save chain $x"); done < <("$save" 2>/dev/null | grep -o "KEELSON-[A-Z]*-$chain_id" | sort -u)
done
[[ ${#left[@]} -eq 0 ]] || die "left after down -v: ${left[*]}"
log "down -v in $((SECONDS - dstart))s left no container, network, volume, firewall chain or other image of the stack"
log "compose checked in ${SECONDS}s"
