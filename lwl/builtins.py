"""lwl's own components, registered the way a plugin registers its own: each module declares its
parameter model and checks beside its code and registers them on import (one ``register`` call
at its end). Importing this module imports them all, in the order the catalog lists them:
families gaussian, mixture, auto, pool, kle, particles, interval; models krr, gp, deeponet, amino;
algorithms bilevel, ama, particle_ama, interval_search.

The first read of a component registry imports it (``lwl`` names it in
:func:`lwl.registry.on_first_read`), so every entry point (the CLI, the service, a worker, a
notebook) sees the same registries; plugins follow (:func:`lwl.registry.load_plugins`)."""

import lwl.kernels  # noqa: F401  (each import registers its module's components)
import lwl.evaluation.spec  # noqa: F401  (the built-in baselines)
import lwl.oracles  # noqa: F401
import lwl.models.krr  # noqa: F401
import lwl.models.gp  # noqa: F401
import lwl.models.deeponet  # noqa: F401
import lwl.models.amino  # noqa: F401
import lwl.design.families.gaussian  # noqa: F401
import lwl.design.families.mixture  # noqa: F401
import lwl.design.families.auto  # noqa: F401
import lwl.design.families.pool  # noqa: F401
import lwl.measures.kle_family  # noqa: F401
import lwl.design.bilevel  # noqa: F401
import lwl.design.ama  # noqa: F401
import lwl.design.particles  # noqa: F401
import lwl.design.interval_search  # noqa: F401
