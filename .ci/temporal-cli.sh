#!/usr/bin/env bash
# Build the Temporal CLI (which embeds the Temporal development server) from the
# Go module proxy, without any binary download site.
#
# The deployments/temporal integration tests start a real dev server with the
# SDK's testsuite.StartDevServer; on a developer machine the SDK downloads the
# CLI itself, but CI has only the Go module proxy, so we compile it here (about
# five minutes on two cores) and cache the binary.
#
# Usage:  .ci/temporal-cli.sh          # build unless cached; prints the binary's path on stdout
#         FORCE=1 .ci/temporal-cli.sh  # rebuild
# Env:    KEELSON_TEMPORAL_CLI_VERSION (default below; keep it pinned)
#         KEELSON_CACHE_DIR            (default ${XDG_CACHE_HOME:-$HOME/.cache}/keelson)
#
# Typical use in .ci/run:
#   export KEELSON_TEST_TEMPORAL_CLI="$(.ci/temporal-cli.sh)"
set -euo pipefail

# v1.5.1: newer releases (v1.9.x) carry a local `replace` for their nested cliext
# module, which `go install pkg@version` refuses, and cliext is not on the proxy.
VERSION="${KEELSON_TEMPORAL_CLI_VERSION:-v1.5.1}"
CACHE="${KEELSON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keelson}"
DIR="$CACHE/temporal-$VERSION"
BIN="$DIR/temporal"

die() { echo "temporal-cli: ERROR: $*" >&2; exit 1; }
log() { echo "temporal-cli: $*" >&2; }

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

log "building github.com/temporalio/cli/cmd/temporal@$VERSION (takes several minutes)"
start=$(date +%s)
# GOFLAGS=-mod=mod so a surrounding module's vendor/readonly settings cannot interfere;
# run outside any module so the repo's go.mod is never touched.
if ! (cd "$TMP" && GOBIN="$TMP" GOFLAGS=-mod=mod GOWORK=off \
      go install "github.com/temporalio/cli/cmd/temporal@$VERSION") >&2; then
  die "go install github.com/temporalio/cli/cmd/temporal@$VERSION failed (is the Go module proxy reachable?)"
fi
[[ -x "$TMP/temporal" ]] || die "go install succeeded but $TMP/temporal is missing"
"$TMP/temporal" --version >&2 || die "built binary does not run"
mv -f "$TMP/temporal" "$BIN" || die "cannot move the binary to $BIN"
log "built $BIN in $(( $(date +%s) - start ))s"
echo "$BIN"
