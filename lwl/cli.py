"""The ``lwl`` command line: run a design job, run a paper study, draw samples."""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from typer.core import TyperCommand

from lwl.registry import Registry


class _Command(TyperCommand):
    """Usage lines name arguments as click does, ``lwl run [OPTIONS] SPEC_PATH``: typer 0.2x
    writes a required argument as ``{spec_path}``, which reads as a placeholder to fill with
    braces or as a set to pick from."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        out = []
        for piece in super().collect_usage_pieces(ctx):
            if piece.startswith("{") and piece.endswith("}"):
                piece = piece[1:-1].upper()
            out.append(piece)
        return out


# -h as well as --help, on every command: click's subcommand contexts inherit the names
app = typer.Typer(add_completion=False, no_args_is_help=True, help="lwl: learning where to learn.",
                  context_settings={"help_option_names": ["-h", "--help"]})
console = Console(stderr=True)

def _version(value: bool) -> None:
    if value:
        from lwl import __version__

        typer.echo(f"lwl {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print lwl's version and exit.")) -> None:
    """lwl: learning where to learn."""


class _LogProgress:
    """Progress for a console that is no terminal (nohup, a log file, CI): rich's bar would draw
    nothing until the end there, so print a line per update, at most one every ``interval``
    seconds and always the last one. Same calls as rich's Progress: add_task, update."""

    def __init__(self, interval: float = 5.0):
        self.interval, self.tasks = interval, {}

    def __enter__(self) -> "_LogProgress":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **fields) -> int:
        self.tasks[len(self.tasks)] = {"description": description, "total": total, "completed": 0,
                                       "start": time.monotonic(), "printed": -math.inf, **fields}
        return len(self.tasks) - 1

    def update(self, task: int, *, advance: float = 0, completed: float | None = None, **fields) -> None:
        t = self.tasks[task]
        t.update(fields)
        t["completed"] = completed if completed is not None else t["completed"] + advance
        now = time.monotonic()
        if now - t["printed"] < self.interval and t["completed"] != t["total"]:
            return
        t["printed"] = now
        elapsed = int(now - t["start"])
        console.print(f"{t['description']} {t['completed']:g}/{t['total']:g} {t.get('info', '')} "
                      f"[{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}]", highlight=False,
                      markup=False)


def _progress() -> Progress | _LogProgress:  # noqa: F821
    if not console.is_terminal:
        return _LogProgress()
    # (loaded here, where a bar is drawn: the job commands' import stays light, issue 85)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console)


def _file_resolver(base: Path):
    """Resolve ``{"dataset": "path.npy"}`` members against the spec's folder (.npy or .npz)."""

    def resolve(ref: str) -> np.ndarray:  # noqa: F821
        import numpy as np

        path = (base / ref).resolve()
        if not path.is_file():
            raise ValueError(f"dataset: no file {ref!r} next to the spec")
        from lwl.arrays import read_single_array

        try:
            with open(path, "rb") as fh:
                return np.asarray(read_single_array(fh), dtype=np.float64)
        except ValueError as exc:
            raise ValueError(f"dataset: {ref!r}: {exc}") from None

    return resolve


