#!/usr/bin/env bash
# Build CNCF Distribution's registry (the reference image registry) from the Go
# module proxy and cache the binary per machine.
#
# The docker runtime's registry tests (deployments/container, the server's
# registry e2e) push images to a real registry served on loopback with
# filesystem storage in a temp dir (the engine treats 127.0.0.0/8 as insecure,
# so no TLS is needed). Building takes about 5 minutes on two cores with a cold
# module cache.
#
# Usage:  .ci/registry.sh          # build unless cached; prints the binary's path on stdout
#         FORCE=1 .ci/registry.sh  # rebuild
# Env:    KEELSON_REGISTRY_VERSION (default below; keep it pinned)
#         KEELSON_CACHE_DIR        (default ${XDG_CACHE_HOME:-$HOME/.cache}/keelson)
#
# Typical use in .ci/run:
#   export KEELSON_TEST_REGISTRY="$(.ci/registry.sh)"
set -euo pipefail

VERSION="${KEELSON_REGISTRY_VERSION:-v3.1.2}"
PKG="github.com/distribution/distribution/v3/cmd/registry@$VERSION"
. "$(dirname "${BASH_SOURCE[0]}")/gotool.sh"
gotool_start registry "registry-$VERSION" registry

gotool_install "$PKG"
gotool_done
