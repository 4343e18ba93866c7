#!/usr/bin/env bash
# Build Keelson's images on a machine whose Docker engine has no registry to
# pull from, out of the machine's own binaries with `docker import`.
#
# Where a registry answers you need none of this: the docker runtime pulls
# the official images it defaults to (golang, distroless, node, busybox) on
# first use, and the Dockerfile's bases are official images too. Without one:
#
#   keelson/go:local       builder of the go preset: the host's Go toolchain
#                          (go env GOROOT) + busybox, net/http precompiled
#   keelson/go-run:local   run image of the go preset: /etc/passwd, CA certificates
#   keelson/static:local   run image of the static preset: busybox (sh, httpd)
#   keelson/node:local     builder and run image of the node preset: the host's
#                          node and npm (only when the host has them)
#   keelson/base:local     a base for the server's own image (Dockerfile
#                          RUNTIME_IMAGE): git, CA certificates, busybox sh
#   keelson/temporal:local compose's Temporal (TEMPORAL_IMAGE), as the official
#                          temporalio/temporal: the Temporal CLI (TEMPORAL_CLI,
#                          else `temporal` on the PATH, else the one
#                          .ci/temporal-cli.sh built), entrypoint temporal, user 1000
#
# Usage:  scripts/local-images.sh            # build what is missing
#         FORCE=1 scripts/local-images.sh    # rebuild
#         scripts/local-images.sh go static  # only these (go go-run static node base temporal)
#         scripts/local-images.sh --env      # print the KEELSON_IMAGE_* exports for the server
# Names:  IMAGE_GO, IMAGE_GO_RUN, IMAGE_STATIC, IMAGE_NODE, IMAGE_BASE, IMAGE_TEMPORAL override them.
# Needs root only to install busybox-static with apt when it is missing.
set -euo pipefail

GO_IMAGE="${IMAGE_GO:-keelson/go:local}"
RUN_IMAGE="${IMAGE_GO_RUN:-keelson/go-run:local}"
STATIC_IMAGE="${IMAGE_STATIC:-keelson/static:local}"
NODE_IMAGE="${IMAGE_NODE:-keelson/node:local}"
BASE_IMAGE="${IMAGE_BASE:-keelson/base:local}"
TEMPORAL_IMAGE="${IMAGE_TEMPORAL:-keelson/temporal:local}"

die() { echo "local-images: ERROR: $*" >&2; exit 1; }
log() { echo "local-images: $*" >&2; }

if [[ "${1:-}" == "--env" ]]; then
  echo "export KEELSON_IMAGE_GO=$GO_IMAGE KEELSON_IMAGE_GO_RUN=$RUN_IMAGE KEELSON_IMAGE_STATIC=$STATIC_IMAGE"
  if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then echo "export KEELSON_IMAGE_NODE=$NODE_IMAGE"; fi
  exit 0
fi
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(go go-run static node base temporal)
wanted() { local w; for w in "${want[@]}"; do [[ "$w" == "$1" ]] && return 0; done; return 1; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "Docker daemon not reachable (docker info failed)"

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

WORK="$(mktemp -d /tmp/keelson-local-images.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# base_rootfs DIR: busybox applets, /etc/passwd, /etc/group, CA certificates, /tmp.
base_rootfs() {
  local r="$1"
  mkdir -p "$r/bin" "$r/etc/ssl/certs" "$r/tmp" "$r/root" "$r/site"
  chmod 1777 "$r/tmp"
  cp "$BUSYBOX" "$r/bin/busybox"
  for a in sh ls cat env id mkdir rm cp mv echo sleep httpd wget grep head tail sed true false tar gzip; do
    ln -sf busybox "$r/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nnonroot:x:65532:\n' >"$r/etc/group"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  return 0
}

# copy_with_libs ROOT FILE...: the files and the shared libraries they load,
# at the same paths (the host's merged-/usr layout mirrored).
copy_with_libs() {
  local r="$1"; shift
  local d f lib
  for d in bin sbin lib lib32 lib64; do
    if [[ -L "/$d" && ! -e "$r/$d" && ! -L "$r/$d" ]]; then
      ln -s "$(readlink "/$d")" "$r/$d"
      mkdir -p "$r/$(readlink "/$d")"
    fi
  done
  for f in "$@"; do
    mkdir -p "$r$(dirname "$f")"
    cp -a "$f" "$r$f"
    if file -L "$f" 2>/dev/null | grep -q 'dynamically linked'; then
      for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}'); do
        [[ -e "$r$lib" ]] && continue
        mkdir -p "$r$(dirname "$lib")"
        cp -L "$lib" "$r$lib"
      done
    fi
  done
}