@app.command()
def run(spec_path: Path = typer.Argument(..., metavar="SPEC_PATH", help="job spec (JSON)"),
        out: Path = typer.Option(Path("runs/latest"), "--out", help="output folder for result.json"),
        device: Optional[str] = typer.Option(None, help="override the spec's device: auto|cpu|cuda")):
    """Run one design job locally and write OUT/result.json."""
    from lwl.oracles import LabelsRequired
    from lwl.runner import run_job
    from lwl.spec import SpecError, parse_job_spec

    try:
        doc = json.loads(spec_path.read_text())
        if device is not None:
            doc["device"] = device
        spec = parse_job_spec(doc, strict=True)
    except (OSError, json.JSONDecodeError) as exc:
        console.print(f"[red]cannot read {spec_path}: {exc}")
        raise typer.Exit(2)
    except SpecError as exc:
        for loc, msg in exc.errors:
            console.print(f"[red]invalid spec[/red] at [bold]{loc}[/bold]: {msg}")
        raise typer.Exit(2)
    with _progress() as bar:
        task = bar.add_task("design", total=spec.algorithm.iterations, info="")

        def progress(p):
            info = f"Err {p['validation_err']:.4f}" if p.get("validation_err") is not None else ""
            if not info and p.get("objective") is not None:
                info = f"objective {p['objective']:.6g}"
            bar.update(task, completed=p["iteration"], total=p["total"], info=info)

        try:
            result = run_job(spec, resolve=_file_resolver(spec_path.parent), progress=progress)
        except LabelsRequired:
            console.print("[red]oracle.name: 'external' (ask/tell) jobs are labelled through the service: "
                          "submit the spec with POST /v1/jobs and answer with `lwl ask` / `lwl tell`")
            raise typer.Exit(2)
        except ValueError as exc:
            console.print(f"[red]job failed:[/red] {exc}")
            raise typer.Exit(1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    if "training_set" in result:  # a budgeted job: the labelled training set is the product
        import numpy as np

        from lwl.design.budget.ledger import training_arrays

        arrays = training_arrays(result)  # left_out_*: paid labels the served model was trained without
        np.savez(out / "training_set.npz", **arrays)
        console.print(f"labels used: {result['labels_used']} of a budget of {result['budget']} in "
                      f"{result['rounds']} rounds; wrote {out / 'training_set.npz'}")
    ev = result.get("evaluation", {}).get("err", {})
    names = result.get("names", {})  # the ids in words (lwl.names)
    for name, err in ev.items():
        console.print(f"Err {names.get(name, name)} ({name}): {err:.4f}", highlight=False)
    if result.get("selected") and "training_set" in result:
        cand = result["selected"]["candidate"]
        ell = result["selected"].get("lengthscale")
        model = result.get("model") or {}
        # a gp job has no single lengthscale: its served model names the kernel its fit chose
        kernel = f", kernel {model['kernel']}" if model.get("kernel") else ""  # a deeponet has none
        how = (f"lengthscale {ell:.4g}" if ell is not None else
               f"model {model.get('model', 'gp')}{kernel}" if model else
               f"model {result.get('spec', {}).get('model', {}).get('name')}")
        console.print(f"selected {names.get(cand, cand)} ({cand}, {how})", highlight=False)
        outputs = (result.get("model_diagnosis") or {}).get("outputs") or []
        for j, o in enumerate(outputs):  # the served GP's Err on Q from its own labels (lwl.models.gp_diagnosis)
            if o.get("loo_err") is not None:
                which = f" (output {j})" if len(outputs) > 1 else ""
                console.print(f"served GP{which}: Err on Q estimated from its own labels {o['loo_err']:.4f} "
                              f"(leave-one-out at Q's validation labels)", highlight=False)
    elif result.get("selected"):
        sel = result["selected"]
        check = f" (validation check Err {sel['check_err']:.4f})" if sel.get("check_err") is not None else ""
        if sel.get("summary"):
            console.print(f"{sel['summary']}{check}; stopped {sel.get('stopped', '')}", highlight=False)
        else:
            console.print(f"kept the iterate after {sel['iteration']} of {len(result['history'])} iterations{check}")
    v = result.get("verdict")
    if v:
        from lwl.evaluation.verdict_text import verdict_sentence

        line = verdict_sentence(v)
        if line:
            console.print(line, highlight=False)
    ci = (result.get("evaluation", {}).get("err_interval") or {}).get("optimized")
    if ci:
        draws = result.get("evaluation", {}).get("draws", 1)
        console.print(f"95% interval of the design's Err over {draws} training draw(s) and the held-out points: "
                      f"{ci[0]:.4f}-{ci[1]:.4f}")
    bound = result.get("evaluation", {}).get("bound")
    if bound and "err_bound" in bound and not bound.get("vacuous"):  # a vacuous (or failed) bound stays in result.json, out of the headline
        kind = "rigorous" if bound["rigorous"] else "estimated constants"
        note = ", vacuous" if bound["vacuous"] else ""
        console.print(f"OOD bound (Prop. 3.1, {kind}{note}): Err <= {bound['err_bound']:.4g}", highlight=False)
    for w in result.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {w}")
    if "relative_l1_error" in result.get("evaluation", {}):
        ev = result["evaluation"]
        console.print(f"designed law U[{ev['law']['low']:.4g}, {ev['law']['high']:.4g}]: held-out relative L1 error "
                      f"{ev['relative_l1_error']:.4f} ± {ev['relative_l1_sd']:.4f} ({ev['samples']} conductivities)",
                      highlight=False)
    if "relative_ood_error" in result.get("evaluation", {}):
        console.print(f"relative OOD error: {result['evaluation']['relative_ood_error']:.4f}")
    console.print(f"wrote {out / 'result.json'}")


def _table1_study(o: StudyOptions) -> Path:
    """Table 1 (lwl.experiments.table1): one tick per column and run; --merge and --join write
    one table from earlier runs instead of running."""
    from lwl.experiments import table1

    preset, out, family, q = o.preset, o.out, o.family, o.q

    if preset not in table1.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(table1.PRESETS)}")
        raise typer.Exit(2)
    if o.merge:
        out = out or Path("runs") / f"table1-{preset}-families"
        try:
            paths = table1.write_merged([json.loads(Path(p).read_text()) for p in o.merge.split(",")], out)
        except (OSError, ValueError) as exc:
            console.print(f"[red]merge: {exc}")
            raise typer.Exit(2)
        return _report(paths, out)
    out = out or Path("runs") / (f"table1-{preset}" + ("" if family == "gaussian" else f"-{family}")
                                 + ("" if q == "lwl" else f"-{q}-q"))
    if o.join:
        try:
            doc = table1.join([json.loads(Path(p).read_text()) for p in o.join.split(",")])
        except (OSError, ValueError) as exc:
            console.print(f"[red]join: {exc}")
            raise typer.Exit(2)
        return _report(table1.write_outputs(doc, out), out)
    cols = o.columns.split(",") if o.columns else None
    n_cols = len(cols) if cols else len(table1.COLUMNS)
    n_runs = o.runs or table1.PRESETS[preset]["runs"]
    with _progress() as bar:
        task = bar.add_task(f"table1 ({preset})", total=n_cols * n_runs, info="")

        def progress(col, r, res):
            bar.update(task, advance=1, info=f"{col} run {r}: Err {res['evaluation']['err']['optimized']:.3f}")

        with _named_input_errors():
            doc = table1.run(preset, runs=o.runs, columns=cols, progress=progress, family=family, q=q)
    return _report(table1.write_outputs(doc, out), out)


