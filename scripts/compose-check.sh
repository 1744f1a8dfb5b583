#!/usr/bin/env bash
# The compose stack, verified: build the images (scripts/build-images.sh), bring up the API,
# two CPU workers, Redis and PostgreSQL (docker-compose.local.yml builds the last two from the
# Debian base), submit the README's job through the published port, SIGKILL the worker
# container running it, and wait for the job to succeed on the other worker. Then tear down.
# Needs root, docker (dockerd running) and docker-compose (apt-get install docker-compose).
set -euo pipefail
cd "$(dirname "$0")/.."
export LWL_API_KEYS="lab:compose-check-key"
KEY="Authorization: Bearer compose-check-key"
PORT=8000
COMPOSE="docker-compose -p lwlcheck -f docker-compose.yml -f docker-compose.local.yml"
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
cleanup() { $COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true; }
trap cleanup EXIT

say "building images"
./scripts/build-images.sh
say "starting api, 2 workers, redis, postgres"
$COMPOSE up -d --no-build --scale worker=2 >/dev/null 2>&1
for _ in $(seq 120); do curl -sf localhost:$PORT/readyz >/dev/null && break; sleep 1; done
say "ready: $(curl -s localhost:$PORT/readyz)"
for _ in $(seq 60); do
  [ "$(curl -s -H "$KEY" localhost:$PORT/v1/workers | python3 -c 'import json,sys; print(json.load(sys.stdin)["alive"]["cpu"])')" = 2 ] && break
  sleep 1
done
say "workers: $(curl -s -H "$KEY" localhost:$PORT/v1/workers | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["alive"], [w["host"] for w in d["items"] if w["alive"]])')"

job=$(curl -s -X POST -H "$KEY" -H 'Content-Type: application/json' localhost:$PORT/v1/jobs \
      --data @examples/friedman1.json \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
say "submitted job $job"
host=""
for _ in $(seq 120); do
  host=$(curl -s -H "$KEY" localhost:$PORT/v1/workers | python3 -c "
import json,sys
d=json.load(sys.stdin)
print(next((w['host'] for w in d['items'] if w['current_job']=='$job'), ''))")
  [ -n "$host" ] && break
  sleep 0.5
done
it=$(curl -s -H "$KEY" localhost:$PORT/v1/jobs/$job | python3 -c 'import json,sys; print(json.load(sys.stdin)["progress"]["iteration"])')
container=$(docker ps --filter "id=$host" --format '{{.Names}}')
say "job running on container $container (hostname $host) at iteration $it: docker kill"
docker kill "$container" >/dev/null
for _ in $(seq 300); do
  view=$(curl -s -H "$KEY" localhost:$PORT/v1/jobs/$job)
  status=$(echo "$view" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
  [ "$status" = succeeded ] || [ "$status" = failed ] && break
  sleep 1
done
say "job $status: $(echo "$view" | python3 -c 'import json,sys; j=json.load(sys.stdin); v=j["verdict"] or {}; print("worker", j["worker"], "slices", j["attempts"], "Err", v.get("err"), "best baseline", v.get("best_baseline"), v.get("baselines", {}).get(v.get("best_baseline") or "", None))')"
say "dashboard: HTTP $(curl -s -o /dev/null -w '%{http_code}' localhost:$PORT/ui)"
[ "$status" = succeeded ]
