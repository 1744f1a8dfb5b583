import numpy as np

from lwl.design import BilevelDesign
from lwl.oracles import make_oracle
from lwl.spec import parse_job_spec


def labelled_design(doc: dict, *, move: float = 0.0, seed: int = 0):
    """(design, oracle, state) after Q's validation points are labelled; ``move`` > 0 shifts
    phi by that many standard normals so the state is away from the fitted start."""
    spec = parse_job_spec(doc)
    design = BilevelDesign.from_spec(spec)
    oracle = make_oracle(spec.oracle)
    state = design.init()
    state = design.step(state, oracle.label(design.queries(state)))
    if move:
        phi = state.phi + move * np.random.default_rng(seed).standard_normal(state.phi.shape)
        state = state.replace(phi=phi, params=design.family.from_phi(phi))
    return design, oracle, state