def _robustness_study(preset: str, out: Path | None, workers: int = 1, columns: str | None = None,
                      resume: bool = False) -> Path:
    """Default bilevel jobs over many problems (lwl.experiments.robustness): one tick a problem.
    ``--columns p04,p12`` runs only those problems; with ``--resume`` the other rows are kept from
    OUT/results.json (a rerun of the problems a change can affect)."""
    from lwl.experiments import robustness

    if preset not in robustness.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(robustness.PRESETS)}")
        raise typer.Exit(2)
    out = out or Path("runs") / f"robustness-{preset}"
    keys = columns.split(",") if columns else None
    previous = None
    if resume:
        if not (out / "results.json").is_file():
            console.print(f"[red]--resume: no {out / 'results.json'} to keep rows from")
            raise typer.Exit(2)
        if keys is None:
            console.print("[red]--resume: name the problems to rerun with --columns")
            raise typer.Exit(2)
        previous = json.loads((out / "results.json").read_text())
    total = len(keys) if keys else robustness.PRESETS[preset]["count"]
    with _progress() as bar:
        task = bar.add_task(f"robustness ({preset})", total=total, info="")

        def progress(key, row):
            bar.update(task, advance=1, info=f"{key}: Err {row['err']:.3f} vs mixture {row['baselines']['mixture']:.3f}")

        with _named_input_errors():
            doc = robustness.run(preset, progress=progress, workers=workers, problems_run=keys, previous=previous)
    return _report(robustness.write_outputs(doc, out), out)


