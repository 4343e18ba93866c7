# Sourced by compose-check.sh and docker-check.sh (after their die): sets
# compose, the command that runs Compose, docker-compose (v1 from Debian)
# or else `docker compose` (v2).
if command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  die "neither docker-compose nor 'docker compose' is installed"
fi
