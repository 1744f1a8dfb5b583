"""The service's commands in the ``lwl`` CLI: ``serve``, ``ask``, ``tell``, and ``submit``,
``status``, ``wait``, ``training-set`` for a job from the shell (``worker`` is the worker's own:
:mod:`worker.cli`).

They register into :data:`lwl.cli.app` through the ``lwl.cli`` entry point (pyproject.toml),
so the library's CLI never imports the service. Each command imports the service lazily: a
missing extra gives a clear message, not an ImportError at ``lwl --help``.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from lwl.client import TERMINAL
from lwl.npy import float64_values, npz_shapes, read_header

console = Console(stderr=True)


def serve(host: str = typer.Option("127.0.0.1", help="interface to bind"),
          port: int = typer.Option(8000, help="port"),
          data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded store and broker (LWL_DATA_DIR)"),
          no_worker: bool = typer.Option(False, "--no-worker", help="API only (distributed mode: run `lwl worker`)"),
          workers: int = typer.Option(1, help="embedded worker processes"),
          threads: Optional[int] = typer.Option(None, "--threads", min=1,
                                                help="torch's threads of each embedded worker (default: "
                                                     "OMP_NUM_THREADS if set, else the usable cores divided by --workers)")):
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
        from service.core.threads import default_threads

        # each embedded worker takes its share of the cores (service.core.threads): two busy pools of
        # every core each oversubscribe a small machine
        args = [sys.executable, "-m", "lwl.cli", "worker", "--threads", str(threads or default_threads(workers))]
        supervisor = WorkerSupervisor(args, os.environ.copy(), workers).start()
    from service.app import create_app
    from service.core.queue import make_celery, sender, waiting_messages
    from service.core.store import Store
    from service.core.reaper import start_reaper

    app_ = create_app(settings, embedded_workers=0 if no_worker else workers)
    store: Store = app_.state.store
    celery = make_celery(settings)
    # resumes dead workers' jobs and re-sends lost messages, also with no worker running
    stop_reaper = start_reaper(store, settings.stale_seconds, settings.reaper_interval,
                               sender(celery, store.job_queue), waiting_messages(celery),
                               settings.redispatch_seconds, settings.redispatch_hold_seconds)
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


@contextmanager
def _service_errors(url: str):
    """One clear line and exit 1 for what can go wrong talking to the service: an error answer
    (its problem document says what: an unknown job, a job without a training set, a refused
    spec with its field) or no answer at all (nothing listening at ``url``, a timeout). The
    message is escaped: rich would read a problem's ``[field]`` as markup and drop it."""
    import httpx

    from lwl.client import ApiError

    try:
        yield
    except ApiError as exc:
        console.print(f"[red]{escape(str(exc))}")
        raise typer.Exit(1)
    except httpx.TransportError as exc:
        console.print(f"[red]cannot reach the service at {escape(url)}: {escape(str(exc) or type(exc).__name__)}[/red] "
                      "(is `lwl serve` running there? --url or LWL_URL names it)")
        raise typer.Exit(1)


