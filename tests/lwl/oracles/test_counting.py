"""The counting oracle (lwl.oracles.counting): every solve a job asks for, whether as a label or as
a solver handed out for the adjoint (particle AMA), counted once."""

import numpy as np

from lwl.oracles.counting import CountingOracle
from lwl.runner import run_job
from lwl.spec import parse_job_spec


class SpyRTE:
    """The RTE oracle with its own count of the transport solves it performs (labels and the
    solvers it hands out), which the counting oracle must match."""

    def __init__(self, inner):
        self.inner, self.performed = inner, 0

    def label(self, inputs):
        self.performed += len(inputs)
        return self.inner.label(inputs)

    def solver(self, a):
        self.performed += 1
        return self.inner.solver(a)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_particle_ama_solves_through_the_adjoint_solver_are_counted(particle_spec):
    spy = SpyRTE(parse_job_spec(particle_spec).oracle.build())
    counted = CountingOracle(spy)
    res = run_job(particle_spec, oracle=counted, evaluate=False)
    assert counted.solves == spy.performed > 0
    assert res["labels_used"] == spy.performed  # the design's own count: the adjoint's re-solves included


def test_an_oracle_without_a_solver_has_none_behind_the_counter():
    from lwl.oracles import make_oracle

    darcy = CountingOracle(make_oracle({"name": "darcy"}))
    assert not hasattr(darcy, "solver")
    darcy.label(np.zeros((2, 16)))
    assert darcy.solves == 2
