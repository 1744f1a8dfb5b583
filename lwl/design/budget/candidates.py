"""The candidates of a budgeted design and the draws of each round (docs/method/budgets.md "Designs for a
label budget").

A **candidate** is a distribution selection runs: the algorithm's cheap laws fixed in advance and
Q's own mixture (:data:`Q_MIXTURE`), which every budgeted design adds. A round's **draws** are the
points it labels: during selection the round split among the live candidates
(:func:`selection_counts`: equally, or with ``algorithm.explore`` Q's mixture the default that
takes 1 - explore of it); after it the incumbent's share, Q's mixture's ``hedge`` share while it
races the incumbent, and a quarter for the challenger when a move proposed one. The points served
whatever the scores say (the incumbent's, and the default's during selection) can be chosen by the
algorithm's pool rule from one pool of the law's draws for the whole job (:func:`pool`, as the QbC
baseline chooses its solves). Every draw derives from (seed, STREAM_BUDGET, round, slot), so a
state restored from a checkpoint draws the same points.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from lwl.design.budget.ledger import CHALLENGER, POOLED
from lwl.design.budget.plan import BudgetPlan
from lwl.design.budget.settings import BudgetAlgorithm, explore_min
from lwl.design.budget.state import BudgetedState
from lwl.design.families import Params
from lwl.measures import Measure
from lwl.q_samples import MetaTestSamples
from lwl.streams import STREAM_BUDGET

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import the designs
    from lwl.spec import JobSpec

Q_MIXTURE = "q_mixture"  # the candidate every budgeted design adds: Q's own mixture


class Candidate(NamedTuple):
    """A distribution selection runs: its name, its measure, and its parameters when it is a
    member of the algorithm's family (None otherwise: it cannot be moved)."""

    name: str
    measure: Measure
    params: Params | None


class Drawing(Protocol):
    """What the draws read of a budgeted design (:class:`lwl.design.budget.design.BudgetedDesign`):
    its candidates, plan and family, the caches of a round's draws and of each law's pool, and the
    algorithm's pool rule."""

    spec: JobSpec
    q: MetaTestSamples
    family: Any
    plan: BudgetPlan
    algo: BudgetAlgorithm
    candidates: list[Candidate]
    pool_factor: int
    _cache: tuple
    _pools: dict[int, np.ndarray]

    @property
    def explore(self) -> float | None: ...

    def _q_mixture_index(self) -> int: ...

    def _selection_counts(self, alive: list[int], n: int) -> list[int]: ...

    def incumbent_measure(self, state: BudgetedState) -> Measure: ...

    def pool(self, state: BudgetedState, c: int) -> np.ndarray: ...

    def pool_size(self) -> int: ...

    def select_from_pool(self, state: BudgetedState, pool: np.ndarray, m: int, key: list[int]) -> np.ndarray: ...


def params_key(params: Params | None) -> tuple:
    """A hashable image of ``params`` (the round's draws are cached by state)."""
    return () if params is None else tuple((n, np.asarray(v).tobytes()) for n, v in params.items())


def member_law(family, params: Params, spec: JobSpec, q: MetaTestSamples) -> Measure:
    """The law a family member's points are drawn from in a budgeted job: the family's measure
    (restricted to the input domain, when there is one, by truncation), or, with
    ``domain.outside: "clip"``, the member's unrestricted law put onto the domain by the projection
    as Q's samples are, with no larger share on its faces than Q's (:func:`lwl.measures.on_domain`)."""
    inner = getattr(family, "inner", None)  # a family restricted to the domain (ConstrainedFamily)
    if inner is not None and spec.domain is not None and spec.domain.outside == "clip":
        from lwl.measures import on_domain

        return on_domain(inner.measure(params), spec, q)
    return family.measure(params)