if wanted go && ! have "$GO_IMAGE"; then
  t=$SECONDS
  GOROOT_HOST="$(go env GOROOT 2>/dev/null || echo /usr/local/go)"
  [[ -x "$GOROOT_HOST/bin/go" ]] || die "no Go toolchain at $GOROOT_HOST"
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
  # its dependencies), with the flags the go preset builds with, so a build
  # does not spend minutes on it.
  mkdir -p "$WORK/goctx"
  printf 'FROM %s\nRUN go build -trimpath net/http encoding/json\n' "$GO_IMAGE-base" >"$WORK/goctx/Dockerfile"
  DOCKER_BUILDKIT=0 docker build --force-rm -q -t "$GO_IMAGE" "$WORK/goctx" >/dev/null
  docker rmi "$GO_IMAGE-base" >/dev/null 2>&1 || true
  log "built $GO_IMAGE in $((SECONDS - t))s"
fi

if wanted go-run && ! have "$RUN_IMAGE"; then
  r="$WORK/run"
  mkdir -p "$r/etc/ssl/certs" "$r/tmp"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/:/false\nnobody:x:65534:65534:nobody:/nonexistent:/false\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
  tar -C "$r" -cf - . | docker import - "$RUN_IMAGE" >/dev/null
  log "built $RUN_IMAGE"
fi

if wanted static && ! have "$STATIC_IMAGE"; then
  r="$WORK/static"
  base_rootfs "$r"
  tar -C "$r" -cf - . | docker import -c 'ENV PATH=/bin' - "$STATIC_IMAGE" >/dev/null
  log "built $STATIC_IMAGE"
fi

if wanted node && ! have "$NODE_IMAGE"; then
  node="$(command -v node || true)"
  npmcli="$(readlink -f "$(command -v npm || echo /nonexistent)" 2>/dev/null || true)"
  if [[ -z "$node" || ! -f "$npmcli" ]]; then
    log "no node and npm on this machine: $NODE_IMAGE not built (the node preset needs KEELSON_IMAGE_NODE)"
  else
    r="$WORK/node"
    base_rootfs "$r"
    copy_with_libs "$r" "$(readlink -f "$node")"
    [[ "$(readlink -f "$node")" == /usr/bin/node ]] || ln -sf "$(readlink -f "$node")" "$r/usr/bin/node"
    # npm's package directory (…/node_modules/npm), and npm on the PATH.
    npmdir="${npmcli%/bin/npm-cli.js}"
    mkdir -p "$r$(dirname "$npmdir")"
    cp -a "$npmdir" "$r$npmdir"
    printf '#!/bin/sh\nexec node %s "$@"\n' "$npmcli" >"$r/usr/bin/npm"
    chmod 755 "$r/usr/bin/npm"
    tar -C "$r" -cf - . | docker import -c 'ENV PATH=/usr/bin:/bin HOME=/root' -c 'WORKDIR /app' - "$NODE_IMAGE" >/dev/null
    log "built $NODE_IMAGE (node $("$node" --version))"
  fi
fi

