"""lwl: learning where to learn.

Designs the training-data distribution for scientific machine learning (Guerra, Nelsen, Yang,
"Learning where to learn"). The public entry points are

- :func:`lwl.run_job` runs a job spec (:class:`lwl.spec.JobSpec`) through its stepper,
- :func:`lwl.measures.from_spec` turns a distribution spec back into a sampler,
- :func:`lwl.oracles.make_oracle` builds a labelling oracle by name.
"""

__version__ = "0.1.0"

from lwl.runner import run_job  # noqa: E402

__all__ = ["__version__", "run_job"]
