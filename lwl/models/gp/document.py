"""The fitted GP written out: its versioned model document (``to_spec``, ``from_spec``: the same
numbers wherever it is loaded), scikit-learn's regressor at its hyperparameters (``to_sklearn``)
and its posterior mean as lwl's kernel ridge regression (:func:`as_kernel_ridge`)."""

from __future__ import annotations

import math
from typing import NamedTuple, Self

import numpy as np

from lwl.device import resolve_device
from lwl.models.gp.conditioned import ConditionedModel
from lwl.models.gp.kernel import GP_KERNELS, unknown_kernel

DOCUMENT_KIND = "lwl.model"
DOCUMENT_VERSION = 1


class ModelDocument(ConditionedModel):
    """A conditioned GP's document I/O and its scikit-learn form."""

    def to_spec(self, training_set: bool = True) -> dict:
        """The versioned model document (:func:`lwl.models.from_spec` reads it back): every
        hyperparameter in the user's units; ``standardisation`` is the map the model computes
        through (a function of the training set; informative, the loader forms it again)."""
        from lwl import __version__

        doc = {"kind": DOCUMENT_KIND, "version": DOCUMENT_VERSION, "lwl_version": __version__, "model": "gp",
               "kernel": self.kernel_,
               "std": "measurement: sqrt of the posterior variance of f (R&W eq. 2.26) plus the noise, the std of a new "
                      "measurement (scikit-learn's with a WhiteKernel); latent_std leaves the noise out",
               "outputs": [{"lengthscale": self.lengthscale_[j].tolist(), "output_scale": float(self.output_scale_[j]),
                            "noise": float(self.noise_[j]), "mean": float(self.mean_[j]),
                            "jitter": float(self.jitter_[j]),
                            "log_marginal_likelihood": float(self.log_marginal_likelihood_[j])}
                           for j in range(len(self.alpha_))],
               "standardisation": self.standardisation_.to_json(),
               "single_output": bool(self.single_output_)}
        if training_set:
            doc["training_set"] = {"inputs": self.X_.cpu().numpy().tolist(),
                                   "labels": (self.Y_[:, 0] if self.single_output_ else self.Y_).tolist()}
        return doc

    @classmethod
    def from_spec(cls, doc: dict, device: str = "cpu") -> Self:
        """The GP of a model document, conditioned on its training set at its hyperparameters
        and mean (no fitting: the same numbers wherever it is loaded)."""
        from lwl.models import document_training_set

        outs = doc["outputs"]
        ts = document_training_set(doc)
        if doc.get("kernel") not in GP_KERNELS:
            raise unknown_kernel(doc.get("kernel"))
        gp = cls(kernel=doc["kernel"], optimize=False, device=device)
        gp.kernel_ = doc["kernel"]
        gp.device_ = resolve_device(device)
        X = np.asarray(ts["inputs"], dtype=np.float64)
        y = np.asarray(ts["labels"], dtype=np.float64)
        gp.single_output_ = y.ndim == 1
        Y = y.reshape(len(y), -1)
        if Y.shape[1] != len(outs) or X.ndim != 2 or len(X) != len(Y):
            raise ValueError(f"training_set: {X.shape} inputs and {y.shape} labels do not fit {len(outs)} output(s)")
        gp._set_data(X, Y)
        gp.lengthscale_ = np.array([np.broadcast_to(o["lengthscale"], (X.shape[1],)) for o in outs], dtype=np.float64)
        gp.output_scale_ = np.array([o["output_scale"] for o in outs], dtype=np.float64)
        gp.noise_ = np.array([o["noise"] for o in outs], dtype=np.float64)
        gp.jitter_ = np.array([o.get("jitter", 0.0) for o in outs], dtype=np.float64)  # the fit's record (in noise_)
        gp._condition(np.array([o["mean"] for o in outs], dtype=np.float64))
        return gp

    def to_sklearn(self, output: int = 0):
        """scikit-learn's ``GaussianProcessRegressor`` of this model's output ``output``, fitted
        (``optimizer=None``) at the same hyperparameters in the user's units:
        ``ConstantKernel(s^2) * RBF(ell)`` (squared exponential) or ``* Matern(ell, nu=2.5)``,
        ``+ WhiteKernel(sigma_n^2)``, all fixed, on the labels minus the constant mean, with that
        mean restored in ``predict`` (its ``_y_train_mean``, the attribute ``normalize_y`` sets:
        scikit-learn has no constant-mean prior). ``predict(x, return_std=True)`` then gives this
        model's mean and measurement std; its ``kernel_`` is the document's kernel. Beside this
        model's standardised computation it agrees to round-off (rtol about 1e-8 on a well
        conditioned K_y)."""
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

        ell = self.lengthscale_[output]
        base = RBF(ell, "fixed") if self.kernel_ == "squared_exponential" else Matern(ell, "fixed", nu=2.5)
        kernel = ConstantKernel(float(self.output_scale_[output]), "fixed") * base + \
            WhiteKernel(float(self.noise_[output]), "fixed")
        X = self.X_.cpu().numpy()
        y = self.Y_[:, output] - float(self.mean_[output])
        reg = GaussianProcessRegressor(kernel, alpha=0.0, optimizer=None, normalize_y=False).fit(X, y)
        reg._y_train_mean = np.asarray(float(self.mean_[output]))
        return reg


class KernelRidgeForm(NamedTuple):
    """A fitted GP's posterior mean written as isotropic KRR (:func:`as_kernel_ridge`): train KRR
    with ``kernel`` at lengthscale 1 and nugget N sigma2 = ``nugget`` on ((X - ``input_loc``) /
    ``input_scale``, y - ``mean``), predict at (x - ``input_loc``) / ``input_scale`` and add ``mean``
    (centred: a kernel formed as |x|^2 + |y|^2 - 2 x.y cancels on inputs offset far from their spread)."""

    kernel: str
    input_scale: np.ndarray  # (d,)
    nugget: float
    mean: float
    input_loc: np.ndarray | None = None  # (d,): inputs are centred first, (x - input_loc) / input_scale


def as_kernel_ridge(gp: ConditionedModel, output: int = 0) -> KernelRidgeForm:
    """The posterior mean of a fitted single-output GP at fixed hyperparameters is kernel ridge
    regression (R&W eq. 2.25 with K = s^2 K_1 + noise I): with its ARD lengthscales absorbed into
    the inputs (squared exponential: x / (sqrt2 ell), for lwl's KRR convention exp(-r^2 / l^2);
    Matern 5/2: x / ell), the nugget noise / s^2 and the constant mean taken off the labels. The
    bilevel adjoint and score-function gradient (lwl.design.bilevel) then carry over unchanged
    (:meth:`lwl.design.budgeted_bilevel.BudgetedBilevel.propose` moves a gp job this way)."""
    ell = np.asarray(gp.lengthscale_[output], dtype=np.float64)
    scale = math.sqrt(2.0) * ell if gp.kernel_ == "squared_exponential" else ell
    return KernelRidgeForm(gp.kernel_, scale, float(gp.noise_[output] / gp.output_scale_[output]),
                           float(gp.mean_[output]), gp.standardisation_.x_loc.copy())