def _budget_study(preset: str, out: Path | None, problems: str | None, workers: int = 1,
                  resume: bool = False, model: str = "krr", gp_fit_draws: int = 1, rerun: str | None = None) -> Path:
    """Budgeted designs at equal labels (lwl.experiments.budget): one tick per problem, seed and budget;
    ``--columns`` picks problems by key (table1-g1, p00-sobol_g-d2-K7, ...). OUT is rewritten after
    every problem, and ``resume`` reuses the rows of OUT/results.json made with the same settings;
    ``rerun`` (keys) runs those problems again and keeps OUT's other rows."""
    from lwl.experiments import budget

    if preset not in budget.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(budget.PRESETS)}")
        raise typer.Exit(2)
    if model not in budget.MODELS:
        console.print(f"[red]--model: {model!r} is not one of {', '.join(budget.MODELS)}")
        raise typer.Exit(2)
    cfg = budget.PRESETS[preset]
    keys = problems.split(",") if problems else None
    out = out or Path("runs") / (f"budget-{preset}" + ("" if model == "krr" else f"-{model}"))
    previous = None
    again = [k for k in rerun.split(",") if k] if rerun is not None else None
    if again == []:
        console.print("[red]--rerun: name at least one problem")
        raise typer.Exit(2)
    if again and (keys or not (out / "results.json").is_file()):
        console.print("[red]--rerun: needs OUT/results.json to keep the other rows from, and no --columns")
        raise typer.Exit(2)
    if (resume or again) and (out / "results.json").is_file():
        previous = json.loads((out / "results.json").read_text())
    total = (len(keys) if keys else cfg["columns"] + cfg["robustness"]) * len(cfg["seeds"]) * len(cfg["budgets"])
    with _progress() as bar:
        task = bar.add_task(f"budget ({preset})", total=total, info="")
        with _named_input_errors():
            doc = budget.run(preset, progress=lambda msg: bar.update(task, advance=1, info=msg), problems=keys,
                             workers=workers, previous=previous, model=model, gp_fit_draws=gp_fit_draws,
                             checkpoint=lambda partial: budget.write_outputs(partial, out), rerun=again)
    if previous is not None:
        _say_reused(doc.get("reused_rows", 0), what="problem rows", out=out)
    return _report(budget.write_outputs(doc, out), out)


def _operator_budget_study(preset: str, out: Path | None, merge: str | None = None, workers: int = 1) -> Path:
    """Budgeted ama jobs at equal solves (lwl.experiments.operator_budget): one tick per problem,
    seed and budget. Rows finished in OUT (an interrupted run) or in the folder ``--merge`` names
    (the quick preset's, for the full preset) with the same jobs are kept, not run again; cells run
    in ``workers`` processes."""
    from lwl.experiments import operator_budget

    if preset not in operator_budget.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(operator_budget.PRESETS)}")
        raise typer.Exit(2)
    cfg = operator_budget.PRESETS[preset]
    out = out or Path("runs") / f"operator-budget-{preset}"
    with _progress() as bar:
        task = bar.add_task(f"operator-budget ({preset})", total=len(cfg["problems"]) * len(cfg["seeds"])
                            * len(cfg["budgets"]), info="")
        if merge and not (Path(merge) / "rows.json").is_file():
            console.print(f"[red]--merge: no {Path(merge) / 'rows.json'} to keep rows from")
            raise typer.Exit(2)
        try:
            doc = operator_budget.run(preset, progress=lambda msg: bar.update(task, advance=1, info=msg), out=out,
                                      resume_from=Path(merge) if merge else None, workers=workers)
        except KeyboardInterrupt:  # the finished cells are saved: report them, marked partial
            _report(operator_budget.write_outputs(operator_budget.saved_study(preset, out), out), out)
            console.print(f"[yellow]interrupted: the tables in {out} hold the finished cells; "
                          "the same command runs the rest")
            raise typer.Exit(130) from None
    console.print(f"kept {doc['reused_cells']} finished job(s) of earlier runs (same jobs; --merge and {out})")
    return _report(operator_budget.write_outputs(doc, out), out)


