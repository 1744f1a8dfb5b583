"""Pool-based active learning baselines for operator learning (paper SM Burgers; Musekamp et al.
2025): Query-by-Committee and CoreSet, on a fixed unlabelled pool with a growing labelled set.

Schedule (the paper's): start from ``sizes[0]`` random pool points, then at each later size add
the difference, chosen by the method; every round retrains the model(s) from scratch with the
same training budget as every other method.

- QbC: an ensemble of ``committee`` models (different seeds) trained on the labelled set; pick
  the unlabelled points with the largest mean squared L^2 deviation of the members from the
  ensemble mean; the reported model is the first member.
- CoreSet: features are the DeepONet's last-layer branch outputs, Gaussian-sketched to
  ``sketch_dim`` dimensions and normalised to unit length; greedy k-centre picks, one at a
  time, the pool point farthest from the labelled (and already picked) points.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch


def _unlabelled(n: int, labelled: np.ndarray) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[labelled] = False
    return np.flatnonzero(mask)


def qbc_scores(models, pool: np.ndarray, output_weights=1.0) -> np.ndarray:
    """Mean over committee members of ||G_m(u) - mean_m G_m(u)||^2_{L^2}."""
    preds = np.stack([m.predict(pool) for m in models])  # (M, n, out)
    dev = (preds - preds.mean(0)) ** 2 * output_weights
    return dev.sum(-1).mean(0)


def train_committee(factory: Callable[[int], object], X: np.ndarray, Y: np.ndarray, z: np.ndarray, *, seed: int,
              round_: int, size: int) -> list:
    """``size`` models (seeds 7919 apart, shifted by the round) trained on (X, Y): QbC's committee."""
    return [factory(seed + 7919 * m + 31 * round_).fit(X, Y, z) for m in range(size)]


def branch_features(model, pool: np.ndarray, sketch_dim: int = 32, seed: int = 0) -> np.ndarray:
    """Sketched, normalised last-layer branch features of a DeepONet regressor."""
    with torch.no_grad():
        u = torch.as_tensor(pool, dtype=model.z_.dtype, device=model.z_.device)
        f = model.net_.branch(u).double().cpu().numpy()
    if f.shape[1] > sketch_dim:
        f = f @ np.random.default_rng(seed).standard_normal((f.shape[1], sketch_dim)) / np.sqrt(sketch_dim)
    return f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)


def k_center_greedy(features: np.ndarray, labelled: np.ndarray, k: int) -> np.ndarray:
    """k new indices, each the point farthest from the labelled and already chosen points."""
    if len(labelled):
        d = np.min(((features[:, None, :] - features[None, labelled, :]) ** 2).sum(-1), axis=1)
    else:
        d = np.full(len(features), np.inf)
    chosen = []
    for _ in range(k):
        i = int(np.argmax(d))
        chosen.append(i)
        d = np.minimum(d, ((features - features[i]) ** 2).sum(-1))
    return np.asarray(chosen, dtype=int)


def active_learning(method: str, pool: np.ndarray, oracle, factory: Callable[[int], object], z: np.ndarray,
                    sizes: list[int], *, seed: int = 0, committee: int = 4, sketch_dim: int = 32,
                    output_weights=1.0) -> list[tuple[int, object]]:
    """Run one method over the schedule; returns [(N, model trained on the N chosen points)]."""
    if method not in ("qbc", "coreset", "random"):
        raise ValueError(f"method: one of qbc, coreset, random; got {method!r}")
    rng = np.random.default_rng(seed)
    labelled = rng.choice(len(pool), size=sizes[0], replace=False)
    labels = np.asarray(oracle.label(pool[labelled])).reshape(sizes[0], -1)
    out: list[tuple[int, object]] = []
    models: list = []  # the committee of the previous round (that scores the pool from the second round on)
    for r, n in enumerate(sizes):
        if r > 0:
            k = n - len(labelled)
            rest = _unlabelled(len(pool), labelled)
            if method == "qbc":
                new = rest[np.argsort(-qbc_scores(models, pool[rest], output_weights), kind="stable")[:k]]
            elif method == "coreset":
                f = branch_features(models[0], pool, sketch_dim, seed)
                new = k_center_greedy(f, labelled, k)
            else:
                new = rng.choice(rest, size=k, replace=False)
            labelled = np.concatenate([labelled, new])
            labels = np.concatenate([labels, np.asarray(oracle.label(pool[new])).reshape(k, -1)])
        size = committee if method == "qbc" else 1
        models = train_committee(factory, pool[labelled], labels, z, seed=seed, round_=r, size=size)
        out.append((n, models[0]))
    return out
