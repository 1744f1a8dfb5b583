"""Models: kernel ridge regression (bilevel inner problem), Gaussian-process regression with
fitted hyperparameters (the surrogate a lab deploys), DeepONet (AMA)."""

from lwl.models.krr import KernelRidge  # noqa: I001  (krr registers first: the catalog's order)
from lwl.models.gp import GaussianProcess
from lwl.models.deeponet import DeepONetRegressor

__all__ = ["DeepONetRegressor", "GaussianProcess", "KernelRidge", "fit_hyperparameters", "from_spec", "train"]


def from_spec(doc: dict, device: str = "cpu"):
    """The trained model of a model document (``GET /v1/jobs/{id}/model``; a model's
    ``to_spec()``): its registry entry's ``document`` hook rebuilds it (a GP or KRR at the
    document's hyperparameters on its training set, a DeepONet from its weights), so ``from_spec(doc).predict(x, return_std=True)`` gives
    the service's numbers."""
    from lwl.models.gp import DOCUMENT_KIND, DOCUMENT_VERSION
    from lwl.registry import MODELS

    if doc.get("kind") != DOCUMENT_KIND:
        raise ValueError(f"kind: not a model document (expected {DOCUMENT_KIND!r}, got {doc.get('kind')!r})")
    if doc.get("version") != DOCUMENT_VERSION:
        raise ValueError(f"version: model documents of version {DOCUMENT_VERSION} are read, got {doc.get('version')!r}")
    load = MODELS.get(doc.get("model")).resolve("document")
    if load is None:
        raise ValueError(f"model: a {doc.get('model')} model has no document")
    return load(doc, device=device)


def document_training_set(doc: dict) -> dict:
    """The ``training_set`` a kernel model's document conditions on (a GP's, a KRR's), or a
    ValueError naming the field."""
    if "training_set" not in doc:
        raise ValueError("training_set: the document names no training data")
    return doc["training_set"]


def train(model, X, y, *, ridge: float, seed: int, hyperparameters=None, device: str = "cpu"):
    """The job's model (its spec block ``model``) trained on (X, y), as a job's scores and its
    verdict train it: ``krr`` with its lengthscale and N sigma^2 = ``ridge``; ``gp`` with its
    hyperparameters fitted to these labels (``random_state=seed``), or, given
    ``hyperparameters`` (a fitted :class:`GaussianProcess`), at those (its mean refitted)."""
    if model.name == "krr":
        return KernelRidge(model.kernel, model.lengthscale, ridge / len(X), device=device).fit(X, y)
    if model.name == "gp":
        if hyperparameters is not None:  # every output at its own values
            h = hyperparameters
            return GaussianProcess(h.kernel_, lengthscale=h.lengthscale_, output_scale=h.output_scale_,
                                   noise=h.noise_, optimize=False, device=device).fit(X, y)
        return GaussianProcess(model.kernel, restarts=model.restarts, max_fit_points=model.max_fit_points,
                               refit_points=model.refit_points, final_fit_points=model.final_fit_points,
                               noise_bounds=(model.noise_floor, 1.0), random_state=seed, device=device,
                               select=model.select, fit_draws=model.fit_draws).fit(X, y)
    raise ValueError(f"model.name: {model.name} is not a regression model lwl trains on a training set")


def fit_hyperparameters(model, X, y, *, seed: int, device: str = "cpu") -> GaussianProcess:
    """A ``gp`` spec block's hyperparameters fitted to (X, y) as :func:`train` fits them, with its
    evidence check (a collapsed subset fit is fitted again on more points) and without its final
    fit or a kept factor of every point: for ``train(..., hyperparameters=...)`` on other
    training sets (a budgeted design's scores)."""
    if model.name != "gp":
        raise ValueError(f"model.name: a {model.name} model has no fitted hyperparameters")
    return GaussianProcess(model.kernel, restarts=model.restarts, max_fit_points=model.max_fit_points,
                           refit_points=model.refit_points, noise_bounds=(model.noise_floor, 1.0),
                           random_state=seed, device=device, select=model.select).fit_hyperparameters(X, y)


def model_document(result: dict) -> dict | None:
    """The model document of a job's result (``GET /v1/jobs/{id}/model``): the trained model's
    kernel and hyperparameters (``result["model"]``) with the training set it conditions on
    (``result["training_set"]``) inline; None for a job that trains no model it serves (one
    without a budget)."""
    model, ts = result.get("model"), result.get("training_set")
    if model is None or ts is None:
        return None
    return {**model, "training_set": {"inputs": ts["inputs"], "labels": ts["labels"]}}
