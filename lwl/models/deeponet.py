"""DeepONet (Lu et al. 2021; paper SM "DeepONet"): G(u)(z) = <B(u(x_1..x_J)), T(z)> + b.

Branch and trunk are ReLU MLPs (the last layer of each is linear), weights Glorot-normal, a
scalar output bias. :class:`DeepONetRegressor` trains it scikit-learn style: ``fit`` returns
self, learned state ends in ``_``; Adam with inverse-time decay of the learning rate,
lr / (1 + decay_rate * step / decay_steps) (the paper's Burgers setting: 2000 and 0.9),
optional weight decay, and early stopping on a held-out fraction of the training pairs
(patience and min_delta on its relative error). CPU or CUDA.

``normalize=True`` standardises inputs by one scalar mean/std and scales outputs by their RMS at
the first fit (off by default, as in the paper: on the Darcy quick study it raised the
in-distribution error from 0.066 to 0.097 and the error of a model trained at shift 0.4 from
0.43 to 1.03).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field, field_validator

from lwl.device import resolve_device
from lwl.models.precision import check_precision, matmul_precision
from lwl.params import StrictModel
from lwl.registry import MODELS

PRESETS = {
    # paper SM NtD (M = 128: 4M - 4 = 508 boundary sensors, 2-d query points)
    "ntd": {"branch": [508, 512, 512, 512, 200], "trunk": [2, 128, 128, 128, 200]},
    # paper SM Burgers (n = 8192 sensors, 1-d query points, p = 128)
    "burgers": {"branch": [8192, 1024, 512, 256, 128, 128], "trunk": [1, 128, 128, 128, 128, 128]},
    # paper SM RTE (m = 20: 400 coefficients, 2-d query points)
    "rte": {"branch": [400, 100, 100, 100, 64, 32], "trunk": [2, 100, 100, 100, 64, 32]},
}


def mlp(sizes: list[int]) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = torch.nn.Linear(a, b, dtype=torch.float32)
        torch.nn.init.xavier_normal_(lin.weight)  # Glorot normal
        torch.nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _adam(params, **kw) -> torch.optim.Adam:
    """Adam with the fused single-kernel update where this torch has it (CPU and CUDA): at the
    RTE size the per-parameter update loop was a fifth of each step (bench/rte.py)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, fused=True, **kw)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, **kw)


