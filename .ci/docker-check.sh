#!/usr/bin/env bash
# Check the self-hosting kit: compose.yaml is accepted by docker-compose (v1
# from Debian, or `docker compose` v2), and the Dockerfile builds the
# reference server from local base images (no registry: the images of
# .ci/runtime-images.sh) with vendored modules (no proxy inside the build),
# and the server runs in the image.
#
# Usage: .ci/docker-check.sh   (from the repo root; needs Docker)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO_IMAGE="${KEELSON_TEST_IMAGE_GO:-keelson-test/go:1}"
RUN_IMAGE="${KEELSON_TEST_IMAGE_GO_RUN:-keelson-test/run:1}"
TAG="keelson-ci/server:check-$$"
die() { echo "docker-check: ERROR: $*" >&2; exit 1; }

if command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  die "neither docker-compose nor 'docker compose' is installed"
fi
echo "docker-check: $("${compose[@]}" version 2>/dev/null | head -n1)"
KEELSON_JWT_SECRET=check-jwt-secret-0123456789abcdef KEELSON_SECRET_KEY=check-seal-key-0123456789abcdef \
  "${compose[@]}" -f compose.yaml config -q || die "compose.yaml rejected by ${compose[*]} config"
echo "docker-check: compose.yaml accepted"

for img in "$GO_IMAGE" "$RUN_IMAGE"; do
  docker image inspect "$img" >/dev/null 2>&1 || die "base image $img missing (run .ci/runtime-images.sh first)"
done
ctx="$(mktemp -d /tmp/keelson-docker-check.XXXXXX)"
cleanup() {
  docker image rm -f "$TAG" >/dev/null 2>&1 || true
  rm -rf "$ctx"
}
trap cleanup EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$ctx"/ 2>/dev/null || cp -r . "$ctx"/
(cd "$ctx" && go mod vendor -e 2>/dev/null)
start=$SECONDS
docker build -q -t "$TAG" --label keelson-ci=docker-check \
  --build-arg GO_IMAGE="$GO_IMAGE" --build-arg RUNTIME_IMAGE="$RUN_IMAGE" "$ctx" >/dev/null \
  || die "docker build failed"
echo "docker-check: image built in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
[[ "$(docker image inspect -f '{{.Config.User}}' "$TAG")" == "65532:65532" ]] || die "image does not run as non-root 65532"
# The local run image has no git, so the default process runtime cannot
# start there; check that the binary runs in the image as built (static, as
# 65532) by its configuration check: a bad setting is refused naming it.
out="$(docker run --rm --label keelson-ci=docker-check -e KEELSON_ENGINE=cron "$TAG" 2>&1)" && die "a bad KEELSON_ENGINE was accepted"
grep -q 'KEELSON_ENGINE' <<<"$out" || die "the server in the image did not run: $out"
echo "docker-check: the image runs the server (configuration check: ${out%%$'\n'*})"
