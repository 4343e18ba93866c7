#!/usr/bin/env bash
# Build the images the docker runtime's tests use, WITHOUT any image registry:
# scripts/local-images.sh under the tests' own names (keelson-test/*), so a
# test run never touches the keelson/*:local images an operator built.
#
#   keelson-test/go:1      builder of the go preset (the host's Go toolchain)
#   keelson-test/run:1     run image of the go preset
#   keelson-test/static:1  run image of the static preset (busybox)
#
# Tests read the names from KEELSON_IMAGE_GO, KEELSON_IMAGE_GO_RUN and
# KEELSON_IMAGE_STATIC (print them with `.ci/runtime-images.sh --env`).
#
# Usage:  .ci/runtime-images.sh          # build what is missing
#         FORCE=1 .ci/runtime-images.sh  # rebuild
#         .ci/runtime-images.sh --env    # print the KEELSON_IMAGE_* exports
set -euo pipefail
export IMAGE_GO="${KEELSON_TEST_IMAGE_GO:-keelson-test/go:1}"
export IMAGE_GO_RUN="${KEELSON_TEST_IMAGE_GO_RUN:-keelson-test/run:1}"
export IMAGE_STATIC="${KEELSON_TEST_IMAGE_STATIC:-keelson-test/static:1}"
export IMAGE_NODE="${KEELSON_TEST_IMAGE_NODE:-keelson-test/node:1}"
export IMAGE_BASE="${KEELSON_TEST_IMAGE_BASE:-keelson-test/base:1}"
if [[ "${1:-}" == "--env" ]]; then
  echo "export KEELSON_IMAGE_GO=$IMAGE_GO KEELSON_IMAGE_GO_RUN=$IMAGE_GO_RUN KEELSON_IMAGE_STATIC=$IMAGE_STATIC"
  exit 0
fi
[[ $# -gt 0 ]] || set -- go go-run static
exec "$(dirname "${BASH_SOURCE[0]}")/../scripts/local-images.sh" "$@"
