"""The ``lwl`` command line: run a design job, run a paper study, draw samples."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

app = typer.Typer(add_completion=False, no_args_is_help=True, help="lwl: learning where to learn.")
console = Console(stderr=True)

EXPERIMENTS = ("table1",)


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console)


def _file_resolver(base: Path):
    """Resolve ``{"dataset": "path.npy"}`` members against the spec's folder (.npy or .npz)."""

    def resolve(ref: str) -> np.ndarray:
        path = (base / ref).resolve()
        if not path.is_file():
            raise ValueError(f"dataset: no file {ref!r} next to the spec")
        with open(path, "rb") as fh:
            data = np.load(fh, allow_pickle=False)
            if isinstance(data, np.lib.npyio.NpzFile):
                if len(data.files) != 1:
                    raise ValueError(f"dataset: {ref!r} must hold exactly one array")
                data = data[data.files[0]]
            return np.asarray(data, dtype=np.float64)

    return resolve


@app.command()
def run(spec_path: Path = typer.Argument(..., help="job spec (JSON)"),
        out: Path = typer.Option(Path("runs/latest"), "--out", help="output folder for result.json"),
        device: Optional[str] = typer.Option(None, help="override the spec's device: auto|cpu|cuda")):
    """Run one design job locally and write OUT/result.json."""
    from lwl.runner import run_job
    from lwl.spec import SpecError, parse_job_spec

    try:
        doc = json.loads(spec_path.read_text())
        if device is not None:
            doc["device"] = device
        spec = parse_job_spec(doc)
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
            bar.update(task, completed=p["iteration"], info=info)

        try:
            result = run_job(spec, resolve=_file_resolver(spec_path.parent), progress=progress)
        except ValueError as exc:
            console.print(f"[red]job failed:[/red] {exc}")
            raise typer.Exit(1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    ev = result.get("evaluation", {}).get("err", {})
    for name, err in ev.items():
        console.print(f"Err {name}: {err:.4f}")
    console.print(f"wrote {out / 'result.json'}")


@app.command()
def experiment(name: str = typer.Argument(..., help=f"one of {', '.join(EXPERIMENTS)}"),
               preset: str = typer.Option("quick", help="quick (CI-sized) or paper"),
               out: Path = typer.Option(None, "--out", help="output folder (default runs/NAME-PRESET)"),
               runs: Optional[int] = typer.Option(None, help="override the preset's number of runs"),
               columns: Optional[str] = typer.Option(None, help="comma-separated subset of columns")):
    """Run a paper study; write OUT/results.json, OUT/results.md and PNG figures."""
    if name not in EXPERIMENTS:
        console.print(f"[red]unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}")
        raise typer.Exit(2)
    from lwl.experiments import table1

    if preset not in table1.PRESETS:
        console.print(f"[red]unknown preset {preset!r}; known: {', '.join(table1.PRESETS)}")
        raise typer.Exit(2)
    out = out or Path("runs") / f"{name}-{preset}"
    cols = columns.split(",") if columns else None
    n_cols = len(cols) if cols else len(table1.COLUMNS)
    n_runs = runs or table1.PRESETS[preset]["runs"]
    with _progress() as bar:
        task = bar.add_task(f"{name} ({preset})", total=n_cols * n_runs, info="")

        def progress(col, r, res):
            bar.update(task, advance=1, info=f"{col} run {r}: Err {res['evaluation']['err']['optimized']:.3f}")

        try:
            doc = table1.run(preset, runs=runs, columns=cols, progress=progress)
        except ValueError as exc:
            console.print(f"[red]{exc}")
            raise typer.Exit(2)
    for path in table1.write_outputs(doc, out):
        console.print(f"wrote {path}")
    sys.stdout.write((out / "results.md").read_text())


@app.command()
def sample(distribution: Path = typer.Argument(..., help="distribution spec JSON (or a result.json)"),
           n: int = typer.Option(..., "-n", min=1, help="number of samples"),
           seed: int = typer.Option(..., "--seed", min=0),
           out: Path = typer.Option(..., "--out", help=".npy file to write")):
    """Draw N samples from a distribution spec; the same spec and seed give the same bits."""
    from lwl.measures import from_spec

    doc = json.loads(distribution.read_text())
    doc = doc.get("distribution", doc)
    np.save(out, from_spec(doc).sample(n, seed))
    console.print(f"wrote {n} samples to {out}")


if __name__ == "__main__":
    app()