class DeepONet(torch.nn.Module):
    def __init__(self, branch: list[int], trunk: list[int]):
        super().__init__()
        if branch[-1] != trunk[-1]:
            raise ValueError(f"branch and trunk must end in the same width p, got {branch[-1]} and {trunk[-1]}")
        self.branch, self.trunk = mlp(branch), mlp(trunk)
        self.bias = torch.nn.Parameter(torch.zeros(()))
        # scalar input standardisation and output scale (buffers: saved with the weights)
        self.register_buffer("u_shift", torch.zeros(()))
        self.register_buffer("u_scale", torch.ones(()))
        self.register_buffer("y_scale", torch.ones(()))

    def forward(self, u: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """(B, J) sensor values and (Q, dz) query points -> (B, Q) predictions."""
        b = self.branch((u - self.u_shift) / self.u_scale)
        return (b @ self.trunk(z).T + self.bias) * self.y_scale


class DeepONetRegressor:
    """Train a DeepONet on pairs (u_i, G(u_i)(z_q)) with fixed query points ``z``."""

    def __init__(self, branch: list[int], trunk: list[int], *, lr: float = 1e-3, decay_steps: int = 2000,
                 decay_rate: float = 0.9, weight_decay: float = 0.0, max_iters: int = 10_000,
                 batch_size: int | None = None, patience: int = 1000, min_delta: float = 1e-4,
                 validation_fraction: float = 0.1, seed: int = 0, device: str = "auto",
                 warm_start: bool = False, normalize: bool = False, validation_every: int = 1,
                 query_batch: int | None = None, precision: str = "float32"):
        self.branch, self.trunk = list(branch), list(trunk)
        self.lr, self.decay_steps, self.decay_rate = lr, decay_steps, decay_rate
        self.weight_decay, self.max_iters, self.batch_size = weight_decay, max_iters, batch_size
        self.patience, self.min_delta, self.validation_fraction = patience, min_delta, validation_fraction
        self.seed, self.device, self.warm_start, self.normalize = seed, device, warm_start, normalize
        # the validation pass re-evaluates the trunk on every query point: checking every few
        # steps saves a third of an epoch at 51^2 query points
        self.validation_every = max(1, int(validation_every))
        self.query_batch = query_batch  # None: every output point in every step (the paper)
        self.precision = check_precision(precision)  # float32 | tf32 (lwl.models.precision)

    def fit(self, U: np.ndarray, Y: np.ndarray, z: np.ndarray) -> "DeepONetRegressor":
        with matmul_precision(self.precision, resolve_device(self.device)):
            return self._fit(U, Y, z)

    def _fit(self, U: np.ndarray, Y: np.ndarray, z: np.ndarray) -> "DeepONetRegressor":
        dev = resolve_device(self.device)
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        if not (self.warm_start and hasattr(self, "net_")):  # warm start: continue from the current weights
            self.net_ = DeepONet(self.branch, self.trunk).to(dev)
        t = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float32, device=dev)  # noqa: E731
        U, Y, self.z_ = t(U), t(Y), t(np.asarray(z).reshape(len(z), -1))
        if self.normalize and self.net_.y_scale.item() == 1.0 and self.net_.u_scale.item() == 1.0:
            # first fit: standardise inputs by one mean/std and scale outputs by their RMS, so the
            # Glorot-initialised net starts at the data's scale (Darcy outputs are ~0.05); kept
            # fixed under warm starts so the learned function does not jump
            self.net_.u_shift.fill_(U.mean().item())
            self.net_.u_scale.fill_(max(U.std().item(), 1e-12))
            self.net_.y_scale.fill_(max(Y.square().mean().sqrt().item(), 1e-12))
        n = U.shape[0]
        n_val = int(round(self.validation_fraction * n)) if n >= 10 else 0
        perm = torch.as_tensor(rng.permutation(n), device=dev)
        val, train = perm[:n_val], perm[n_val:]
        opt = _adam(self.net_.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda step: 1.0 / (1.0 + self.decay_rate * step / self.decay_steps))
        best, best_state, since = np.inf, None, 0
        # full batch: gather the training pairs once, not in every step (a 2.5 MB copy at N = 120, 51^2)
        U_train, Y_train, U_val, Y_val = U[train], Y[train], U[val], Y[val]
        # losses stay on the device until the end: a .item() per step would synchronise CUDA
        losses = torch.zeros(self.max_iters, device=dev)
        errors = np.full(self.max_iters, np.nan)
        for it in range(self.max_iters):
            if self.batch_size is None:
                Ub, Yb = U_train, Y_train
            else:
                idx = torch.as_tensor(rng.choice(len(train), size=min(self.batch_size, len(train)), replace=False),
                                      device=dev)
                Ub, Yb = U_train[idx], Y_train[idx]
            if self.query_batch is None or self.query_batch >= self.z_.shape[0]:
                loss = torch.mean((self.net_(Ub, self.z_) - Yb) ** 2)
            else:  # a random subset of the output points this step (the trunk's cost scales with it)
                q = torch.as_tensor(rng.choice(self.z_.shape[0], size=self.query_batch, replace=False), device=dev)
                loss = torch.mean((self.net_(Ub, self.z_[q]) - Yb[:, q]) ** 2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses[it] = loss.detach()
            if n_val and ((it + 1) % self.validation_every == 0 or it + 1 == self.max_iters):
                with torch.no_grad():
                    err = float(torch.linalg.norm(self.net_(U_val, self.z_) - Y_val) / torch.linalg.norm(Y_val))
                errors[it] = err
                if err < best - self.min_delta:
                    best, since = err, 0
                    best_state = {k: v.detach().clone() for k, v in self.net_.state_dict().items()}
                else:
                    since += self.validation_every
                    if since >= self.patience:
                        break
        if best_state is not None:
            self.net_.load_state_dict(best_state)  # early stopping keeps the best weights
        self.n_iter_ = it + 1
        self.history_ = list(zip(losses[: it + 1].cpu().tolist(), errors[: it + 1].tolist()))
        self.best_validation_error_ = best
        return self

    def get_weights(self) -> dict[str, np.ndarray]:
        """The trained weights as numpy arrays (checkpoints: no pickle)."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.net_.state_dict().items()}

    def set_weights(self, weights: dict[str, np.ndarray], z: np.ndarray) -> "DeepONetRegressor":
        """Restore weights from :meth:`get_weights` with the query points ``z``."""
        dev = resolve_device(self.device)
        self.net_ = DeepONet(self.branch, self.trunk).to(dev)
        self.net_.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})
        self.z_ = torch.as_tensor(np.asarray(z).reshape(len(z), -1), dtype=torch.float32, device=dev)
        return self

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """Differentiable predictions for a float64 or float32 batch (float64 out)."""
        return self.net_(u.to(device=self.z_.device, dtype=self.z_.dtype), self.z_).double().cpu()

    def predict(self, U: np.ndarray, return_std: bool = False):
        """G(u)(z_q) for every row u of ``U``: (m, Q). ``return_std=True`` returns ``(mean, None)``:
        a DeepONet has no predictive standard deviation (the model route's contract)."""
        with torch.no_grad(), matmul_precision(self.precision, self.z_.device):
            u = torch.as_tensor(np.asarray(U), dtype=torch.float32, device=self.z_.device)
            mean = self.net_(u, self.z_).cpu().numpy().astype(np.float64)
        return (mean, None) if return_std else mean

    # -- the document (GET /v1/jobs/{id}/model; lwl.models.from_spec) ------------------------
    def to_spec(self, training_set: bool = False) -> dict:
        """The versioned model document: widths, query points z (Q, dz) and every weight as
        base64 of little-endian float32 with its shape (``weights``; the state dict of
        :class:`DeepONet`, its scalar buffers included). Training data are not needed to
        predict; ``training_set=True`` is refused (the job's result holds them)."""
        import base64

        from lwl import __version__
        from lwl.models.gp import DOCUMENT_KIND, DOCUMENT_VERSION

        if training_set:
            raise ValueError("training_set: a DeepONet's document carries its weights, not its training data")
        weights = {k: {"shape": list(v.shape), "dtype": "<f4",
                       "data": base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")}
                   for k, v in self.get_weights().items()}
        return {"kind": DOCUMENT_KIND, "version": DOCUMENT_VERSION, "lwl_version": __version__, "model": "deeponet",
                "kernel": None, "branch": self.branch, "trunk": self.trunk, "precision": self.precision,
                "query_points": self.z_.cpu().numpy().astype(np.float64).tolist(), "weights": weights,
                "std": "none: a DeepONet gives no predictive standard deviation",
                "prediction": "G(u)(z_q) at every query point: (m, Q) for (m, J) inputs"}

    @classmethod
    def from_spec(cls, doc: dict, device: str = "cpu") -> "DeepONetRegressor":
        """The DeepONet of a model document (:meth:`to_spec`), weights as written: the same
        predictions wherever it is loaded (float32 products; to float32 rounding across CPUs)."""
        import base64
        import binascii

        for key in ("branch", "trunk", "query_points", "weights"):
            if key not in doc:
                raise ValueError(f"{key}: a deeponet document needs it")
        try:
            expected = {k: tuple(v.shape) for k, v in DeepONet(doc["branch"], doc["trunk"]).state_dict().items()}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"branch: {exc}") from None
        z = np.asarray(doc["query_points"], dtype=np.float64)
        if z.ndim != 2 or z.shape[1] != doc["trunk"][0]:
            raise ValueError(f"query_points: expected (Q, {doc['trunk'][0]}) points, got shape {list(z.shape)}")
        if set(doc["weights"]) != set(expected):
            raise ValueError(f"weights: expected the tensors {sorted(expected)}, got {sorted(doc['weights'])}")
        weights = {}
        for k, w in doc["weights"].items():
            if w.get("dtype") != "<f4":
                raise ValueError(f"weights.{k}.dtype: expected '<f4', got {w.get('dtype')!r}")
            if tuple(w.get("shape", ())) != expected[k]:
                raise ValueError(f"weights.{k}.shape: expected {list(expected[k])}, got {w.get('shape')}")
            try:
                a = np.frombuffer(base64.b64decode(w["data"], validate=True), dtype="<f4")
            except (binascii.Error, ValueError, KeyError) as exc:
                raise ValueError(f"weights.{k}.data: not base64 of float32 values ({exc})") from None
            if a.size != int(np.prod(expected[k])):
                raise ValueError(f"weights.{k}: {a.size} values for shape {list(expected[k])}")
            weights[k] = a.reshape(expected[k]).astype(np.float32)
        model = cls(doc["branch"], doc["trunk"], device=device, precision=doc.get("precision", "float32"))
        return model.set_weights(weights, z)


def deeponet_factory(model_spec, input_dim: int, query_dim: int, device: str = "auto",
                     warm_start: bool = False):
    """``seed -> DeepONetRegressor`` for a job's ``model`` block (DeepONetSpec below): branch
    widths [input_dim, *branch, latent], trunk widths [query_dim, *trunk, latent], full-batch
    Adam with the spec's learning rate and iterations."""
    m = model_spec

    def factory(seed: int) -> DeepONetRegressor:
        return DeepONetRegressor([input_dim, *m.branch, m.latent], [query_dim, *m.trunk, m.latent],
                                 lr=m.learning_rate, max_iters=m.iterations, validation_fraction=0.0,
                                 seed=seed, warm_start=warm_start, device=device, precision=m.precision)

    return factory


# -- the job spec's block for this component, and its registration (lwl.registry) --


class DeepONetSpec(StrictModel):
    """DeepONet (SM DeepONet): ReLU branch and trunk MLPs with the given hidden widths plus a
    common last width ``latent``; Adam with ``learning_rate``, ``iterations`` full-batch steps per
    model step."""
    name: Literal["deeponet"] = "deeponet"
    branch: list[int] = Field(default_factory=lambda: [512, 512, 512], max_length=16)
    trunk: list[int] = Field(default_factory=lambda: [128, 128, 128], max_length=16)
    latent: int = Field(default=200, ge=1, le=65536)
    learning_rate: float = Field(default=1e-3, gt=0)
    iterations: int = Field(default=2000, ge=1, le=10_000_000)
    precision: Literal["float32", "tf32"] = Field(
        default="float32", description="float32 matrix products, or TF32 tensor-core products on NVIDIA GPUs "
                                       "(about 6x faster for AMINO on an H100; no effect on a CPU)")

    @field_validator("branch", "trunk")
    @classmethod
    def _widths(cls, v: list[int]) -> list[int]:
        if any(w < 1 or w > 65536 for w in v):
            raise ValueError("every width must lie in 1..65536")
        return v


MODELS.register("deeponet", DeepONetSpec, document="lwl.models.deeponet:DeepONetRegressor.from_spec")
