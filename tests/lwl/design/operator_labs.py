"""A budgeted operator design's lab, as its tests play it (shared by test_budgeted_ama,
test_budgeted_particles and test_budgeted_interval): a solver whose runs fail now and then, a
client driving an ask/tell job, an HTTP lab on loopback, and the checks every budgeted operator
design passes (failed solves paid for and never trained on; a restart pays no solve twice)."""

import numpy as np

from lwl.oracles.counting import CountingOracle
from lwl.runner import run_job
from lwl.spec import parse_job_spec


class FailingSolver:
    """The job's PDE solver with every ``fail_every``-th solve failing (a NaN field, as a diverged
    simulation reports it)."""

    reports_failures = True  # a lab's solver that says which runs failed

    def __init__(self, inner, fail_every: int):
        self.inner, self.calls, self.fail_every = inner, 0, fail_every

    def label(self, inputs):
        out = np.array(self.inner.label(inputs), dtype=np.float64)
        out[np.arange(self.calls, self.calls + len(inputs)) % self.fail_every == 0] = np.nan
        self.calls += len(inputs)
        return out

    def output_grid(self, dim):
        return self.inner.output_grid(dim)


def solver(spec: dict, fail_every: int = 0) -> CountingOracle:
    """The spec's solver (Darcy, RTE, EIT…), every solve counted (``fail_every`` > 0: some of them failing)."""
    inner = parse_job_spec(spec).oracle.build()
    return CountingOracle(FailingSolver(inner, fail_every) if fail_every else inner)


def ask_tell(stepper, solver) -> tuple[dict, int]:
    """A client driving an ask/tell job to its end, ``solver`` computing every label it asks for:
    (the job's result, the labels the client computed)."""
    state, solved = stepper.init(), 0
    while not stepper.done(state):
        x = stepper.queries(state)
        solved += len(x)
        state = stepper.step(state, solver.label(x))
    return stepper.result(state), solved


def check_restart_pays_no_solve_twice(spec: dict, solver, solves_per_point: int = 1) -> None:
    """The same spec and seed give the same training set; a job lost mid-way resumes from its
    checkpoint (its fields of labels included) and asks only for the solves it has not paid for.
    ``solver(spec)``: the job's oracle, counting its solves; a point of the ledger costs
    ``solves_per_point`` of them. Shared by every budgeted operator design."""
    from lwl.design.state import pack, unpack

    blobs = []
    a = run_job(spec, oracle=solver(spec), evaluate=False, checkpoint=blobs.append)
    b = run_job(spec, oracle=solver(spec), evaluate=False)
    assert a["training_set"] == b["training_set"] and a["selected"] == b["selected"]
    states = [unpack(pack(unpack(blob))) for blob in blobs]
    paid_at = [solves_per_point * (len(st["y"]) + len(st["failed_X"])) for st in states]
    state, paid = next((st, p) for st, p in zip(states, paid_at) if 0 < p < a["labels_used"])
    restarted = solver(spec)
    resumed = run_job(spec, oracle=restarted, evaluate=False, state=state)
    assert restarted.solves == a["labels_used"] - paid
    assert resumed["training_set"] == a["training_set"] and resumed["labels_used"] == a["labels_used"]


def check_failed_solves_are_paid_for_and_never_training_data(spec: dict, solver, budget: int, fail_every: int) -> None:
    """Every ``fail_every``-th solve fails (NaN): the job pays for each failed solve, never exceeds
    ``budget`` solves, and trains on none of them (the training set and the left-out points are
    the solves that succeeded, all finite)."""
    oracle = solver(spec, fail_every=fail_every)
    res = run_job(spec, oracle=oracle, evaluate=False)
    failed = len(res["failed_inputs"])
    assert failed == len(range(0, budget, fail_every)) and res["labels_failed"] == failed
    assert oracle.solves == res["labels_used"] == budget
    Y = np.asarray(res["training_set"]["labels"])
    assert len(Y) + len(res["left_out"]["labels"]) == budget - failed and np.isfinite(Y).all()


class SolverLab:
    """A lab's HTTP endpoint on loopback that solves Darcy (or the built-in solver ``oracle``
    names) for every posted input field and answers the solution fields (JSON rows, or .npy when
    ``npy``; only the first ``width`` values of each when given), counting its solves."""

    def __init__(self, npy: bool = False, width: int | None = None, oracle: dict | None = None):
        import io
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from lwl.oracles import make_oracle
        from tests.lwl.test_outbound import free_port

        darcy, lab = make_oracle(oracle or {"name": "darcy"}), self  # another built-in solver by its spec
        self.solves = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                x = np.asarray(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"])
                y = darcy.label(x)[:, :width]
                lab.solves += len(x)
                if npy:
                    buf = io.BytesIO()
                    np.save(buf, y, allow_pickle=False)
                    out, kind = buf.getvalue(), "application/x-npy"
                else:
                    out, kind = json.dumps({"labels": y.tolist()}).encode(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/solve"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
