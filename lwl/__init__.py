"""lwl: learning where to learn.

Designs the training-data distribution for scientific machine learning (Guerra, Nelsen, Yang,
"Learning where to learn"). The public entry points are

- :func:`lwl.run_job` runs a job spec (:class:`lwl.spec.JobSpec`) through its stepper,
- :func:`lwl.measures.from_spec` turns a distribution spec back into a sampler,
- :func:`lwl.oracles.make_oracle` builds a labelling oracle by name.
"""

import os as _os

# lwl uses POT's numpy and torch backends only. POT otherwise initialises every array library it
# finds at import: with JAX installed on a GPU machine that preallocates 75% of the GPU's memory in
# each process, and the torch model beside it then fails with CUDA out-of-memory (seen in the GPU
# test pass with several workers). Set before ``ot`` is imported anywhere in lwl.
for _backend in ("JAX", "CUPY", "TENSORFLOW"):
    _os.environ.setdefault(f"POT_BACKEND_DISABLE_{_backend}", "1")
del _os, _backend

__version__ = "0.1.0"

# Nothing heavy at import: the light client path (``lwl submit / status / ask / tell``, lwl.client)
# imports ``lwl`` for one HTTP call, and torch, scipy and POT cost it seconds (issue 85). The
# built-in components register on the first read of a component registry (lwl.registry), and
# ``run_job`` imports the runner on first use.
from lwl import registry as _registry  # noqa: E402

_registry.on_first_read("lwl.builtins")
del _registry


def __getattr__(name: str):
    """``lwl.run_job`` and the subpackages (``lwl.measures.from_spec``, ``lwl.oracles.make_oracle``)
    on first use, as an eager ``import lwl`` gave them."""
    if name == "run_job":
        from lwl.runner import run_job

        return run_job
    if name.startswith("_"):  # (probes such as __wrapped__ or __path__ lookups are no subpackage)
        raise AttributeError(f"module 'lwl' has no attribute {name!r}")
    import importlib

    try:
        return importlib.import_module(f"lwl.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"lwl.{name}":  # (a dependency of that module is missing: say so)
            raise
    raise AttributeError(f"module 'lwl' has no attribute {name!r}")


__all__ = ["__version__", "run_job"]
