#!/usr/bin/env bash
# The compose stack, verified along the README's route: scripts/compose-up.sh (which builds the
# images from Debian packages with --local, the default here, or uses a registry with
# --registry) brings up the API, two CPU workers, Redis and PostgreSQL; then the README's job
# is submitted through the published port, the worker container running it is SIGKILLed, and
# the job must succeed on the other worker. Then tear down (volumes too).
# Needs root, docker (dockerd running) and docker-compose or Compose v2.
set -euo pipefail
cd "$(dirname "$0")/.."
export LWL_API_KEYS="lab:compose-check-key" LWL_COMPOSE_PROJECT=lwlcheck
KEY="Authorization: Bearer compose-check-key"
PORT=8000
MODE=${1:---local}
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
cleanup() { ./scripts/compose-up.sh "$MODE" down -v >/dev/null 2>&1 || true; }
trap cleanup EXIT

say "scripts/compose-up.sh $MODE --workers 2: images, then api, 2 workers, redis, postgres"
./scripts/compose-up.sh "$MODE" --workers 2 | sed 's/^/    /'
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
