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
PKG="github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$VERSION"
. "$(dirname "${BASH_SOURCE[0]}")/gotool.sh"
gotool_start challtestsrv "challtestsrv-$VERSION" pebble-challtestsrv

gotool_install "$PKG"
gotool_done
