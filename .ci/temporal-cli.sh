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
PKG="github.com/temporalio/cli/cmd/temporal@$VERSION"
. "$(dirname "${BASH_SOURCE[0]}")/gotool.sh"
gotool_start temporal-cli "temporal-$VERSION" temporal

gotool_install "$PKG" "(takes several minutes)"
"$TMP/temporal" --version >&2 || die "built binary does not run"
gotool_done