def _gp_units_study(preset: str, out: Path | None, problems: str | None, workers: int = 1,
                    resume: bool = False) -> Path:
    """lwl's GP against scikit-learn's on the same points, posed in the problem's units and a
    lab's (lwl.experiments.gp_units, issue #83): one tick per (problem, posing) row. OUT is
    rewritten after every row, and ``resume`` keeps the rows of OUT/results.json made with the
    same settings."""
    from lwl.experiments import gp_units

    if preset not in gp_units.PRESETS and preset != "readme":
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(gp_units.PRESETS)}, readme")
        raise typer.Exit(2)
    if preset == "readme":  # the README's budgeted example: its served std against fresh measurements
        out = out or Path("runs") / "gp-units-readme"
        out.mkdir(parents=True, exist_ok=True)
        with console.status("running examples/friedman1_budget.json with Friedman 1 as its lab"):
            doc = gp_units.readme_calibration()
        (out / "results.json").write_text(json.dumps(doc, indent=1))
        (out / "results.md").write_text(gp_units.readme_markdown(doc))
        console.print(gp_units.readme_markdown(doc))
        return out
    keys = [k for k in problems.split(",") if k] if problems else None
    with _named_input_errors():
        total = len(keys or gp_units.problem_specs(gp_units.PRESETS[preset])) * len(gp_units.POSINGS)
    out = out or Path("runs") / f"gp-units-{preset}"
    previous = None
    if resume and (out / "results.json").is_file():
        previous = json.loads((out / "results.json").read_text())

    def tick(row: dict) -> str:
        ratio = "-" if row.get("ratio") is None else f"{row['ratio']:.3g}"
        return f"{row['problem']} {row['posing']}: lwl/sklearn {ratio} ({row['verdict']})"

    with _progress() as bar:
        task = bar.add_task(f"gp-units ({preset})", total=total, info="")
        with _named_input_errors():
            doc = gp_units.run(preset, problems=keys, workers=workers, previous=previous,
                               progress=lambda row: bar.update(task, advance=1, info=tick(row)),
                               checkpoint=lambda partial: gp_units.write_outputs(partial, out))
    if previous is not None:
        _say_reused(doc.get("reused_rows", 0), what="rows", out=out)
    return _report(gp_units.write_outputs(doc, out), out)


def _eit_study(preset: str, out: Path | None, cache: Path, models: str = "all", precision: str = "float32") -> Path:
    """AMINO on EIT (lwl.experiments.eit): one tick per trained model; every model's training
    state is kept in OUT/checkpoints each epoch, so a rerun resumes where it stopped."""
    from lwl.experiments import eit
    from lwl.models.precision import PRECISIONS

    if preset not in eit.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(eit.PRESETS)}")
        raise typer.Exit(2)
    if models not in eit.MODEL_SETS or precision not in PRECISIONS:
        bad = (f"--models: {models!r} is not one of {', '.join(eit.MODEL_SETS)}" if models not in eit.MODEL_SETS
               else f"--precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
        console.print(f"[red]{bad}")
        raise typer.Exit(2)
    cfg = eit.PRESETS[preset]
    out = out or Path("runs") / f"eit-{preset}"
    ticks = ((cfg["candidates"] + 2 * cfg["refine"] + (1 if cfg["reference"] else 0)) if models == "all"
             else len(eit.PAPER_MODELS))
    with _progress() as bar:
        task = bar.add_task(f"eit ({preset})", total=ticks, info="")

        def progress(msg: str) -> None:
            bar.update(task, advance=0 if msg.startswith("data") else 1, info=msg)

        doc = eit.run(preset, cache=cache, progress=progress, models=models, checkpoints=out / "checkpoints",
                      precision=precision)
    return _report(eit.write_outputs(doc, out), out)



@contextmanager
def _named_input_errors():
    """A study's ValueError names the bad preset, problem or option: print it, exit 2 (usage)."""
    try:
        yield
    except ValueError as exc:
        console.print(f"[red]{exc}")
        raise typer.Exit(2)


def _say_reused(count: int, what: str, out: Path) -> None:
    """The line after a resumed study: how much of OUT/results.json was kept."""
    console.print(f"reused {count} {what} of {out / 'results.json'}"
                  + ("" if count else " (none made with these settings)"))

def _report(paths, out: Path) -> Path:
    for path in paths:
        console.print(f"wrote {path}")
    sys.stdout.write((out / "results.md").read_text())
    return out


def _compare(out: Path, committed: Path, rtol: float) -> None:
    """Exit 1 when OUT/results.json departs from the committed document in ``committed``
    (a folder or a results.json): every number within ``rtol``, timings and provenance aside
    (lwl.experiments.compare)."""
    from lwl.experiments.compare import LIMIT, differences

    ref = committed / "results.json" if committed.is_dir() else committed
    try:
        old = json.loads(ref.read_text())
    except (OSError, ValueError) as exc:
        console.print(f"[red]--compare: cannot read {ref}: {exc}")
        raise typer.Exit(2)
    diffs = differences(json.loads((out / "results.json").read_text()), old, rtol=rtol)
    if diffs:
        console.print(f"[red]--compare: {out / 'results.json'} departs from {ref} "
                      f"({len(diffs)}{'+' if len(diffs) >= LIMIT else ''} differences beyond rtol {rtol:g}):")
        for line in diffs[:20]:
            console.print(f"  {line}")
        raise typer.Exit(1)
    console.print(f"--compare: the same numbers as {ref} (rtol {rtol:g})")


def _operator_study(name: str, preset: str, out: Path | None, runs: int | None, select: str = "bound",
                    resume: bool = False, q_law: str | None = None) -> Path:
    """AMA studies (lwl.experiments.operators): one progress tick per AMA iteration; OUT is
    rewritten after every run, and ``resume`` reuses the runs of OUT/results.json."""
    from lwl.experiments import operators
    from lwl.measures import cosine_law

    if q_law is not None and (name not in operators.LAW_STUDIES or q_law not in cosine_law.LAWS):
        why = ("ntd and darcy only" if name not in operators.LAW_STUDIES else f"known: {', '.join(cosine_law.LAWS)}")
        console.print(f"[red]--q-law: {q_law!r} is not a law of {name}'s test parameters ({why})")
        raise typer.Exit(2)

    if preset not in operators.PRESETS[name]:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(operators.PRESETS[name])}")
        raise typer.Exit(2)
    cfg = operators.PRESETS[name][preset]
    out = out or Path("runs") / (f"{name}-{preset}" + ("" if select == "bound" else f"-{select}"))
    previous = None
    if resume and (out / "results.json").is_file():
        previous = json.loads((out / "results.json").read_text())
    ticks = (runs or cfg["runs"]) * (cfg["iterations"] + 1 + (1 if name == "burgers" else 0))
    with _progress() as bar:
        task = bar.add_task(f"{name} ({preset})", total=ticks, info="")
        doc = operators.run(name, preset, runs=runs, progress=lambda msg: bar.update(task, advance=1, info=msg),
                            select=select, previous=previous, q_law=q_law,
                            checkpoint=lambda partial: operators.write_outputs(partial, out))
    return _report(operators.write_outputs(doc, out), out)


