#!/usr/bin/env bash
# Build a Postgres Docker image WITHOUT any image registry.
#
# CI machines have a Docker engine but no registry, so `postgres:15` can never
# be pulled. This script assembles a minimal root filesystem from the host's
# own PostgreSQL install (Debian package), imports it with `docker import`, and
# adds an entrypoint that mimics the official image's contract closely enough
# for testcontainers-go's postgres module (POSTGRES_USER / POSTGRES_PASSWORD /
# POSTGRES_DB / PGDATA, CMD "postgres -c ...", /docker-entrypoint-initdb.d,
# and the "ready to accept connections" log line printed twice).
#
# Usage:  .ci/postgres-image.sh            # build unless the image exists
#         FORCE=1 .ci/postgres-image.sh    # rebuild
# Env:    KEELSON_TEST_POSTGRES_IMAGE      # tag to build (default keelson-test/postgres:15)
#
# Idempotent; needs root (for chown to uid 999 and, if needed, apt-get).
set -euo pipefail

IMAGE="${KEELSON_TEST_POSTGRES_IMAGE:-keelson-test/postgres:15}"
PG_UID=999
PG_GID=999

die() { echo "postgres-image: ERROR: $*" >&2; exit 1; }
log() { echo "postgres-image: $*" >&2; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "Docker daemon not reachable (docker info failed)"

if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "image $IMAGE already exists; skipping build (FORCE=1 to rebuild)"
  exit 0
fi

[[ "$(id -u)" == "0" ]] || die "must run as root (chown to uid $PG_UID, apt-get)"

start_ts=$(date +%s.%N)
OLD_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"

# --- 1. Find (or install) the host's PostgreSQL server ----------------------
find_pg_major() {
  local d best=""
  for d in /usr/lib/postgresql/*/bin/postgres; do
    [[ -x "$d" ]] || continue
    d="${d#/usr/lib/postgresql/}"; d="${d%%/*}"
    if [[ -z "$best" ]] || (( d > best )); then best="$d"; fi
  done
  echo "$best"
}

PG_MAJOR="$(find_pg_major)"
if [[ -z "$PG_MAJOR" ]]; then
  log "no /usr/lib/postgresql/*/bin/postgres on host; installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt-get install -y -q --no-install-recommends postgresql >/dev/null \
    || die "apt-get install postgresql failed"
  PG_MAJOR="$(find_pg_major)"
  [[ -n "$PG_MAJOR" ]] || die "postgresql installed but no /usr/lib/postgresql/*/bin/postgres found"
fi
PG_LIB="/usr/lib/postgresql/$PG_MAJOR"
PG_SHARE="/usr/share/postgresql/$PG_MAJOR"
[[ -d "$PG_SHARE" ]] || die "$PG_SHARE missing"
[[ -x "$PG_LIB/bin/psql" ]] || die "$PG_LIB/bin/psql missing (postgresql-client-$PG_MAJOR)"
log "using host PostgreSQL $PG_MAJOR ($("$PG_LIB/bin/postgres" --version))"
if [[ "$IMAGE" != *":$PG_MAJOR" ]]; then
  log "WARNING: image tag $IMAGE does not match the PostgreSQL major version $PG_MAJOR"
fi

# --- 2. Assemble the root filesystem ----------------------------------------
WORK="$(mktemp -d /tmp/keelson-pg-rootfs.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
R="$WORK/rootfs"
mkdir -p "$R"

# Mirror the host's merged-/usr layout (bin -> usr/bin, lib -> usr/lib, ...),
# so library paths printed by ldd land in the same place inside the image.
for d in bin sbin lib lib32 lib64 libx32; do
  if [[ -L "/$d" ]]; then
    ln -s "$(readlink "/$d")" "$R/$d"
  elif [[ -d "/$d" ]]; then
    mkdir -p "$R/$d"
  fi
done
mkdir -p "$R/usr/bin" "$R/usr/sbin" "$R/usr/lib" "$R/usr/local/bin" "$R/usr/share" \
         "$R/etc" "$R/dev" "$R/proc" "$R/sys"
[[ -L "$R/lib64" ]] && mkdir -p "$R/usr/lib64"

# PostgreSQL itself (minus JIT/LLVM bits, which would pull in ~100 MB of
# libLLVM, and the build-time pgxs tree). Without llvmjit.so the server just
# runs without JIT.
mkdir -p "$R/usr/lib/postgresql" "$R/usr/share/postgresql"
cp -a "$PG_LIB" "$R/usr/lib/postgresql/"
rm -rf "$R$PG_LIB/lib/bitcode" "$R$PG_LIB/lib/pgxs" "$R$PG_LIB"/lib/llvmjit*
cp -a "$PG_SHARE" "$R/usr/share/postgresql/"
cp -a /usr/share/zoneinfo "$R/usr/share/"
ln -sf /usr/share/zoneinfo/Etc/UTC "$R/etc/localtime"
if [[ -d /usr/lib/locale/C.utf8 ]]; then
  mkdir -p "$R/usr/lib/locale" && cp -a /usr/lib/locale/C.utf8 "$R/usr/lib/locale/"
fi

# A shell and the handful of tools the entrypoint uses.
# (`locale` is run by initdb to import collations. cat+awk+grep are REQUIRED:
# testcontainers' wait.ForListeningPort execs
#   sh -c 'cat /proc/net/tcp* | awk "{print \$2}" | grep -i :1538 || nc ... || </dev/tcp/...'
# inside the container and, if that exits with anything but 0/126/127, retries
# forever in a tight loop until the wait times out.)
TOOLS=(sh mkdir chmod chown rm cat ls id env sleep setpriv locale awk grep)
for t in "${TOOLS[@]}"; do
  p="$(command -v "$t" || true)"
  if [[ -z "$p" ]]; then
    case "$t" in
      setpriv) log "WARNING: setpriv not found; running the image as root will not drop privileges"; continue ;;
      locale) continue ;;
    esac
    die "host tool '$t' not found"
  fi
  cp -L "$p" "$R/usr/bin/$t"
