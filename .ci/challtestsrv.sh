#!/usr/bin/env bash
# Build pebble-challtestsrv (Let's Encrypt's test DNS server with a management
# API) from the Go module proxy and cache the binary per machine.
#
# The projects/domains tests (and the server's domain tests) resolve TXT, CNAME
# and A/AAAA records through a real DNS server: challtestsrv answers DNS on a
# port of our choosing and its records are set over HTTP (POST /set-txt,
# /set-cname, /add-a, ...). Building takes about a minute on two cores.
#
# Usage:  .ci/challtestsrv.sh          # build unless cached; prints the binary's path on stdout
#         FORCE=1 .ci/challtestsrv.sh  # rebuild
# Env:    KEELSON_CHALLTESTSRV_VERSION (default below; keep it pinned)
#         KEELSON_CACHE_DIR            (default ${XDG_CACHE_HOME:-$HOME/.cache}/keelson)
#
# Typical use in .ci/run:
#   export KEELSON_TEST_CHALLTESTSRV="$(.ci/challtestsrv.sh)"
set -euo pipefail

VERSION="${KEELSON_CHALLTESTSRV_VERSION:-v2.10.1}"
CACHE="${KEELSON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keelson}"
DIR="$CACHE/challtestsrv-$VERSION"
BIN="$DIR/pebble-challtestsrv"
PKG="github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$VERSION"

die() { echo "challtestsrv: ERROR: $*" >&2; exit 1; }
log() { echo "challtestsrv: $*" >&2; }

if [[ "${FORCE:-0}" != "1" && -x "$BIN" ]]; then
  log "using cached $BIN"
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null 2>&1 || die "go toolchain not found in PATH"
mkdir -p "$DIR" || die "cannot create $DIR"

# Build into a scratch GOBIN and move the binary into place only when complete,
# so an interrupted build never leaves a half-written binary that looks cached.
TMP="$(mktemp -d "$DIR/.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

log "building $PKG"
start=$(date +%s)
# Outside any module, so the repository's go.mod is never touched.
if ! (cd "$TMP" && GOBIN="$TMP" GOFLAGS=-mod=mod GOWORK=off go install "$PKG") >&2; then
  die "go install $PKG failed (is the Go module proxy reachable?)"
fi
[[ -x "$TMP/pebble-challtestsrv" ]] || die "go install succeeded but $TMP/pebble-challtestsrv is missing"
mv -f "$TMP/pebble-challtestsrv" "$BIN" || die "cannot move the binary to $BIN"
log "built $BIN in $(( $(date +%s) - start ))s"
echo "$BIN"