def _rte_study(preset: str, out: Path | None, runs: int | None, knudsen: list[str] | None,
               sizes: list[int] | None, resume: bool = False, select: str = "bound") -> Path:
    """Particle AMA on the RTE (lwl.experiments.rte): one progress tick per AMA iteration;
    OUT/results.json and the figures are rewritten after every trial."""
    from lwl.experiments import rte

    if preset not in rte.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(rte.PRESETS)}")
        raise typer.Exit(2)
    cfg = rte.PRESETS[preset]
    out = out or Path("runs") / f"rte-{preset}"
    previous = None
    if resume and (out / "results.json").is_file():
        previous = json.loads((out / "results.json").read_text())
    ticks = (len(knudsen or cfg["knudsen"]) * len(sizes or cfg["sizes"]) * (runs or cfg["runs"])
             * (cfg["iterations"] + 1))
    with _progress() as bar:
        task = bar.add_task(f"rte ({preset})", total=ticks, info="")
        with _named_input_errors():
            doc = rte.run(preset, runs=runs, knudsen=knudsen, sizes=sizes, previous=previous,
                          progress=lambda msg: bar.update(task, advance=1, info=msg),
                          checkpoint=lambda partial: rte.write_outputs(partial, out), select=select)
    if previous is not None:
        _say_reused(doc.get("reused_trials", 0), what="trials", out=out)
    return _report(rte.write_outputs(doc, out), out)


@dataclass(frozen=True)
class StudyOptions:
    """The options of ``lwl experiment`` as one record (each study reads the ones it knows)."""

    preset: str
    out: Path | None
    runs: int | None
    columns: str | None
    knudsen: str | None
    sizes: str | None
    resume: bool
    family: str
    merge: str | None
    join: str | None
    select: str
    workers: int
    cache: Path
    q_law: str | None
    models: str
    precision: str
    q: str
    model: str = "krr"
    gp_fit_draws: int = 1
    rerun: str | None = None
    problems: str | None = None


# the studies ``lwl experiment NAME`` runs: name -> runner(StudyOptions) -> output folder
STUDIES = Registry("experiment")
STUDIES.register("table1", None, _table1_study)
STUDIES.register("robustness", None, lambda o: _robustness_study(o.preset, o.out, o.workers, o.columns, o.resume))
for _name in ("ntd", "darcy", "burgers"):
    STUDIES.register(_name, None, lambda o, name=_name: _operator_study(name, o.preset, o.out, o.runs, o.select,
                                                                          o.resume, o.q_law))
