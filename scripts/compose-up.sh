#!/usr/bin/env bash
# The README's distributed mode (API, CPU workers, Redis, PostgreSQL in containers) on whichever
# Compose this machine has and whether or not a registry can be reached:
#
#   export LWL_API_KEYS="lab:$(openssl rand -hex 16)"
#   ./scripts/compose-up.sh [--workers N] [--local | --registry]   # start, wait until ready
#   ./scripts/compose-up.sh down [-v]                                # stop (-v: drop the volumes)
#
# Compose: `docker compose` (v2) where it exists, else `docker-compose` (Debian's docker.io has
# no `docker compose` and ships docker-compose 1.29 as its own package). Images: --registry
# builds lwl on python:3.11-slim and pulls redis:7 and postgres:15; --local builds everything
# from Debian packages first (scripts/build-images.sh, then docker-compose.local.yml), for hosts
# that reach Debian's mirror but no registry. Without either it tries to pull redis:7 and
# falls back to --local when that fails. Needs dockerd running (systemctl start docker).
set -euo pipefail
cd "$(dirname "$0")/.."
PROJECT=${LWL_COMPOSE_PROJECT:-lwl}
PORT=${LWL_PORT:-8000}
workers=2 mode=auto action=up down_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift ;;
    --local) mode=local ;;
    --registry) mode=registry ;;
    down) action=down ;;
    -v) down_args+=(-v) ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "compose-up.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  echo "compose-up.sh: neither 'docker compose' nor 'docker-compose' is installed" \
       "(Debian: apt-get install docker.io docker-compose)" >&2
  exit 1
fi
docker info >/dev/null 2>&1 || { echo "compose-up.sh: dockerd is not running (systemctl start docker, or dockerd &)" >&2; exit 1; }
files=(-f docker-compose.yml)
# the local images are what a --local start used; `down` finds them by the same files
if [ "$mode" = local ] || { [ "$mode" = auto ] && docker image inspect lwl-redis:bookworm >/dev/null 2>&1 \
                               && ! docker image inspect redis:7 >/dev/null 2>&1; }; then
  files+=(-f docker-compose.local.yml)
  mode=local
fi
if [ "$action" = down ]; then
  export LWL_API_KEYS=${LWL_API_KEYS:-unused}  # the file requires it; stopping needs none
  exec "${compose[@]}" -p "$PROJECT" "${files[@]}" down --remove-orphans "${down_args[@]}"
fi
: "${LWL_API_KEYS:?set LWL_API_KEYS=owner:key,... first (the API listens beyond loopback)}"

if [ "$mode" = auto ]; then
  if docker pull -q redis:7 >/dev/null 2>&1; then mode=registry
  else
    echo "no registry (docker pull redis:7 failed): building the images from Debian packages"
    mode=local
    files+=(-f docker-compose.local.yml)
  fi
fi
echo "compose: ${compose[*]}; images: $mode; project $PROJECT; $workers CPU workers"
if [ "$mode" = local ]; then
  ./scripts/build-images.sh
  "${compose[@]}" -p "$PROJECT" "${files[@]}" up -d --no-build --scale worker="$workers"
else
  "${compose[@]}" -p "$PROJECT" "${files[@]}" up -d --build --scale worker="$workers"
fi
for _ in $(seq 180); do curl -sf "localhost:$PORT/readyz" >/dev/null && break; sleep 1; done
echo "ready: $(curl -s "localhost:$PORT/readyz" || echo 'not yet: see '"${compose[*]} -p $PROJECT ${files[*]} logs api")"
echo "dashboard: http://127.0.0.1:$PORT/ui   stop: ./scripts/compose-up.sh down"
