# Sourced by the .ci scripts that build a Go tool from the Go module proxy and
# cache its binary per machine (temporal-cli.sh, vacuum.sh, challtestsrv.sh,
# pebble.sh, registry.sh).
#
#   gotool_start NAME DIRNAME EXE   log prefix, cache folder (e.g. vacuum-v0.17.8)
#                                   and binary name. Prints the cached binary's
#                                   path and exits when it is there (FORCE=1
#                                   rebuilds); else sets DIR, BIN and TMP, a
#                                   scratch folder removed at exit.
#   gotool_install PKG [NOTE]       go installs PKG (module@version) into $TMP,
#                                   outside any module so the repository's
#                                   go.mod is never touched; NOTE follows the
#                                   "building PKG" log line.
#   (or the script builds $TMP/$EXE itself, likewise outside the repository)
#   gotool_done                     moves the binary into place (only once it
#                                   is complete, so an interrupted build never
#                                   looks cached) and prints its path.
#
# KEELSON_CACHE_DIR: default ${XDG_CACHE_HOME:-$HOME/.cache}/keelson.

die() { echo "$GOTOOL_NAME: ERROR: $*" >&2; exit 1; }
log() { echo "$GOTOOL_NAME: $*" >&2; }

gotool_start() {
  GOTOOL_NAME="$1" GOTOOL_EXE="$3"
  local cache="${KEELSON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/keelson}"
  DIR="$cache/$2"
  BIN="$DIR/$GOTOOL_EXE"
  if [[ "${FORCE:-0}" != "1" && -x "$BIN" ]]; then
    log "using cached $BIN"
    echo "$BIN"
    exit 0
  fi
  command -v go >/dev/null 2>&1 || die "go toolchain not found in PATH"
  mkdir -p "$DIR" || die "cannot create $DIR"
  TMP="$(mktemp -d "$DIR/.build.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  GOTOOL_START=$(date +%s)
}

gotool_install() {
  log "building $1${2:+ $2}"
  # GOFLAGS=-mod=mod so a surrounding module's vendor/readonly settings cannot interfere.
  if ! (cd "$TMP" && GOBIN="$TMP" GOFLAGS=-mod=mod GOWORK=off go install "$1") >&2; then
    die "go install $1 failed (is the Go module proxy reachable?)"
  fi
}

gotool_done() {
  [[ -x "$TMP/$GOTOOL_EXE" ]] || die "the build succeeded but $TMP/$GOTOOL_EXE is missing"
  mv -f "$TMP/$GOTOOL_EXE" "$BIN" || die "cannot move the binary to $BIN"
  log "built $BIN in $(( $(date +%s) - GOTOOL_START ))s"
  echo "$BIN"
}
