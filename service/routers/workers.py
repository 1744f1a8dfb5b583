"""Workers: the processes that run job slices, as they report themselves (worker.presence)."""

from __future__ import annotations

from fastapi import APIRouter

from service import problems
from service.deps import OwnerDep, SettingsDep, StoreDep
from service.schemas import WorkerList

router = APIRouter(responses=problems.STORE)  # every operation here reads or writes the store
FORGET_AFTER = 3600.0  # seconds of silence after which a dead worker is no longer listed


@router.get("/v1/workers", tags=["workers"], response_model=WorkerList, responses=problems.responses(401))
def list_workers(store: StoreDep, owner: OwnerDep, settings: SettingsDep) -> dict:
    """Every worker heard from in the last hour: device, queues, hardware (GPU name and memory),
    version, slices run, whether it is alive (a heartbeat within the stale timeout) and, when it
    runs one of the caller's jobs, which."""
    # ages by the store's clock, on which the workers' heartbeats are stamped (service.core.store)
    store.prune_workers(silent_for=FORGET_AFTER)
    items = []
    for w in store.list_workers(within=FORGET_AFTER):
        job = w.current_job
        mine = job is not None and store.get_job(job, owner) is not None
        items.append({"name": w.name, "device": w.device, "queues": w.queues,
                      "alive": w.silent_seconds <= settings.stale_seconds,
                      "last_heartbeat_seconds": round(w.silent_seconds, 2),
                      "started_at": w.started_at, "slices": w.slices, "busy": job is not None,
                      "current_job": job if mine else None, **w.info})
    live = [w for w in items if w["alive"]]
    return {"items": items, "alive": {"cpu": sum(w["device"] == "cpu" for w in live),
                                      "cuda": sum(w["device"] == "cuda" for w in live)}}