done

# Every shared library needed by the binaries, extensions and tools (incl. the
# dynamic loader), found with ldd.
ELF_FILES=()
while IFS= read -r -d '' f; do
  ELF_FILES+=("$f")
done < <(find "$R$PG_LIB/bin" "$R$PG_LIB/lib" "$R/usr/bin" -type f \( -perm -u+x -o -name '*.so' \) -print0)

declare -A LIBS=()
missing=()
for f in "${ELF_FILES[@]}"; do
  out="$(ldd "$f" 2>/dev/null)" || continue   # not a dynamic ELF (e.g. a script)
  while read -r line; do
    case "$line" in
      *"=> not found"*) missing+=("${f#"$R"}: ${line%% *}") ;;
      *"=> /"*) p="${line#*=> }"; LIBS["${p%% (*}"]=1 ;;
      /*) LIBS["${line%% (*}"]=1 ;;
    esac
  done <<<"$out"
done
if ((${#missing[@]})); then
  for m in "${missing[@]}"; do
    case "$m" in
      "$PG_LIB/bin/"*|/usr/bin/*) die "unresolved library: $m" ;;
      *) log "WARNING: unresolved library (extension will not load): $m" ;;
    esac
  done
fi
for lib in "${!LIBS[@]}"; do
  mkdir -p "$R$(dirname "$lib")"
  cp -L "$lib" "$R$lib"
done
[[ -e "$R/lib64/ld-linux-x86-64.so.2" || "$(uname -m)" != x86_64 ]] \
  || die "dynamic loader was not copied"
log "copied ${#LIBS[@]} shared libraries"

# Users, groups, NSS.
cat >"$R/etc/passwd" <<EOF
root:x:0:0:root:/root:/bin/sh
postgres:x:$PG_UID:$PG_GID:PostgreSQL administrator:/var/lib/postgresql:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat >"$R/etc/group" <<EOF
root:x:0:
postgres:x:$PG_GID:
nogroup:x:65534:
EOF
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' >"$R/etc/nsswitch.conf"

# Writable directories.
mkdir -p "$R/var/lib/postgresql/data" "$R/var/run/postgresql" "$R/tmp" \
         "$R/docker-entrypoint-initdb.d" "$R/root"
ln -s /var/run "$R/run" 2>/dev/null || true
chown -R "$PG_UID:$PG_GID" "$R/var/lib/postgresql" "$R/var/run/postgresql" "$R/docker-entrypoint-initdb.d"
chmod 700 "$R/var/lib/postgresql/data"
chmod 3777 "$R/var/run/postgresql"
chmod 1777 "$R/tmp"

# The entrypoint.
cat >"$R/usr/local/bin/docker-entrypoint.sh" <<'ENTRYPOINT'
#!/bin/sh
# Minimal re-implementation of the official postgres image's entrypoint.
set -eu

# Same argument handling as the official image: "-c x=y" alone means
# "postgres -c x=y"; anything that is not "postgres" is executed as is.
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
	set -- postgres "$@"
fi
if [ "$1" != postgres ] && [ "$1" != postmaster ]; then
	exec "$@"
fi
shift

: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_PASSWORD:=}"
: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
: "${POSTGRES_INITDB_ARGS:=}"
export PGDATA

# Started as root (e.g. --user 0): fix ownership and drop to postgres.
if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown -R postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA" || :
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

# Quote one word for /bin/sh (pg_ctl -o passes its string through a shell).
shq() {
	_s=$1 _o=
	while :; do
		case $_s in
			*\'*) _o="$_o${_s%%\'*}'\\''"; _s=${_s#*\'} ;;
			*) _o="$_o$_s"; break ;;
		esac
	done
	printf "'%s' " "$_o"
}

psql_init() {
	psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc "$@"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		echo >&2 "Error: Database is uninitialized and superuser password is not specified."
		echo >&2 "       Set POSTGRES_PASSWORD, or POSTGRES_HOST_AUTH_METHOD=trust."
		exit 1
	fi
	mkdir -p "$PGDATA"
	chmod 700 "$PGDATA" 2>/dev/null || :

	pwfile="/tmp/.pgpass-init.$$"
	( umask 077; printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile" )
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is split on purpose
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" \
		--encoding=UTF8 --no-locale \
		--auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD" \
		$POSTGRES_INITDB_ARGS
	rm -f "$pwfile"
	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"

	# Temporary server on the unix socket only (user args first, ours last).
	opts=
	for a in "$@"; do opts="$opts$(shq "$a")"; done
	opts="$opts-c listen_addresses='' -p ${PGPORT:-5432}"
	pg_ctl -D "$PGDATA" -o "$opts" -w start

	if [ "$POSTGRES_DB" != postgres ]; then
		echo "CREATE DATABASE :\"db\";" | psql_init --dbname postgres --set db="$POSTGRES_DB"
	fi

	for f in /docker-entrypoint-initdb.d/*; do
		[ -f "$f" ] || continue
		case "$f" in
			*.sh)
				if [ -x "$f" ]; then
					echo "$0: running $f"; "$f"
				else
					echo "$0: sourcing $f"; . "$f"
				fi ;;
			*.sql)
				echo "$0: running $f"; psql_init --dbname "$POSTGRES_DB" -f "$f" ;;
			*) echo "$0: ignoring $f" ;;
		esac
	done

	pg_ctl -D "$PGDATA" -m fast -w stop
	echo
	echo 'PostgreSQL init process complete; ready for start up.'
	echo
fi

exec postgres -c listen_addresses='*' "$@"
ENTRYPOINT
chmod 755 "$R/usr/local/bin/docker-entrypoint.sh"
ln -s usr/local/bin/docker-entrypoint.sh "$R/docker-entrypoint.sh"

# Quick sanity check of the rootfs before importing: the server must run
# with only the copied libraries (ld.so defaults resolve /lib/<triplet>).
if command -v chroot >/dev/null 2>&1; then
  chroot "$R" "$PG_LIB/bin/postgres" --version >/dev/null \
    || die "postgres does not run inside the assembled rootfs (missing library?)"
  chroot "$R" "$PG_LIB/bin/psql" --version >/dev/null \
    || die "psql does not run inside the assembled rootfs"
  [[ "$(chroot "$R" /bin/sh -c 'id -u postgres')" == "$PG_UID" ]] \
    || die "sh/id or /etc/passwd broken inside the assembled rootfs"
  [[ "$(echo 'a b' | chroot "$R" /bin/sh -c "awk '{print \$2}' | grep -i B")" == b ]] \
    || die "awk/grep broken inside the assembled rootfs (needed by testcontainers' port wait)"
fi

# --- 3. Import -------------------------------------------------------------
# `docker import` (engine 20.10) cannot set STOPSIGNAL, so import under a
# temporary tag and add it with a one-line build FROM that local image (the
# legacy builder never pulls a local FROM). STOPSIGNAL SIGINT = Postgres "fast"
# shutdown, as in the official image; with the default SIGTERM ("smart"
# shutdown) `docker stop` / testcontainers' Terminate wait the full stop
# timeout whenever a client still holds a connection.
TMP_TAG="keelson-test/postgres-import:tmp-$$"
log "importing $(du -sh "$R" | cut -f1) rootfs"
tar --numeric-owner -C "$R" -c . | docker import \
  --change "ENTRYPOINT [\"/usr/local/bin/docker-entrypoint.sh\"]" \
  --change 'CMD ["postgres"]' \
  --change 'USER postgres' \
  --change "ENV PATH=$PG_LIB/bin:/usr/local/bin:/usr/bin:/bin" \
  --change "ENV PG_MAJOR=$PG_MAJOR" \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENV LANG=C' \
  --change 'WORKDIR /var/lib/postgresql' \
  --change 'EXPOSE 5432' \
  --message "keelson: PostgreSQL $PG_MAJOR from host packages" \
  - "$TMP_TAG" >/dev/null || die "docker import failed"

if printf 'FROM %s\nSTOPSIGNAL SIGINT\nLABEL dev.keelson.pg-major=%s\n' "$TMP_TAG" "$PG_MAJOR" \
    | DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" - >/dev/null 2>"$WORK/build.err"; then
  :
else
  log "WARNING: could not add STOPSIGNAL SIGINT (legacy docker build failed: $(tr '\n' ' ' <"$WORK/build.err"))"
  log "WARNING: using the plain imported image; docker stop may wait for the stop timeout"
  docker tag "$TMP_TAG" "$IMAGE" || die "docker tag failed"
fi
docker rmi "$TMP_TAG" >/dev/null 2>&1 || true
NEW_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null)" || die "image $IMAGE missing after build"
if [[ -n "$OLD_ID" && "$OLD_ID" != "$NEW_ID" ]]; then
  docker rmi "$OLD_ID" >/dev/null 2>&1 || true   # the replaced build (FORCE=1); fails harmlessly if in use
fi

end_ts=$(date +%s.%N)
log "built $IMAGE (PostgreSQL $PG_MAJOR) in $(awk -v a="$start_ts" -v b="$end_ts" 'BEGIN{printf "%.1f", b-a}')s"
