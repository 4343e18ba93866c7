#!/usr/bin/env bash
# Build Pebble (Let's Encrypt's test ACME CA) from the Go module proxy and cache
# the binary per machine, with the test config and CA certificate its module
# ships (test/config/pebble-config.json, test/certs/pebble.minica.pem and the
# key and certificate of its own HTTPS API) next to it.
#
# The ingress's HTTPS tests (deployments/ingress/acme, the server's HTTPS
# tests) get certificates from a real Pebble, its challenges' DNS records in
# pebble-challtestsrv (.ci/challtestsrv.sh). Building takes about a minute on
# two cores.
#
# Usage:  .ci/pebble.sh          # build unless cached; prints the binary's path on stdout
#         FORCE=1 .ci/pebble.sh  # rebuild
# Env:    KEELSON_PEBBLE_VERSION (default below; keep it pinned)
#         KEELSON_CACHE_DIR      (default ${XDG_CACHE_HOME:-$HOME/.cache}/keelson)
#
# Typical use in .ci/run:
#   export KEELSON_TEST_PEBBLE="$(.ci/pebble.sh)"
set -euo pipefail

VERSION="${KEELSON_PEBBLE_VERSION:-v2.10.1}"
MOD="github.com/letsencrypt/pebble/v2@$VERSION"
PKG="github.com/letsencrypt/pebble/v2/cmd/pebble@$VERSION"
. "$(dirname "${BASH_SOURCE[0]}")/gotool.sh"
gotool_start pebble "pebble-$VERSION" pebble

gotool_install "$PKG"
src="$(cd "$TMP" && GOFLAGS=-mod=mod GOWORK=off go mod download -json "$MOD" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
[[ -d "$src/test" ]] || die "the module's test folder is missing (go mod download $MOD)"
mkdir -p "$DIR/test/config" "$DIR/test/certs/localhost"
cp "$src/test/config/pebble-config.json" "$DIR/test/config/"
cp "$src/test/certs/pebble.minica.pem" "$DIR/test/certs/"
cp "$src/test/certs/localhost/cert.pem" "$src/test/certs/localhost/key.pem" "$DIR/test/certs/localhost/"
chmod -R u+w "$DIR/test"
gotool_done
