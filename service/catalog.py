"""The catalog: every oracle, family, model and algorithm a job spec can name, with the JSON
schema of its parameters (``GET /v1/catalog``)."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def catalog() -> dict:
    import inspect

    from lwl.oracles.base import _REGISTRY
    from lwl.spec import (AMASpec, BilevelSpec, DeepONetSpec, EvaluationSpec, GaussianFamilySpec, JobSpec,
                          KLEFamilySpec, KRRSpec, MixtureFamilySpec, ParticleAMASpec, ParticlesFamilySpec)

    oracles = []
    for name, cls in sorted(_REGISTRY.items()):
        params = {p.name: (None if p.default is inspect.Parameter.empty else p.default)
                  for p in list(inspect.signature(cls.__init__).parameters.values())[1:]}
        oracles.append({"name": name, "min_dim": cls.min_dim, "params": params,
                        "doc": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""})
    return {
        "oracles": oracles,
        "families": [{"name": "gaussian", "schema": GaussianFamilySpec.model_json_schema()},
                     {"name": "mixture", "schema": MixtureFamilySpec.model_json_schema()},
                     {"name": "kle", "schema": KLEFamilySpec.model_json_schema()},
                     {"name": "particles", "schema": ParticlesFamilySpec.model_json_schema()}],
        "models": [{"name": "krr", "schema": KRRSpec.model_json_schema()},
                   {"name": "deeponet", "schema": DeepONetSpec.model_json_schema()}],
        "algorithms": [{"name": "bilevel", "schema": BilevelSpec.model_json_schema()},
                       {"name": "ama", "schema": AMASpec.model_json_schema()},
                       {"name": "particle_ama", "schema": ParticleAMASpec.model_json_schema()}],
        "evaluation": EvaluationSpec.model_json_schema(),
        "job_spec": JobSpec.model_json_schema(),
    }
