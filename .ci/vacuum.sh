#!/usr/bin/env bash
# Build vacuum (the OpenAPI linter, github.com/daveshanley/vacuum) from the Go
# module proxy and cache the binary per machine; print its path on stdout.
#
# `go install github.com/daveshanley/vacuum@vX` does not work here: the proxy
# serves the pinned version but refuses the module's version list (403), which
# go install reads to check for deprecation. So the binary is built from a
# scratch module that requires the pinned version.
#
# Usage:  .ci/vacuum.sh          # build unless cached
#         FORCE=1 .ci/vacuum.sh  # rebuild
# Env:    KEELSON_VACUUM_VERSION (default below; keep it pinned)
#         KEELSON_CACHE_DIR      (default ${XDG_CACHE_HOME:-$HOME/.cache}/keelson)
#
# Lint the served documents (.ci/run does this after the tests):
#   KEELSON_OPENAPI_DUMP=/tmp/docs go test -run TestOpenAPIDocumentsValidate ./examples/server
#   "$(.ci/vacuum.sh)" lint -d /tmp/docs/openapi.json
set -euo pipefail

# v0.17.8: v0.18.0 is refused by the module proxy here.
VERSION="${KEELSON_VACUUM_VERSION:-v0.17.8}"
. "$(dirname "${BASH_SOURCE[0]}")/gotool.sh"
gotool_start vacuum "vacuum-$VERSION" vacuum

cat >"$TMP/go.mod" <<MOD
module keelson.ci/vacuum

go 1.24

require github.com/daveshanley/vacuum $VERSION
MOD
cat >"$TMP/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/daveshanley/vacuum"
GO

log "building github.com/daveshanley/vacuum@$VERSION (takes several minutes)"
if ! (cd "$TMP" && GOFLAGS=-mod=mod GOWORK=off go build -o "$TMP/vacuum" github.com/daveshanley/vacuum) >&2; then
  die "building github.com/daveshanley/vacuum@$VERSION failed (is the Go module proxy reachable?)"
fi
"$TMP/vacuum" version >&2 || die "built binary does not run"
gotool_done
