#!/usr/bin/env bash
# Build the images the docker runtime's tests use, WITHOUT any image registry.
#
# On a user's machine the docker runtime pulls official images (golang, node,
# busybox, distroless: see README "Config"). CI machines and this dev box have
# a Docker engine but no registry, so this script assembles equivalent images
# from the machine's own binaries with `docker import` (like postgres-image.sh):
#
#   keelson-test/go:1      builder for the go preset: the host's Go toolchain
#                          (/usr/local/go) + busybox, with net/http and its
#                          dependencies compiled once into the image's build cache
#   keelson-test/run:1     run image for the go preset: FROM scratch with only
#                          /etc/passwd, /etc/group and CA certificates
#   keelson-test/static:1  run image for the static preset: busybox (sh, httpd)
#
# Tests read the names from KEELSON_IMAGE_GO, KEELSON_IMAGE_GO_RUN and
# KEELSON_IMAGE_STATIC (print them with `.ci/runtime-images.sh --env`).
#
# Usage:  .ci/runtime-images.sh          # build what is missing
#         FORCE=1 .ci/runtime-images.sh  # rebuild
#         .ci/runtime-images.sh --env    # print the KEELSON_IMAGE_* exports
# Needs root only to install busybox-static with apt when it is missing.
set -euo pipefail

GO_IMAGE="${KEELSON_TEST_IMAGE_GO:-keelson-test/go:1}"
RUN_IMAGE="${KEELSON_TEST_IMAGE_GO_RUN:-keelson-test/run:1}"
STATIC_IMAGE="${KEELSON_TEST_IMAGE_STATIC:-keelson-test/static:1}"

if [[ "${1:-}" == "--env" ]]; then
  echo "export KEELSON_IMAGE_GO=$GO_IMAGE KEELSON_IMAGE_GO_RUN=$RUN_IMAGE KEELSON_IMAGE_STATIC=$STATIC_IMAGE"
  exit 0
fi

die() { echo "runtime-images: ERROR: $*" >&2; exit 1; }
log() { echo "runtime-images: $*" >&2; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "Docker daemon not reachable (docker info failed)"
GOROOT_HOST="$(go env GOROOT 2>/dev/null || echo /usr/local/go)"
[[ -x "$GOROOT_HOST/bin/go" ]] || die "no Go toolchain at $GOROOT_HOST"

have() { [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$1" >/dev/null 2>&1; }

BUSYBOX="$(command -v busybox || true)"
if [[ -z "$BUSYBOX" ]] || ! file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked'; then
  if [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1; then
    BUSYBOX=/bin/busybox
  else
    log "installing busybox-static (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends busybox-static >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends busybox-static >/dev/null; } \
      || die "apt-get install busybox-static failed"
    BUSYBOX=/bin/busybox
  fi
fi

WORK="$(mktemp -d /tmp/keelson-runtime-images.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# base_rootfs DIR: busybox applets, /etc/passwd, /etc/group, CA certificates, /tmp.
base_rootfs() {
  local r="$1"
  mkdir -p "$r/bin" "$r/etc/ssl/certs" "$r/tmp" "$r/root" "$r/site"
  chmod 1777 "$r/tmp"
  cp "$BUSYBOX" "$r/bin/busybox"
  for a in sh ls cat env id mkdir rm cp mv echo sleep httpd wget grep head tail sed true false; do
    ln -sf busybox "$r/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  return 0
}

if ! have "$GO_IMAGE"; then
  t=$SECONDS
  r="$WORK/go"
  base_rootfs "$r"
  mkdir -p "$r/usr/local"
  # The toolchain without its own tests and API lists (not needed to build).
  tar -C "$(dirname "$GOROOT_HOST")" --anchored --exclude='go/test' --exclude='go/api' --exclude='go/doc' \
    -cf - "$(basename "$GOROOT_HOST")" | tar -C "$r/usr/local" -xf -
  [[ "$GOROOT_HOST" == /usr/local/go ]] || mv "$r/usr/local/$(basename "$GOROOT_HOST")" "$r/usr/local/go"
  tar -C "$r" -cf - . | docker import \
    -c 'ENV PATH=/usr/local/go/bin:/bin HOME=/root GOTOOLCHAIN=local CGO_ENABLED=0' \
    -c 'WORKDIR /src' - "$GO_IMAGE-base" >/dev/null
  # Compile what a web app needs of the standard library once (net/http and
  # its dependencies), with the flags the go preset builds with, so a test
  # build does not spend minutes on it.
  mkdir -p "$WORK/goctx"
  printf 'FROM %s\nRUN go build -trimpath net/http encoding/json\n' "$GO_IMAGE-base" >"$WORK/goctx/Dockerfile"
  DOCKER_BUILDKIT=0 docker build --force-rm -q -t "$GO_IMAGE" "$WORK/goctx" >/dev/null
  docker rmi "$GO_IMAGE-base" >/dev/null 2>&1 || true
  log "built $GO_IMAGE in $((SECONDS - t))s"
fi

if ! have "$RUN_IMAGE"; then
  r="$WORK/run"
  mkdir -p "$r/etc/ssl/certs" "$r/tmp"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/:/false\nnobody:x:65534:65534:nobody:/nonexistent:/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  tar -C "$r" -cf - . | docker import - "$RUN_IMAGE" >/dev/null
  log "built $RUN_IMAGE"
fi

if ! have "$STATIC_IMAGE"; then
  r="$WORK/static"
  base_rootfs "$r"
  tar -C "$r" -cf - . | docker import -c 'ENV PATH=/bin' - "$STATIC_IMAGE" >/dev/null
  log "built $STATIC_IMAGE"
fi
log "ready: $GO_IMAGE $RUN_IMAGE $STATIC_IMAGE"