def not_taken(pool: np.ndarray, taken: np.ndarray) -> np.ndarray:
    """Mask of the rows of ``pool`` left when each row of ``taken`` removes one equal row (a
    multiset difference: a discrete law's pool repeats its atoms, and one label takes one draw)."""
    count = Counter(row.tobytes() for row in np.ascontiguousarray(taken, dtype=pool.dtype))
    keep = np.ones(len(pool), dtype=bool)
    for i, row in enumerate(pool):
        b = row.tobytes()
        if count[b]:
            count[b] -= 1
            keep[i] = False
    return keep


def equal_split(n: int, k: int) -> list[int]:
    """n labels split among k as equally as they go (the first n mod k get one more)."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def explores(design: Drawing) -> bool:
    """Selection runs the candidates besides Q's mixture: always, unless the spec's
    ``algorithm.explore_min`` (the operator designs') asks each of them for more solves of the
    first selection round than the plan gives it (:func:`selection_counts`). With fewer
    (a 250- or 1,000-solve operator budget in rounds of 64 gives six candidates 2-3 each) their
    scores are noise and their share is solves the pool rule does not choose: NtD at 250 solves,
    Err 0.0865 exploring, 0.0767 not (docs/method/operators.md, "Committee first"); the design then
    spends every design label on Q's mixture."""
    least = explore_min(design.algo)
    everyone = list(range(len(design.candidates)))
    q = design._q_mixture_index()
    if least is None or len(everyone) == 1:
        return True
    counts = design._selection_counts(everyone, design.plan.rounds[0])
    return min(m for c, m in zip(everyone, counts) if c != q) >= least


def selection_counts(design: Drawing, alive: list[int], n: int) -> list[int]:
    """Labels of a selection round of ``n`` for each live candidate: an equal split, or, with
    ``algorithm.explore`` (Q's mixture the default, :func:`lwl.design.budget.selection.select`),
    ``explore`` n split equally among the others and the rest to Q's mixture."""
    q = design._q_mixture_index()
    if design.explore is None or q not in alive or len(alive) == 1:
        return equal_split(n, len(alive))
    others = [c for c in alive if c != q]
    # at least one point each while the round has them (a small last round: the first of them)
    share = min(n, max(len(others), int(round(design.explore * n))))
    split = iter(equal_split(share, len(others)))
    return [n - share if c == q else next(split) for c in alive]


def round_draws(design: Drawing, state: BudgetedState) -> tuple[np.ndarray, np.ndarray]:
    """The inputs of the current design round and the source of each (a candidate's index,
    CHALLENGER or POOLED); drawn once per round and state, or fixed in the state when the last
    round ended (a pool rule: ``pending_X``)."""
    if state.pending_X is not None:
        return state.pending_X, state.pending_source
    r = state.iteration  # rounds done; design round r - 1 of the plan
    key = (r, tuple(state.alive), state.incumbent, state.has_challenger, state.rival,
           params_key(state.kept.params if state.kept is not None else None), params_key(state.challenger),
           len(state.points.y))
    if design._cache[0] == key:
        return design._cache[1]
    n = design.plan.rounds[r - 1]
    seed = design.spec.seed
    K = len(design.candidates)
    xs: list[np.ndarray] = []
    src: list[np.ndarray] = []
    if state.incumbent is None:  # selection: the round split among the live candidates (selection_counts)
        alive = state.alive
        counts = design._selection_counts(alive, n)
        q_mix = design._q_mixture_index()
        q = q_mix if design.explore is not None else None
        scored = max((m for c, m in zip(alive, counts) if c != q), default=0)
        lone = alive == [q_mix]  # unexplored (explore_min): every draw the pool rule's
        for c, m in zip(alive, counts):
            if m:
                # the default's share is served whatever selection decides: beyond the i.i.d.
                # points that score it at equal numbers with the others, a pool rule's choice
                iid = 0 if lone else scored if c == q else m
                served_draws(design, state, c, m, iid, [seed, STREAM_BUDGET, r, c], xs, src)
    else:
        m_chal = n // 4 if state.has_challenger else 0
        rival = state.rival
        m_rival = int(round(n * design.algo.hedge)) if rival is not None else 0
        m_rival = min(m_rival, n - m_chal - 1)
        # with a rival, as many i.i.d. points as its share: the race compares the two laws
        served_draws(design, state, state.incumbent, n - m_chal - m_rival, m_rival, [seed, STREAM_BUDGET, r, K], xs, src)
        if m_rival > 0:
            xs.append(design.candidates[rival][1].sample(m_rival, [seed, STREAM_BUDGET, r, K + 2]))
            src.append(np.full(m_rival, rival))
        if m_chal:
            chal = member_law(design.family, state.challenger, design.spec, design.q)
            xs.append(chal.sample(m_chal, [seed, STREAM_BUDGET, r, K + 1]))
            src.append(np.full(m_chal, CHALLENGER))
    out = (np.concatenate(xs), np.concatenate(src).astype(np.int64))
    design._cache = (key, out)
    return out


def served_draws(design: Drawing, state: BudgetedState, c: int, m: int, iid: int, key: list[int],
                 xs: list, src: list) -> None:
    """Append m draws of candidate ``c`` (the incumbent's law when it is the incumbent) to
    ``xs``/``src``: all i.i.d. draws of its law (source c), or, where the algorithm has a pool
    rule (``pool_factor`` > 0, e.g. the ama design's query by committee), the first ``iid``
    of them i.i.d. and the rest the m - iid that its ``select_from_pool`` picks from a pool of
    :func:`pool_size` draws (source POOLED: served, never used to score a law).
    Used for the points that are served whatever the scores say: the incumbent's, and the
    default's during selection; the other candidates' stay i.i.d., as do Q's validation points."""
    measure = design.incumbent_measure(state) if c == state.incumbent else design.candidates[c][1]
    iid = m if not design.pool_factor else min(iid, m)
    if iid:
        xs.append(measure.sample(iid, key))
        src.append(np.full(iid, c))
    if m > iid:
        drawn = design.pool(state, c)
        xs.append(drawn[design.select_from_pool(state, drawn, m - iid, key)])
        src.append(np.full(m - iid, POOLED))


def pool_size(design: Drawing) -> int:
    """Draws of a law's pool: ``pool_factor`` per design label of the plan, as the QbC
    baseline chooses its n solves from one pool of ``pool_factor`` n draws
    (:func:`lwl.design.active.active_learning`)."""
    return design.pool_factor * sum(design.plan.rounds)


def pool(design: Drawing, state: BudgetedState, c: int) -> np.ndarray:
    """The draws of law ``c`` that a round's pooled points are chosen from: one pool of
    :func:`pool_size` draws for the whole job (the stream of round 0, which no design round
    draws from), less the pooled points already labelled, so the rounds choose without replacement as
    the QbC baseline does. A fresh pool of ``pool_factor`` times the labels left at every round
    picked the first rounds' 64 of 3,360 draws, too few and too alike: Burgers at 1,000 solves
    ended 3-3.5% behind Q's law's i.i.d. draws (seeds 0, 1: Err 0.302, 0.298); with one pool
    0.289, 0.287, a tie, and NtD at 250 held (0.0741, 0.0704 against 0.0746, 0.0705)
    (docs/method/operators.md, "One pool"). A failed solve takes its draw too (the committee, trained on
    the fields that came back, would pick it again). The ledger does not say which law a pooled
    point was drawn from, so a law's pool loses every pooled point equal to one of its draws: laws
    with common atoms would take each other's (the laws of today's pool rules are continuous)."""
    if c < 0:  # a moved incumbent (source MOVED): no design with a pool rule moves its law yet
        raise ValueError(f"{type(design).__name__}: a pool rule needs a candidate's law, not source {c}")
    if c not in design._pools:
        law = design.candidates[c].measure
        design._pools[c] = law.sample(design.pool_size(), [design.spec.seed, STREAM_BUDGET, 0, c, 1])
    drawn, P = design._pools[c], state.points
    return drawn[not_taken(drawn, np.concatenate([P.X[P.source == POOLED], P.failed_X]))]