STUDIES.register("rte", None, lambda o: _rte_study(o.preset, o.out, o.runs, o.knudsen.split(",") if o.knudsen else None,
                                                   [int(n) for n in o.sizes.split(",")] if o.sizes else None,
                                                   o.resume, o.select))
STUDIES.register("eit", None, lambda o: _eit_study(o.preset, o.out, o.cache, o.models, o.precision))
STUDIES.register("budget", None, lambda o: _budget_study(o.preset, o.out, o.columns, o.workers, o.resume, o.model,
                                                                 o.gp_fit_draws, o.rerun))
STUDIES.register("operator-budget", None, lambda o: _operator_budget_study(o.preset, o.out, o.merge, o.workers))
STUDIES.register("gp-units", None, lambda o: _gp_units_study(o.preset, o.out, o.problems or o.columns, o.workers,
                                                               o.resume))


@app.command()
def experiment(name: str = typer.Argument(..., metavar="NAME", help=f"one of {', '.join(STUDIES.names())}"),
               preset: str = typer.Option("quick", help="quick (CI-sized), paper, or (ntd, darcy, burgers) paper-cpu: the paper's grid and network on a CPU budget"),
               out: Path = typer.Option(None, "--out", help="output folder (default runs/NAME-PRESET)"),
               runs: Optional[int] = typer.Option(None, help="override the preset's number of runs"),
               columns: Optional[str] = typer.Option(None, help="comma-separated subset of columns (robustness, budget: of "
                                                                "problems, by key or pNN)"),
               knudsen: Optional[str] = typer.Option(None, help="rte: comma-separated subset of 1/8,2,8"),
               sizes: Optional[str] = typer.Option(None, help="rte: comma-separated particle numbers N"),
               resume: bool = typer.Option(False, help="rte, ntd, darcy, burgers, budget, gp-units: reuse the trials (runs, problems) in "
                                                       "OUT/results.json made with the same settings (grow a study, "
                                                       "or resume one); robustness: rerun the --columns problems and "
                                                       "keep OUT's other rows"),
               family: str = typer.Option("gaussian", help="table1: the design family (gaussian, mixture, pool, auto)"),
               merge: Optional[str] = typer.Option(None, help="table1: comma-separated results.json of single-family "
                                                              "runs (one of them gaussian): write one table of all "
                                                              "families to OUT instead of running; operator-budget: "
                                                              "a folder whose finished rows (rows.json) to keep"),
               join: Optional[str] = typer.Option(None, help="table1: comma-separated results.json of one family's "
                                                             "runs over different --columns: write them as one table "
                                                             "to OUT instead of running"),
               select: str = typer.Option("bound", help="ntd, darcy, burgers, rte: bound (the paper's AMA) or "
                                                         "validation (validated AMA: Q's validation samples accept "
                                                         "steps and select the returned model)"),
               workers: int = typer.Option(1, min=1, help="robustness, budget, gp-units: problems (gp-units: rows) run in this many processes (each row on one BLAS and one torch thread, whatever this number); operator-budget: cells"),
               q_law: Optional[str] = typer.Option(None, "--q-law", help="ntd, darcy: the law of the test members' "
                                                                        "parameters, paper (eqn customdist, the "
                                                                        "default) or unit (lwl's earlier law)"),
               q: str = typer.Option("lwl", "--q", help="table1: lwl's test Gaussians or the authors' (their "
                                                        "code's seed 42, regenerated)"),
               models: str = typer.Option("all", "--models", help="eit: all (the interval search and Q's own law "
                                                                  "beside the paper's models) or paper (the four "
                                                                  "paper models only)"),
               model: str = typer.Option("krr", "--model", help="budget: krr (the committed studies: the paper's "
                                                                "KRR) or gp (budgeted jobs designed for and judged "
                                                                "with the fitted GP, beside lwl's KRR pipeline)"),
               gp_fit_draws: int = typer.Option(1, "--gp-fit-draws", min=1, max=10,
                                                help="budget --model gp: every GP of the study (the job's and each "
                                                     "comparator's) fitted this many times from different seeds, the "
                                                     "one of lowest leave-one-out error kept (GPSpec.fit_draws)"),
               rerun: Optional[str] = typer.Option(None, "--rerun", help="budget: comma-separated problems to run "
                                                                        "again; OUT/results.json's other rows (same "
                                                                        "settings) are kept"),
               problems: Optional[str] = typer.Option(None, "--problems", help="gp-units: comma-separated subset of "
                                                                              "problems by key (table1-g1, "
                                                                              "p07-kernel_expansion-d3-K5, ...)"),
               precision: str = typer.Option("float32", "--precision", help="eit: AMINO's float32 or tf32 "
                                                                          "(NVIDIA GPUs) matrix products"),
               compare: Optional[Path] = typer.Option(None, "--compare", help="a committed result (its folder or "
                                                                               "results.json): exit 1 unless this "
                                                                               "run gives the same numbers"),
               compare_rtol: float = typer.Option(1e-6, "--compare-rtol", min=0.0,
                                                  help="relative tolerance of --compare (round-off)"),
               cache: Path = typer.Option(Path.home() / ".cache" / "lwl", "--cache",
                                          help="eit: where the generated data are kept (npz) and reused")):
    """Run a paper study; write OUT/results.json, OUT/results.md and PNG figures."""
    if name not in STUDIES:
        console.print(f"[red]unknown experiment {name!r}; known: {', '.join(STUDIES.names())}")
        raise typer.Exit(2)
    if compare is not None and not compare.exists():
        console.print(f"[red]--compare: {compare} does not exist")
        raise typer.Exit(2)
    from lwl.experiments.report import code_state

    code_state()  # the commit a study's results name is the one its code was loaded from
    options = StudyOptions(preset, out, runs, columns, knudsen, sizes, resume, family, merge, join, select, workers,
                           cache, q_law, models, precision, q, model, gp_fit_draws, rerun, problems)
    written = STUDIES.get(name).build(options)
    if compare is not None:
        _compare(written, compare, compare_rtol)