if wanted base && ! have "$BASE_IMAGE"; then
  command -v git >/dev/null 2>&1 || die "no git on this machine for $BASE_IMAGE"
  r="$WORK/base"
  base_rootfs "$r"
  gitcore="$(git --exec-path)"
  # git and its helpers (https, file:// transports), each with its libraries.
  mapfile -t files < <(find "$gitcore" -maxdepth 1 -type f; command -v git)
  copy_with_libs "$r" "${files[@]}"
  for l in $(find "$gitcore" -maxdepth 1 -type l); do cp -a "$l" "$r$l"; done
  [[ -d /usr/share/git-core/templates ]] && mkdir -p "$r/usr/share/git-core" && cp -a /usr/share/git-core/templates "$r/usr/share/git-core/"
  # iptables (the machine's own, nf_tables and legacy, with their extension
  # modules) for the docker runtime's egress fence.
  ipt="$(readlink -f "$(command -v iptables || echo /usr/sbin/iptables)")"
  [[ -x "$ipt" ]] || die "no iptables on this machine for $BASE_IMAGE"
  xtdir="$(dirname "$(find /usr/lib /lib -name 'libxt_tcp.so' 2>/dev/null | head -1)")"
  mapfile -t ipfiles < <(ls /usr/sbin/xtables-*-multi 2>/dev/null; [[ -d "$xtdir" ]] && find "$xtdir" -name '*.so')
  copy_with_libs "$r" "${ipfiles[@]}"
  for b in /usr/sbin/*tables /usr/sbin/*tables-nft /usr/sbin/*tables-legacy /usr/sbin/*tables-save /usr/sbin/*tables-restore; do
    [[ -L "$b" || -f "$b" ]] || continue
    t="$(readlink -f "$b")"; [[ -e "$r$t" ]] && ln -sf "$t" "$r$b"
  done
  for f in /etc/protocols /etc/services /etc/ethertypes; do [[ -f "$f" ]] && cp -L "$f" "$r$f"; done
  mkdir -p "$r/run" "$r/var/lib"
  mkdir -p "$r/home/nonroot" && chown 65532:65532 "$r/home/nonroot" 2>/dev/null || true
  tar -C "$r" -cf - . | docker import -c 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE_IMAGE" >/dev/null
  docker run --rm "$BASE_IMAGE" git --version >/dev/null || die "$BASE_IMAGE: git does not run in it"
  docker run --rm "$BASE_IMAGE" iptables --version >/dev/null || die "$BASE_IMAGE: iptables does not run in it"
  log "built $BASE_IMAGE ($(docker run --rm "$BASE_IMAGE" git --version))"
fi
if wanted temporal && ! have "$TEMPORAL_IMAGE"; then
  cache="${KEELSON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keelson}"
  cli="${TEMPORAL_CLI:-$(command -v temporal || ls "$cache"/temporal-*/temporal 2>/dev/null | tail -n1 || true)}"
  if [[ -z "$cli" || ! -x "$cli" ]]; then
    log "no Temporal CLI on this machine: $TEMPORAL_IMAGE not built (set TEMPORAL_CLI, or build one with .ci/temporal-cli.sh)"
  else
    r="$WORK/temporal"
    base_rootfs "$r"
    copy_with_libs "$r" "$(readlink -f "$cli")"
    mkdir -p "$r/usr/local/bin" "$r/home/temporal"
    mv "$r$(readlink -f "$cli")" "$r/usr/local/bin/temporal"
    # The CLI as built carries debug information (half its size).
    strip --strip-debug "$r/usr/local/bin/temporal" 2>/dev/null || true
    printf 'temporal:x:1000:1000:temporal:/home/temporal:/bin/sh\n' >>"$r/etc/passwd"
    printf 'temporal:x:1000:\n' >>"$r/etc/group"
    (cd "$r" && tar --numeric-owner --owner=0 --group=0 --exclude=./home/temporal -cf "$WORK/temporal.tar" . \
      && tar --numeric-owner --owner=1000 --group=1000 -rf "$WORK/temporal.tar" ./home/temporal)
    docker import -c 'USER 1000' -c 'WORKDIR /home/temporal' -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/temporal' \
      -c 'ENTRYPOINT ["temporal"]' -c 'EXPOSE 7233' - "$TEMPORAL_IMAGE" <"$WORK/temporal.tar" >/dev/null
    docker run --rm "$TEMPORAL_IMAGE" --version >/dev/null || die "$TEMPORAL_IMAGE: temporal does not run in it"
    log "built $TEMPORAL_IMAGE ($(docker run --rm "$TEMPORAL_IMAGE" --version))"
  fi
fi
log "ready; for the server: eval \"\$(scripts/local-images.sh --env)\""