def ask(job: str = typer.Argument(..., metavar="JOB", help="job id"),
        out: Path = typer.Option(Path("inputs.npy"), "--out", help="where to write the batch's inputs"),
        batch: Optional[str] = typer.Option(None, "--batch", metavar="BATCH_ID",
                                            help="this pending batch of the round (one per instrument; "
                                                 "GET /v1/jobs/JOB/batches lists them), not the first one"),
        url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Fetch the next batch an ask/tell job needs labelled (or the batch --batch); prints its batch id."""
    batch_id = batch
    with _service_errors(url), _client(url, api_key) as c:
        batch = c.ask_npy(job, batch_id)  # written as the service sent it (no numpy: lwl.npy)
    if batch is None:
        console.print(f"batch {escape(batch_id)} is not pending (labelled, or the round moved on)" if batch_id else
                      "no pending queries (the job is running, finished, or between rounds)")
        raise typer.Exit(3)
    _write(out, batch[1])
    console.print(f"batch {batch[0]}: {read_header(batch[1]).shape[0]} inputs written to {out}")
    sys.stdout.write(batch[0] + "\n")


def _write(out: Path, data: bytes) -> None:
    try:
        out.write_bytes(data)
    except OSError as exc:
        console.print(f"[red]cannot write {escape(str(out))}: {escape(exc.strerror or str(exc))}")
        raise typer.Exit(2)


def _read_npy(path: Path, what: str) -> bytes:
    """The bytes of the ``.npy`` file ``path`` (exit 2 naming ``what`` where it cannot be read or is not one)."""
    try:
        data = path.read_bytes()
        read_header(data)
    except (OSError, ValueError) as exc:
        console.print(f"[red]cannot read the {what} {escape(str(path))}: {escape(str(exc))}")
        raise typer.Exit(2)
    return data


def tell(job: str = typer.Argument(..., metavar="JOB", help="job id"),
         batch_id: str = typer.Argument(..., metavar="BATCH_ID", help="the batch id `lwl ask` printed"),
         labels: Path = typer.Argument(..., metavar="LABELS", help=".npy file: one label per input, in order"),
         nan_failed: bool = typer.Option(False, "--nan-failed",
                                         help="a NaN label is a failed measurement (told as failed)"),
         url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Send the labels of one batch; the job resumes once its round is complete."""
    data = _read_npy(labels, "labels")
    got = float64_values(data)
    if got is None:  # another dtype or order: numpy converts it (the service's layout needs no numpy)
        import numpy as np

        y = np.asarray(np.load(io.BytesIO(data), allow_pickle=False), dtype=np.float64)
        rows, width = y.reshape(len(y), -1).tolist(), (y.size // len(y) if len(y) else 1)
        buf = io.BytesIO()
        np.save(buf, y, allow_pickle=False)
        data = buf.getvalue()
    else:
        header, values = got
        k = header.shape[0] if header.shape else 1
        width = len(values) // k if k else 1
        rows = [values[i * width:(i + 1) * width] for i in range(k)]
    nan_rows = [i for i, row in enumerate(rows) if any(math.isnan(v) for v in row)]
    if nan_rows and not nan_failed:
        console.print(f"[red]{escape(str(labels))}: {len(nan_rows)} NaN "
                      "label(s); a failed measurement is told with --nan-failed (it is paid for, never data)")
        raise typer.Exit(2)
    with _service_errors(url), _client(url, api_key) as c:
        if nan_rows:
            values = [list(row) if width > 1 else row[0] for row in rows]
            answer = c.tell(job, batch_id, values, failed=nan_rows)
        else:  # sent as read: exact floats, no numpy
            answer = c.tell_npy(job, batch_id, data)
    gone = f", {answer['failed_points']} failed" if answer.get("failed_points") else ""
    console.print(f"batch {batch_id}: {answer['outcome']}{gone}; {answer['pending_batches']} batch(es) pending; "
                  f"job {answer['status']}")


# -- a job from the shell: submit, status, wait, training-set -------------------------------------
# The same client, options and environment variables as ask/tell. Exit codes: 0 done; 1 the
# service refused the request or could not be reached; 2 a local file could not be read; 3 (wait)
# the job failed or was cancelled; 124 (wait) --timeout passed while the job went on.

JOB_ENDED_BADLY, TIMED_OUT = 3, 124


def _problem_line(problem: dict) -> str:
    """A failed job's problem document as one line, its field named."""
    field = f" [{problem['field']}]" if problem.get("field") else ""
    return f"{problem.get('title', 'failed')}{field}: {problem.get('detail', '')}"


def elapsed_seconds(doc: dict, now: float | None = None) -> float | None:
    """How long the job has run: from its start to its end (or ``now``), both the store's stamps,
    as the dashboard counts it; None before it started. (A slice's own ``elapsed_seconds`` in
    its progress counts compute only: an ask/tell job's waits on the lab are not in it.)"""
    if doc.get("started_at") is None:
        return None
    end = doc.get("finished_at") or (time.time() if now is None else now)
    return max(0.0, end - doc["started_at"])


def _duration(seconds: float) -> str:
    """``"41.3 s"``, ``"29 min 29 s"``, ``"1.2 h"``: as the dashboard writes it (lwl/ui/app.js)."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {round(seconds % 60)} s"
    return f"{seconds / 3600:.1f} h"


def describe_job(doc: dict) -> list[str]:
    """What `lwl status` prints for a job document (GET /v1/jobs/{id}): status and progress on
    the first line, then what the job is, why it waits, its error or verdict, its warnings."""
    p = doc.get("progress") or {}
    head = f"{doc['id']}  {doc['status']}"
    if p.get("total"):
        head += f"  iteration {p.get('iteration') or 0}/{p['total']}"
    if p.get("validation_err") is not None:
        head += f"  Err {p['validation_err']:.4f}"
    ran = elapsed_seconds(doc)
    if ran is not None:
        head += f"  {_duration(ran)}"
    lines = [head]
    kind = doc.get("kind") or {}
    if kind:
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in kind.items()))
    if p.get("budget") is not None:
        failed = f" ({p['labels_failed']} failed)" if p.get("labels_failed") else ""
        lines.append(f"  labels used {p.get('labels_used') or 0} of a budget of {p['budget']}{failed}")
    lines += [f"  waiting: {c['message']}" for c in doc.get("conditions") or [] if c.get("message")]
    if doc.get("cancel_requested") and doc["status"] not in TERMINAL:
        lines.append("  cancel requested: the job stops at its next step")
    return lines + ["  " + line for line in _outcome_lines(doc)]


def _outcome_lines(doc: dict) -> list[str]:
    """How a job ended, as `lwl status` and `lwl wait` print it: its error, or its verdict,
    and its warnings."""
    lines = []
    if doc.get("error"):
        lines.append("error: " + _problem_line(doc["error"]))
    p = doc.get("progress") or {}
    if doc.get("status") in ("failed", "cancelled") and p.get("budget") is not None and p.get("labels_used"):
        # no paid label is lost (issue #83): the route serves a job's labels whatever its status
        lines.append(f"its {p['labels_used']} paid labels are kept: lwl training-set {doc['id']}")
    if doc.get("verdict"):
        from lwl.evaluation.verdict_text import verdict_sentence

        sentence = verdict_sentence(doc["verdict"])
        if sentence:
            lines.append(sentence)
    return lines + [f"warning: {w}" for w in doc.get("warnings") or []]


def submit(spec: Path = typer.Argument(..., metavar="SPEC", help="job spec (JSON file; - reads standard input)"),
           idempotency_key: Optional[str] = typer.Option(
               None, "--idempotency-key", help="submitting again with this key returns the same job"),
           url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Submit a job spec to the service; prints the job id (the service checks the spec first)."""
    try:
        body = sys.stdin.read() if str(spec) == "-" else spec.read_text()
    except OSError as exc:
        console.print(f"[red]cannot read the spec {escape(str(spec))}: {escape(exc.strerror or str(exc))}")
        raise typer.Exit(2)
    with _service_errors(url), _client(url, api_key) as c:
        job = c.submit(body, idempotency_key=idempotency_key)
        status = c.job(job)["status"]
    # one line whatever the terminal's width: a wrapped command cannot be copied
    console.print(f"job {job} {status}: `lwl wait {job}` shows its progress", highlight=False, soft_wrap=True)
    sys.stdout.write(job + "\n")


def status(job: str = typer.Argument(..., metavar="JOB", help="job id"),
           as_json: bool = typer.Option(False, "--json", help="print the job document as the API gives it"),
           url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Show a job: status, progress, why it waits, its error or verdict."""
    with _service_errors(url), _client(url, api_key) as c:
        doc = c.job(job)
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if as_json else "\n".join(describe_job(doc)) + "\n")


def wait(job: str = typer.Argument(..., metavar="JOB", help="job id"),
         timeout: Optional[float] = typer.Option(
             None, "--timeout", min=0, help="give up after this many seconds (exit 124; the job goes on)"),
         poll: float = typer.Option(1.0, "--poll", min=0.05, help="seconds between looks at the job"),
         url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Show a job's progress until it ends; exit 0 when it succeeded.

    Exit 3 when the job failed or was cancelled (its error is printed), 124 when --timeout
    passed first (the job goes on in the service), 1 when the service refused or was not reached.
    """
    from lwl.cli import _progress  # lwl run's bar; a line every few seconds where stderr is no terminal
    from lwl.client import bar_fields

    deadline = None if timeout is None else time.monotonic() + timeout
    with _service_errors(url), _client(url, api_key) as c, _progress() as bar:
        task, shown = bar.add_task(f"job {job[:8]}", total=1, info=""), None
        while True:
            doc = c.job(job)
            fields = bar_fields(doc)
            if fields != shown:  # only news: a log (no terminal) would repeat an unchanged line
                bar.update(task, **fields)
                shown = fields
            if doc["status"] in TERMINAL:
                break
            if deadline is not None and time.monotonic() >= deadline:
                console.print(f"[yellow]job {job} still {doc['status']} after {timeout:g} s (--timeout); "
                              "it goes on in the service")
                raise typer.Exit(TIMED_OUT)
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
    for line in _outcome_lines(doc):
        console.print(line, highlight=False, markup=False)
    if doc["status"] != "succeeded":
        console.print(f"[red]job {job} {doc['status']}")
        raise typer.Exit(JOB_ENDED_BADLY)
    console.print(f"job {job} succeeded", highlight=False)


def training_set(job: str = typer.Argument(..., metavar="JOB", help="job id of a budgeted job (of any status: a "
                                                                     "failed or cancelled job's labelled points too)"),
                 out: Path = typer.Option(Path("training_set.npz"), "--out",
                                          help="where to write the .npz (arrays inputs (n, d) and labels (n,), "
                                               "left_out_inputs and left_out_labels; an ask/tell job that has not "
                                               "succeeded also told_inputs and told_labels)"),
                 url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Fetch a budgeted job's labelled points: a succeeded job's training set, every point it paid for
    that came back labelled (those the left-out check kept out of the served model's training set as
    left_out_*); a failed, cancelled or running job's, every label it holds so far (its last
    checkpoint's rounds, and an ask/tell job's labels told for the round it was in as told_*). The
    job's status is printed with them."""
    with _service_errors(url), _client(url, api_key) as c:
        status, body = c.labelled_npz(job)
    _write(out, body)  # the .npz as the service sent it (no numpy: lwl.npy reads the shapes)
    shapes = npz_shapes(body)
    inputs = shapes["inputs"]
    left = (shapes.get("left_out_labels") or (0,))[0]
    told = (shapes.get("told_labels") or (0,))[0]
    line = (f"{shapes['labels'][0]} labelled points (d = {inputs[1] if len(inputs) == 2 else 0}) written to {out}"
            + (f", and {left} paid labels the served model leaves out (left_out_*)" if left else "")
            + (f", and {told} labels told for the round it was in (told_*)" if told else ""))
    console.print(line, highlight=False, markup=False)
    if status is None:  # a service that predates the header
        return
    if status == "succeeded":
        console.print(f"job {job} succeeded: its training set", highlight=False, markup=False)
    elif status in TERMINAL:
        console.print(f"job {job} {status}: it ended without a result; these are every label it holds, "
                      f"not a finished design", highlight=False, markup=False)
    else:
        console.print(f"job {job} {status}: it goes on; these are its labels so far (fetch again for more)",
                      highlight=False, markup=False)


def predict(job: str = typer.Argument(..., metavar="JOB", help="job id (a budgeted job)"),
            inputs: Path = typer.Argument(..., metavar="INPUTS", help=".npy file: an (m, d) array of inputs"),
            out: Path = typer.Option(Path("predictions.npy"), "--out",
                                     help="where to write the (m, 2) array: columns mean and std (an "
                                          "operator job's: the (m, Q) predicted fields)"),
            url: str = URL_OPT, api_key: Optional[str] = KEY_OPT):
    """Predict with a budgeted job's trained model (GET /v1/jobs/{id}/model): mean and standard
    deviation at each input row."""
    data = _read_npy(inputs, "inputs")
    if not read_header(data).is_float64_c:  # another dtype or order: numpy converts it
        import numpy as np

        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(np.load(io.BytesIO(data), allow_pickle=False), dtype=np.float64))
        data = buf.getvalue()
    with _service_errors(url), _client(url, api_key) as c:
        body, has_std = c.predict_npy(job, data)
    _write(out, body)  # (m, 2) mean and std, or (m, Q) fields, as the service sent them
    shape = read_header(body).shape
    if not has_std:  # a DeepONet's fields
        console.print(f"{shape[0]} predicted fields ({shape[1]} values each) written to {escape(str(out))}",
                      highlight=False)
        return
    console.print(f"{shape[0]} predictions (mean, std) written to {escape(str(out))}", highlight=False)


def register(app: typer.Typer, cli_console: Console | None = None) -> None:
    """Add the service's commands to ``app`` (the ``lwl.cli`` entry point)."""
    global console
    console = cli_console or console
    for command in (serve, ask, tell):
        app.command()(command)
    for command in (submit, status, wait, training_set, predict):  # training_set: `lwl training-set`
        app.command()(command)