@app.command()
def sample(distribution: Path = typer.Argument(..., metavar="DISTRIBUTION", help="distribution spec JSON (or a result.json)"),
           n: int = typer.Option(..., "-n", min=1, help="number of samples"),
           seed: int = typer.Option(0, "--seed", min=0, help="random seed: the same distribution and seed give the "
                                                             "same samples, here, from lwl.measures.from_spec and from "
                                                             "POST /v1/jobs/{id}/samples"),
           out: Path = typer.Option(..., "--out", help=".npy file to write")):
    """Draw N samples from a distribution spec; the same spec and seed give the same bits."""
    import numpy as np

    from lwl.measures import from_spec

    doc = json.loads(distribution.read_text())
    doc = doc.get("distribution", doc)
    np.save(out, from_spec(doc).sample(n, seed))
    console.print(f"wrote {n} samples to {out}")


@app.command()
def report(result: Path = typer.Argument(..., metavar="RESULT", help="a result.json (lwl run, or GET /v1/jobs/{id}/result)"),
           out: Path = typer.Option(..., "--out", help="HTML file to write")):
    """Write one finished job's dashboard page as a single self-contained HTML file."""
    from lwl.ui import offline_page
    from lwl.views import design_views

    try:
        doc = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        console.print(f"[red]{result}: {exc}")
        raise typer.Exit(2)
    if not isinstance(doc, dict) or not {"distribution", "history", "spec"} <= set(doc):
        console.print(f"[red]{result}: not a result document (needs distribution, history and spec)")
        raise typer.Exit(2)
    if "views" not in doc:  # a result made before views existed: field designs can still be drawn
        try:
            doc["views"] = design_views(doc["distribution"])
        except ValueError as exc:
            doc["views"] = {"kind": "none", "why": str(exc)}
    out.write_text(offline_page(doc, result.stem if result.stem != "result" else result.parent.name or "result"))
    console.print(f"wrote {out}")


def _load_plugins() -> None:
    """Components that plugins register (``LWL_PLUGINS``, :func:`lwl.registry.load_plugins`),
    and commands that other packages add to ``lwl`` (entry point group ``lwl.cli``): the
    service's ``serve``, ``ask`` and ``tell`` register from :mod:`service.cli`, ``worker`` from
    :mod:`worker.cli`, so this library never imports its own faces."""
    from importlib.metadata import entry_points

    from lwl.registry import load_plugins

    load_plugins()
    for ep in entry_points(group="lwl.cli"):
        ep.load()(app, console)
    for command in app.registered_commands:  # every command, a plugin's too, writes its usage alike
        if command.cls in (None, TyperCommand):
            command.cls = _Command


_load_plugins()


if __name__ == "__main__":
    app()
