"""Empirical Lipschitz constants (paper SM NtD, eqn app_lip_estimate):

    Lip(G) ~ max_{(g1, g2) in S} ||G(g1) - G(g2)||_{L^2} / ||g1 - g2||_{L^2},

over a finite set S of input pairs drawn from candidate training distributions. Norms are
weighted Euclidean norms with the grids' quadrature weights.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from lwl.measures.base import Measure


def lipschitz_pairs(candidates: list[Measure], pairs: int, seed) -> tuple[np.ndarray, np.ndarray]:
    """``pairs`` input pairs spread over the candidate distributions: (pairs, d) twice."""
    per = -(-pairs // len(candidates))
    a, b = [], []
    for i, m in enumerate(candidates):
        x = m.sample(2 * per, [*np.atleast_1d(seed).tolist(), i])
        a.append(x[:per])
        b.append(x[per:])
    return np.concatenate(a)[:pairs], np.concatenate(b)[:pairs]


def lipschitz_ratio(ga: np.ndarray, gb: np.ndarray, a: np.ndarray, b: np.ndarray,
                    input_weights: np.ndarray | float = 1.0, output_weights: np.ndarray | float = 1.0) -> float:
    """max_i ||ga_i - gb_i||_out / ||a_i - b_i||_in (pairs with a_i == b_i are skipped)."""
    num = np.sqrt(((ga - gb) ** 2 * output_weights).sum(axis=1))
    den = np.sqrt(((a - b) ** 2 * input_weights).sum(axis=1))
    ok = den > 0
    if not ok.any():
        raise ValueError("lipschitz: every pair has identical inputs")
    return float(np.max(num[ok] / den[ok]))


def estimate_lipschitz(fn: Callable[[np.ndarray], np.ndarray], candidates: list[Measure], pairs: int = 250,
                       seed=0, input_weights: np.ndarray | float = 1.0,
                       output_weights: np.ndarray | float = 1.0) -> float:
    """eqn app_lip_estimate for the map ``fn`` (batch in, batch out)."""
    a, b = lipschitz_pairs(candidates, pairs, seed)
    out = np.asarray(fn(np.concatenate([a, b])))
    return lipschitz_ratio(out[:pairs], out[pairs:], a, b, input_weights, output_weights)
