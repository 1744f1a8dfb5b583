"""A Python client for the lwl service (needs ``httpx``: ``pip install 'lwl[service]'``).

    from lwl.client import Client
    c = Client("http://127.0.0.1:8000", api_key=None)
    job = c.submit(spec)                # spec: dict, JSON text or lwl.spec.JobSpec
    c.wait(job)                         # progress bar until succeeded (raises if it failed)
    dist = c.distribution(job)          # the distribution spec (lwl.measures.from_spec reads it)
    x = c.samples(job, n=1000, seed=0)  # numpy array, bit-for-bit from_spec(dist).sample(1000, 0)
    X, y = c.training_set(job)          # a budgeted job: the labelled points its model is trained on
    c.labelled_set(job).status          # ... which a failed or cancelled job serves too (all it holds)

Ask/tell: ``c.ask(job)`` / ``c.tell(job, batch_id, labels)`` for whole batches;
``c.batches(job)`` and ``c.ask(job, batch_id)`` for several instruments sharing a round;
``c.queries(job)`` (the pending points of a batch) and ``c.tell(..., indices=, failed=)`` for
batches told in parts and for points whose measurement failed.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (annotations only: numpy loads in the methods that move arrays, so that
    import numpy as np  # `lwl status` and the like stay light, issue 85)

TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Queries:
    """A batch an ask/tell job waits for: every point's inputs (positions fixed), the positions
    still ``pending`` and those told as ``failed``."""

    batch_id: str
    inputs: np.ndarray  # (n, d)
    pending: np.ndarray  # int positions
    failed: np.ndarray  # int positions
    pending_batches: int


@dataclass(frozen=True)
class PendingBatch:
    """A batch of the current round waiting for labels (``Client.batches``): one per instrument."""

    batch_id: str
    position: int
    n: int
    pending_points: int
    failed_points: int


@dataclass(frozen=True)
class LabelledSet:
    """What ``GET /v1/jobs/{id}/training-set`` answers: the job's ``status`` (its ``LWL-Job-Status``
    header; None from a service that predates it) and the archive's ``arrays`` (``inputs``, ``labels``,
    ``left_out_inputs``, ``left_out_labels``; an ask/tell job without a result also ``told_inputs``,
    ``told_labels``). Only a succeeded job's points are its final training set; a failed or cancelled
    job's are every label it holds, a running one's those so far."""

    status: str | None
    arrays: dict[str, np.ndarray]


class ApiError(Exception):
    """An error answer from the service; ``problem`` is its RFC 9457 document."""

    def __init__(self, status: int, problem: dict):
        self.status, self.problem = status, problem
        field = f" [{problem['field']}]" if problem.get("field") else ""
        super().__init__(f"{status} {problem.get('title', '')}{field}: {problem.get('detail', '')}")


class JobFailed(Exception):
    def __init__(self, job: dict):
        self.job = job
        err = job.get("error") or {}
        super().__init__(f"job {job['id']} {job['status']}: {err.get('detail', '')}")


def _settled(doc: dict, deadline: float | None, timeout: float | None) -> bool:
    """True once the job succeeded; raises when it failed or was cancelled, or on timeout."""
    if doc["status"] in TERMINAL:
        if doc["status"] != "succeeded":
            raise JobFailed(doc)
        return True
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"job {doc['id']} still {doc['status']} after {timeout} s")
    return False


class Client:
    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout: float = 30.0):
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self, r):
        if r.status_code >= 400:
            try:
                doc = r.json()
            except ValueError:
                doc = {"title": r.reason_phrase, "detail": r.text[:500]}
            raise ApiError(r.status_code, doc)
        return r

    def _id(self, job) -> str:
        return job if isinstance(job, str) else job["id"]

    # -- jobs ---------------------------------------------------------------------------------
    def submit(self, spec: Any, idempotency_key: str | None = None) -> str:
        if hasattr(spec, "model_dump_json"):
            body = spec.model_dump_json()
        else:
            body = spec if isinstance(spec, (str, bytes)) else json.dumps(spec)
        headers = {"Content-Type": "application/json"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return self._check(self.http.post("/v1/jobs", content=body, headers=headers)).json()["id"]

    def job(self, job) -> dict:
        return self._check(self.http.get(f"/v1/jobs/{self._id(job)}")).json()

    def jobs(self, status: str | None = None, limit: int = 50) -> list[dict]:
        params = {"limit": limit, **({"status": status} if status else {})}
        out, cursor = [], None
        while True:
            page = self._check(self.http.get("/v1/jobs", params={**params, **({"cursor": cursor} if cursor else {})})).json()
            out += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return out

    def history(self, job) -> list[dict]:
        return self._check(self.http.get(f"/v1/jobs/{self._id(job)}/history")).json()["history"]

    def cancel(self, job) -> dict:
        return self._check(self.http.post(f"/v1/jobs/{self._id(job)}/cancel")).json()

    def wait(self, job, *, progress: bool = True, poll: float = 0.5, timeout: float | None = None) -> dict:
        """Poll until the job ends; a rich progress bar shows iteration and validation Err."""
        job_id = self._id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = task = None
        if progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(TextColumn(f"job {job_id[:8]}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[info]}"), TimeElapsedColumn())
            bar.start()
        try:
            while True:
                doc = self.job(job_id)
                p = doc.get("progress") or {}
                if bar is not None:
                    if task is None:
                        task = bar.add_task("", total=p.get("total") or 1, info="")
                    bar.update(task, **bar_fields(doc))
                if _settled(doc, deadline, timeout):
                    if bar is not None:
                        _print_verdict(bar.console, doc)
                    return doc
                time.sleep(poll)
        finally:
            if bar is not None:
                bar.stop()

    # -- results ------------------------------------------------------------------------------
    def result(self, job) -> dict:
        return self._check(self.http.get(f"/v1/jobs/{self._id(job)}/result")).json()

    def distribution(self, job) -> dict:
        return self._check(self.http.get(f"/v1/jobs/{self._id(job)}/distribution")).json()

    def samples(self, job, n: int, seed: int = 0, *, npy: bool = True) -> np.ndarray:
        import numpy as np

        headers = {"Accept": "application/x-npy"} if npy else {}
        r = self._check(self.http.post(f"/v1/jobs/{self._id(job)}/samples", json={"n": n, "seed": seed},
                                       headers=headers))
        if npy:
            return np.load(io.BytesIO(r.content), allow_pickle=False)
        return np.asarray(r.json()["samples"], dtype=np.float64)

    def training_set(self, job) -> tuple[np.ndarray, np.ndarray]:
        """A budgeted job's labelled training set, the labels its served model trains on: ``(inputs
        (n, d), labels (n,))`` (paid labels the left-out check kept out of it: :meth:`training_arrays`)."""
        arrays = self.training_arrays(job)
        return arrays["inputs"], arrays["labels"]

    def training_arrays(self, job) -> dict[str, np.ndarray]:
        """Every array of ``GET /v1/jobs/{id}/training-set``: ``inputs``, ``labels``, and
        ``left_out_inputs``, ``left_out_labels`` (paid labels kept out of the served model's training
        set by the left-out check; empty where none were). A job of any status that holds labels
        answers (a failed or cancelled one's: every label it holds): :meth:`labelled_set` also gives
        the job's status."""
        return self.labelled_set(job).arrays

    def labelled_set(self, job) -> LabelledSet:
        """The labelled points of a budgeted job, whatever its status, with that status
        (:class:`LabelledSet`); 409 (:class:`ApiError`) for a job without a budget or with no
        labelled point yet."""
        import numpy as np

        status, body = self.labelled_npz(job)
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            return LabelledSet(status, {k: z[k] for k in z.files})

    def labelled_npz(self, job) -> tuple[str | None, bytes]:
        """``(status, .npz bytes)``: :meth:`labelled_set` as the service sends it (the CLI writes it
        as it came, without numpy)."""
        r = self._check(self.http.get(f"/v1/jobs/{self._id(job)}/training-set"))
        return r.headers.get("LWL-Job-Status"), r.content

    def model(self, job) -> dict:
        """A budgeted job's trained model document (``lwl.models.from_spec`` reads it)."""
        return self._check(self.http.get(f"/v1/jobs/{self._id(job)}/model")).json()

    def predict(self, job, inputs) -> tuple[np.ndarray, np.ndarray | None]:
        """``(mean (m,), std (m,))`` of the job's trained model at ``inputs`` (m, d), sent and
        received as ``.npy``: the numbers of ``lwl.models.from_spec(self.model(job)).predict(inputs,
        return_std=True)``. An operator job's DeepONet gives ``(fields (m, Q), None)``."""
        import numpy as np

        x = np.ascontiguousarray(np.asarray(inputs, dtype=np.float64))
        buf = io.BytesIO()
        np.save(buf, x, allow_pickle=False)
        body, has_std = self.predict_npy(job, buf.getvalue())
        out = np.load(io.BytesIO(body), allow_pickle=False)
        if not has_std:
            return out, None
        return out[:, 0], out[:, 1]

    def predict_npy(self, job, inputs_npy: bytes) -> tuple[bytes, bool]:
        """``(.npy bytes, has_std)``: :meth:`predict` on ``.npy`` bytes, answered as the service
        sends it: an (m, 2) array of mean and std, or (``has_std`` False) a DeepONet's (m, Q) fields."""
        r = self._check(self.http.post(f"/v1/jobs/{self._id(job)}/predict", content=inputs_npy,
                                       headers={"Content-Type": "application/x-npy", "Accept": "application/x-npy"}))
        return r.content, r.headers.get("LWL-Std") != "none"

    # -- ask/tell -----------------------------------------------------------------------------
    def batches(self, job) -> list[PendingBatch]:
        """The batches of the job's current round still waiting for labels (empty when the job
        is not waiting for labels): several instruments each ask for one (``ask(job, batch_id)``)
        and tell it on their own."""
        doc = self._check(self.http.get(f"/v1/jobs/{self._id(job)}/batches")).json()
        return [PendingBatch(**b) for b in doc["batches"]]

    def ask(self, job, batch_id: str | None = None) -> tuple[str, np.ndarray] | None:
        """The next batch to label (or the pending batch ``batch_id``) as ``(batch_id,
        inputs)``, or None when the job is not waiting for labels (running, finished, or between
        rounds) or that batch is no longer pending."""
        import numpy as np

        got = self.ask_npy(job, batch_id)
        return None if got is None else (got[0], np.load(io.BytesIO(got[1]), allow_pickle=False))

    def ask_npy(self, job, batch_id: str | None = None) -> tuple[str, bytes] | None:
        """:meth:`ask` with the inputs as the service sends them, ``.npy`` bytes."""
        params = {} if batch_id is None else {"batch_id": batch_id}
        r = self.http.get(f"/v1/jobs/{self._id(job)}/queries", params=params,
                          headers={"Accept": "application/x-npy"})
        if r.status_code == 409:
            return None
        self._check(r)
        return r.headers["LWL-Batch-Id"], r.content

    def queries(self, job, batch_id: str | None = None) -> Queries | None:
        """The next batch (or the pending batch ``batch_id``) with its points' outcomes so far
        (:class:`Queries`), or None when the job is not waiting for labels or that batch is no
        longer pending."""
        import numpy as np

        params = {} if batch_id is None else {"batch_id": batch_id}
        r = self.http.get(f"/v1/jobs/{self._id(job)}/queries", params=params)
        if r.status_code == 409:
            return None
        doc = self._check(r).json()
        d = doc["d"]
        return Queries(doc["batch_id"], np.asarray(doc["inputs"], dtype=np.float64).reshape(-1, d),
                       np.asarray(doc["pending"], dtype=np.int64), np.asarray(doc["failed"], dtype=np.int64),
                       doc["pending_batches"])

    def tell(self, job, batch_id: str, labels, *, indices=None, failed=None) -> dict:
        """Send labels of one batch; returns the job's answer. ``labels``: one per point, in order
        (or one per position of ``indices``: a part of the batch, the rest stays pending).
        ``failed``: positions in the batch whose measurement failed (their labels, NaN or None,
        are sent as null); they count as labels spent and are never used as data."""
        import numpy as np

        url = f"/v1/jobs/{self._id(job)}/labels"
        if indices is None and not failed:  # a whole batch: .npy, exact floats and compact
            buf = io.BytesIO()
            np.save(buf, np.asarray(labels, dtype=np.float64), allow_pickle=False)
            return self.tell_npy(job, batch_id, buf.getvalue())
        failed = sorted(int(i) for i in (failed if failed is not None else ()))
        at = list(range(len(labels))) if indices is None else [int(i) for i in indices]
        gone = set(failed)
        rows = np.asarray(labels, dtype=np.float64)  # (k,) scalars or (k, p) fields
        values = [None if i in gone else (float(v) if rows.ndim == 1 else [float(x) for x in v])
                  for i, v in zip(at, rows.tolist())]
        body = {"batch_id": batch_id, "labels": values, "failed": failed}
        if indices is not None:
            body["indices"] = at
        return self._check(self.http.post(url, content=json.dumps(body),
                                          headers={"Content-Type": "application/json"})).json()

    def tell_npy(self, job, batch_id: str, labels_npy: bytes) -> dict:
        """:meth:`tell` of a whole batch whose labels are ``.npy`` bytes (sent as they are)."""
        r = self.http.post(f"/v1/jobs/{self._id(job)}/labels", params={"batch_id": batch_id}, content=labels_npy,
                           headers={"Content-Type": "application/x-npy"})
        return self._check(r).json()

    def label_loop(self, job, label_fn, *, poll: float = 0.2, timeout: float | None = None,
                   nan_fails: bool = False) -> dict:
        """Ask, label with ``label_fn(inputs) -> labels`` and tell until the job ends.
        ``nan_fails``: a NaN label tells its point as failed (else a NaN is refused, 422)."""
        import numpy as np

        job_id = self._id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            batch = self.ask(job_id)
            if batch is not None:
                y = np.asarray(label_fn(batch[1]), dtype=np.float64)
                # a failed point: a NaN label, or a field with a NaN (failed as a whole)
                gone = np.flatnonzero(np.isnan(y.reshape(len(y), -1)).any(1)).tolist() if nan_fails else []
                self.tell(job_id, batch[0], y, failed=gone)
                continue
            doc = self.job(job_id)
            if _settled(doc, deadline, timeout):
                return doc
            time.sleep(poll)

    # -- datasets and catalog -----------------------------------------------------------------
    def upload_dataset(self, array: np.ndarray) -> str:
        import numpy as np

        buf = io.BytesIO()
        np.save(buf, np.asarray(array, dtype=np.float64), allow_pickle=False)
        r = self.http.post("/v1/datasets", content=buf.getvalue(),
                           headers={"Content-Type": "application/octet-stream"})
        return self._check(r).json()["id"]

    def catalog(self) -> dict:
        return self._check(self.http.get("/v1/catalog")).json()


def bar_fields(doc: dict) -> dict:
    """A job's progress bar: ``completed``, ``total`` and ``info`` for rich's ``update``.

    A job that has ended fills its bar: a run that stopped early (the optimiser's stopping
    rule, a cancel) shows the iterations it ran as the total and says where it stopped, so the
    bar does not end part-filled at, say, 425/1000 beside "succeeded"."""
    p = doc.get("progress") or {}
    done, planned = int(p.get("iteration") or 0), int(p.get("total") or 1)
    err = p.get("validation_err")
    info = doc["status"] + (f"  Err {err:.4f}" if err is not None else "")
    if doc["status"] not in TERMINAL:
        return {"completed": done, "total": planned, "info": info}
    if done < planned:
        info += f"  (stopped at iteration {done} of {planned})"
    return {"completed": max(done, 1), "total": max(done, 1), "info": info}


def _print_verdict(console, doc: dict) -> None:
    """The finished job's held-out verdict and warnings, under its progress bar."""
    v = doc.get("verdict")
    if v:
        from lwl.evaluation.verdict_text import verdict_sentence

        line = verdict_sentence(v)
        if line:
            console.print(line, highlight=False)
    for w in doc.get("warnings") or []:
        console.print(f"warning: {w}", highlight=False)
