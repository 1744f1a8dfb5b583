"""The catalog: every oracle, family, model and algorithm a job spec can name, with the JSON
schema of its parameters (``GET /v1/catalog``), read from the registries
(:mod:`lwl.registry`, :mod:`lwl.oracles`): a registered plugin appears here by itself."""

from __future__ import annotations

import inspect


def catalog() -> dict:
    import lwl.oracles  # noqa: F401  (registers the built-in oracles)
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS, ORACLES
    from lwl.evaluation.spec import EvaluationSpec
    from lwl.spec import JobSpec

    oracles = []
    for name, cls in sorted((e.name, e.build) for e in ORACLES.entries()):
        params = {p.name: (None if p.default is inspect.Parameter.empty else p.default)
                  for p in list(inspect.signature(cls.__init__).parameters.values())[1:]}
        oracles.append({"name": name, "min_dim": cls.min_dim, "params": params,
                        "doc": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""})

    def listing(registry):
        return [{"name": e.name, "schema": e.params.model_json_schema()} for e in registry.entries()]

    return {
        "oracles": oracles,
        "families": listing(FAMILIES),
        "models": listing(MODELS),
        "algorithms": listing(ALGORITHMS),
        "evaluation": EvaluationSpec.model_json_schema(),
        "job_spec": JobSpec.model_json_schema(),
    }
