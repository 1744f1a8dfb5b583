"""The service's commands in the ``lwl`` CLI: ``serve``, ``ask``, ``tell`` (``worker`` is the
worker's own: :mod:`worker.cli`).

They register into :data:`lwl.cli.app` through the ``lwl.cli`` entry point (pyproject.toml),
so the library's CLI never imports the service. Each command imports the service lazily: a
missing extra gives a clear message, not an ImportError at ``lwl --help``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console

console = Console(stderr=True)


def serve(host: str = typer.Option("127.0.0.1", help="interface to bind"),
          port: int = typer.Option(8000, help="port"),
          data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded store and broker (LWL_DATA_DIR)"),
          no_worker: bool = typer.Option(False, "--no-worker", help="API only (distributed mode: run `lwl worker`)"),
          workers: int = typer.Option(1, help="embedded worker processes")):
    """Run the HTTP API, and (unless --no-worker) a worker, on this machine.

    Embedded default: SQLite store and a local broker under the data directory, nothing else
    to install. Distributed: set LWL_BROKER_URL=redis://... and LWL_DATABASE_URL=postgresql://...
    """
    import os

    try:
        import uvicorn

        from service.core.settings import Settings, use_data_dir
    except ImportError:
        console.print("[red]the service needs its extras: pip install 'lwl[service]'")
        raise typer.Exit(2)
    use_data_dir(data_dir)
    from threadpoolctl import threadpool_limits

    # the API's numpy work is small (sampling); a BLAS thread pool only contends with the
    # event loop and the embedded worker on a small machine
    threadpool_limits(1, "blas")
    settings = Settings()
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not settings.owners_by_key() and host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]no LWL_API_KEYS set: binding to 127.0.0.1 instead of {host} "
                      "(set LWL_API_KEYS='owner:key,...' to serve other hosts)")
        host = "127.0.0.1"
    elif not settings.owners_by_key():
        console.print("[yellow]no LWL_API_KEYS set: serving 127.0.0.1 only, without authentication")
    from service.core.supervisor import WorkerSupervisor

    supervisor = None
    if not no_worker:  # restarted when they die, killed when this process dies
        supervisor = WorkerSupervisor([sys.executable, "-m", "lwl.cli", "worker"], os.environ.copy(), workers).start()
    from service.app import create_app
    from service.core.queue import make_celery, sender, waiting_messages
    from service.core.store import Store
    from service.core.reaper import start_reaper

    app_ = create_app(settings)
    store: Store = app_.state.store
    celery = make_celery(settings)
    # resumes dead workers' jobs and re-sends lost messages, also with no worker running
    stop_reaper = start_reaper(store, settings.stale_seconds, settings.reaper_interval,
                               sender(celery, store.job_queue), waiting_messages(celery),
                               settings.redispatch_seconds)
    console.print(f"lwl {settings.resolved_database_url().split(':')[0]} store, broker "
                  f"{settings.resolved_broker_url().split(':')[0]}; API on http://{host}:{port}"
                  + ("" if no_worker else f" with {workers} embedded worker(s)"))
    try:
        from service.httpserver import server_options

        # h11 with header-size, head/keep-alive timeout limits (docs/service.md "Security")
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False, **server_options(settings))
    finally:
        stop_reaper.set()
        if supervisor is not None:
            supervisor.stop()


def _client(url: str, api_key: Optional[str]):
    from lwl.client import Client

    return Client(url, api_key=api_key)


URL_OPT = typer.Option("http://127.0.0.1:8000", "--url", envvar="LWL_URL", help="the service")
KEY_OPT = typer.Option(None, "--api-key", envvar="LWL_API_KEY", help="bearer key")


def ask(job: str = typer.Argument(..., metavar="JOB", help="job id"),
        out: Path = typer.Option(Path("inputs.npy"), "--out", help="where to write the batch's inputs"),
        url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Fetch the next batch an ask/tell job needs labelled; prints its batch id."""
    from lwl.client import ApiError

    try:
        with _client(url, api_key) as c:
            batch = c.ask(job)
    except ApiError as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(1)
    if batch is None:
        console.print("no pending queries (the job is running, finished, or between rounds)")
        raise typer.Exit(3)
    np.save(out, batch[1])
    console.print(f"batch {batch[0]}: {batch[1].shape[0]} inputs written to {out}")
    sys.stdout.write(batch[0] + "\n")


def tell(job: str = typer.Argument(..., metavar="JOB", help="job id"),
         batch_id: str = typer.Argument(..., metavar="BATCH_ID", help="the batch id `lwl ask` printed"),
         labels: Path = typer.Argument(..., metavar="LABELS", help=".npy file: one label per input, in order"),
         nan_failed: bool = typer.Option(False, "--nan-failed",
                                         help="a NaN label is a failed measurement (told as failed)"),
         url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Send the labels of one batch; the job resumes once its round is complete."""
    from lwl.client import ApiError

    y = np.asarray(np.load(labels, allow_pickle=False), dtype=np.float64)
    failed = np.flatnonzero(np.isnan(y.reshape(len(y), -1)).any(axis=1)).tolist() if nan_failed else None
    try:
        with _client(url, api_key) as c:
            answer = c.tell(job, batch_id, y.reshape(-1) if failed else y, failed=failed)
    except ApiError as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(1)
    gone = f", {answer['failed_points']} failed" if answer.get("failed_points") else ""
    console.print(f"batch {batch_id}: {answer['outcome']}{gone}; {answer['pending_batches']} batch(es) pending; "
                  f"job {answer['status']}")


def register(app: typer.Typer, cli_console: Console | None = None) -> None:
    """Add the service's commands to ``app`` (the ``lwl.cli`` entry point)."""
    global console
    console = cli_console or console
    for command in (serve, ask, tell):
        app.command()(command)
