"""AMINO, a measure-theoretic inverse neural operator (paper SM "AMINO", Fig. AMINO; EIT, Table 2).

AMINO maps L Dirichlet-Neumann pairs {(f_l, g_l = Lambda_a f_l)} of one conductivity a to a:

    b_l = B(f_l, g_l)  (branch: convolutional encoder of the concatenated pair, then linear to R^p)
    v(z) = < (1/L) sum_l b_l , T(z) > + b0        (DeepONet with the branch averaged over pairs)
    a = P( sigma( K v' + W v' ) ),  v' = lift(v, z) (one Fourier layer, K the spectral convolution)

Branch input: each boundary function on the 4M - 4 nodes (counter-clockwise from (0, 0), as the
``eit`` oracle) is read as 4 sides x (M - 1) nodes, and a pair as one image of 4 rows (sides) x
2(M - 1) columns (f's side, then g's). The paper's eight ConvBlocks (conv + LeakyReLU, kernels
(1,7)/(1,3) with strides (1,2) on the boundary axis, the last one (4,5) over the four sides) are
built from ``channels`` (the paper's [64, 128, 128, 256, 256, 512, 512, 512]); the last kernel is
(4, min(5, width left)). Trunk: an MLP (the paper's 8 x 512, LeakyReLU) on the grid points; p = 100.
FNO layer: the paper's single spectral convolution (128 channels, 32 modes) with a pointwise
linear path, lifted from (v, x, y) and projected to one channel.

lwl's choices (docs/method/eit.md): the network outputs log a and the loss is the paper's metric,
the relative L^1 error of a = exp(output) (so predictions are positive); f and g are scaled by
their training RMS (stored with the weights). Sizes are parameters, so a reduced model trains on
a CPU (the ``quick`` preset of ``lwl experiment eit``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import Field

from lwl.device import resolve_device
from lwl.models.precision import check_precision, matmul_precision
from lwl.params import StrictModel
from lwl.registry import MODELS

PAPER_CHANNELS = (64, 128, 128, 256, 256, 512, 512, 512)
#: (kernel width, stride) on the boundary axis of the first seven ConvBlocks (paper SM AMINO)
_BLOCKS = ((7, 2), (3, 2), (3, 1), (3, 2), (3, 1), (3, 2), (3, 1))


class SpectralConv2d(torch.nn.Module):
    """Fourier layer K: v -> irfft2( R . rfft2(v) ) keeping ``modes`` x ``modes`` frequencies in
    each of the two corners of the half spectrum (low positive and negative first-axis modes)."""

    def __init__(self, channels: int, modes: int):
        super().__init__()
        self.channels, self.modes = channels, modes
        scale = 1.0 / (channels * channels)
        self.w1 = torch.nn.Parameter(scale * torch.randn(channels, channels, modes, modes, dtype=torch.cfloat))
        self.w2 = torch.nn.Parameter(scale * torch.randn(channels, channels, modes, modes, dtype=torch.cfloat))

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        B, C, H, W = v.shape
        m1, m2 = min(self.modes, H // 2), min(self.modes, W // 2 + 1)
        vh = torch.fft.rfft2(v)
        out = torch.zeros(B, C, H, W // 2 + 1, dtype=vh.dtype, device=v.device)
        out[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", vh[:, :, :m1, :m2], self.w1[:, :, :m1, :m2])
        out[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", vh[:, :, -m1:, :m2], self.w2[:, :, :m1, :m2])
        return torch.fft.irfft2(out, s=(H, W))


class AMINO(torch.nn.Module):
    def __init__(self, grid: int, channels=PAPER_CHANNELS, trunk_layers: int = 8, trunk_width: int = 512,
                 latent: int = 100, fno_channels: int = 128, fno_modes: int = 32):
        super().__init__()
        if len(channels) != 8:
            raise ValueError("channels: the branch has eight ConvBlocks (eight widths)")
        self.grid, side = grid, grid - 1
        act = lambda: torch.nn.LeakyReLU()  # noqa: E731
        layers, c_in, width = [], 1, 2 * side
        for c_out, (k, s) in zip(channels[:7], _BLOCKS):
            layers += [torch.nn.Conv2d(c_in, c_out, (1, k), stride=(1, s), padding=(0, k // 2)), act()]
            c_in, width = c_out, (width + 2 * (k // 2) - k) // s + 1
        k_last = min(5, width)
        layers += [torch.nn.Conv2d(c_in, channels[7], (4, k_last)), act(), torch.nn.Flatten()]
        self.encoder = torch.nn.Sequential(*layers)
        self.branch_out = torch.nn.Linear(channels[7] * (width - k_last + 1), latent)
        sizes = [2] + [trunk_width] * trunk_layers
        trunk: list[torch.nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            trunk += [torch.nn.Linear(a, b), act()]
        self.trunk = torch.nn.Sequential(*trunk, torch.nn.Linear(sizes[-1], latent))
        self.bias = torch.nn.Parameter(torch.zeros(()))
        self.lift = torch.nn.Conv2d(3, fno_channels, 1)
        self.spectral = SpectralConv2d(fno_channels, fno_modes)
        self.pointwise = torch.nn.Conv2d(fno_channels, fno_channels, 1)
        self.project = torch.nn.Sequential(torch.nn.Conv2d(fno_channels, fno_channels, 1), act(),
                                           torch.nn.Conv2d(fno_channels, 1, 1))
        x = torch.linspace(0.0, 1.0, grid)
        X, Y = torch.meshgrid(x, x, indexing="ij")
        self.register_buffer("points", torch.stack([X, Y], -1).reshape(-1, 2))
        self.register_buffer("f_scale", torch.ones(()))
        self.register_buffer("g_scale", torch.ones(()))

    def images(self, f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(B, L, 4M-4) pairs -> (B*L, 1, 4, 2(M-1)) images: one row per side, f's then g's nodes."""
        B, L, n = f.shape
        sides = lambda u: u.reshape(B * L, 4, n // 4)  # noqa: E731
        return torch.cat([sides(f / self.f_scale), sides(g / self.g_scale)], -1).unsqueeze(1)

    def forward(self, f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """(B, L, 4M-4) Dirichlet and Neumann data -> (B, M, M) predicted log a."""
        B, L, _ = f.shape
        b = self.branch_out(self.encoder(self.images(f, g))).reshape(B, L, -1).mean(1)  # average over pairs
        v = (b @ self.trunk(self.points).T + self.bias).reshape(B, 1, self.grid, self.grid)
        xy = self.points.T.reshape(1, 2, self.grid, self.grid).expand(B, -1, -1, -1)
        h = self.lift(torch.cat([v, xy], 1))
        h = torch.nn.functional.leaky_relu(self.spectral(h) + self.pointwise(h))
        return self.project(h)[:, 0]


def relative_l1(pred: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """Per-sample ||a - pred||_L1 / ||a||_L1 on the equispaced grid (Riemann sums: the cell
    area cancels), paper eqn app_amino_error."""
    return (pred - a).abs().flatten(1).sum(1) / a.abs().flatten(1).sum(1)


class AMINORegressor:
    """Train AMINO scikit-learn style: ``fit(f, g, a)`` returns self, ``predict(f, g)`` gives a.

    AdamW (the paper's, learning rate 1e-3) on mini-batches of ``batch_size`` conductivities
    (each with all its L pairs) for ``epochs`` passes; the loss is the mean relative L^1 error.

    ``precision``: ``float32`` or ``tf32`` (:mod:`lwl.models.precision`). ``checkpoint``: a file
    the training state (weights, optimiser, the data order's generator, the loss history) is
    written to every ``checkpoint_every`` epochs and after the last; ``fit`` resumes from it when
    it holds the same model, data and settings (more ``epochs`` than it has is fine: the run
    grows), and skips training when it already has them all. A resumed fit ends with the same
    weights as an uninterrupted one."""

    def __init__(self, grid: int, *, channels=PAPER_CHANNELS, trunk_layers: int = 8, trunk_width: int = 512,
                 latent: int = 100, fno_channels: int = 128, fno_modes: int = 32, epochs: int = 500,
                 batch_size: int = 32, learning_rate: float = 1e-3, weight_decay: float = 1e-2,
                 seed: int = 0, device: str = "auto", precision: str = "float32",
                 checkpoint: str | Path | None = None, checkpoint_every: int = 1):
        self.grid, self.channels, self.trunk_layers, self.trunk_width = grid, tuple(channels), trunk_layers, trunk_width
        self.latent, self.fno_channels, self.fno_modes = latent, fno_channels, fno_modes
        self.epochs, self.batch_size, self.learning_rate = epochs, batch_size, learning_rate
        self.weight_decay, self.seed, self.device = weight_decay, seed, device
        self.precision = check_precision(precision)
        self.checkpoint, self.checkpoint_every = checkpoint, checkpoint_every

    def _fingerprint(self, *arrays: np.ndarray) -> str:
        """What a checkpoint must match to be resumed: every setting but ``epochs`` and the data."""
        h = hashlib.sha256(json.dumps([self.grid, list(self.channels), self.trunk_layers, self.trunk_width,
                                       self.latent, self.fno_channels, self.fno_modes, self.batch_size,
                                       self.learning_rate, self.weight_decay, self.seed, self.precision]).encode())
        for x in arrays:
            x = np.ascontiguousarray(x, dtype=np.float32)
            h.update(repr(x.shape).encode())
            h.update(x.tobytes())
        return h.hexdigest()

    def _net(self) -> AMINO:
        return AMINO(self.grid, self.channels, self.trunk_layers, self.trunk_width, self.latent,
                     self.fno_channels, self.fno_modes)

    def fit(self, f: np.ndarray, g: np.ndarray, a: np.ndarray, progress=None) -> "AMINORegressor":
        dev = resolve_device(self.device)
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        self.net_ = self._net().to(dev)
        t = lambda x: torch.as_tensor(np.asarray(x), dtype=torch.float32, device=dev)  # noqa: E731
        F, G, A = t(f), t(g), t(a)
        self.net_.f_scale.fill_(max(F.square().mean().sqrt().item(), 1e-12))
        self.net_.g_scale.fill_(max(G.square().mean().sqrt().item(), 1e-12))
        opt = torch.optim.AdamW(self.net_.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay)
        n = len(A)
        self.loss_history_ = []
        fingerprint = self._fingerprint(f, g, a) if self.checkpoint is not None else None
        start = self._resume(fingerprint, opt, rng, dev) if fingerprint is not None else 0
        self.resumed_epochs_ = start
        with matmul_precision(self.precision, dev):
            for epoch in range(start, self.epochs):
                total = torch.zeros((), device=dev)
                for idx in np.array_split(rng.permutation(n), max(1, -(-n // self.batch_size))):
                    i = torch.as_tensor(idx, device=dev)
                    loss = relative_l1(torch.exp(self.net_(F[i], G[i])), A[i]).mean()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += loss.detach() * len(idx)
                self.loss_history_.append(float(total) / n)
                if fingerprint is not None and ((epoch + 1) % self.checkpoint_every == 0 or epoch + 1 == self.epochs):
                    self._save(fingerprint, epoch + 1, opt, rng)
                if progress is not None:
                    progress(epoch, self.loss_history_[-1])
        return self

    def _save(self, fingerprint: str, epochs: int, opt, rng: np.random.Generator) -> None:
        """The training state after ``epochs`` epochs, written atomically (a crash mid-write
        leaves the previous checkpoint). Tensors, numbers and strings only: read back with
        ``torch.load(weights_only=True)``, never unpickled as code."""
        path = Path(self.checkpoint)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"fingerprint": fingerprint, "epochs": epochs, "net": self.net_.state_dict(),
                 "opt": opt.state_dict(), "loss_history": list(self.loss_history_),
                 "rng": json.dumps(rng.bit_generator.state)}
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        tmp.replace(path)

    def _resume(self, fingerprint: str, opt, rng: np.random.Generator, dev) -> int:
        """Epochs already done according to the checkpoint (0 without a matching one); loads its
        weights, optimiser state, generator and loss history."""
        path = Path(self.checkpoint)
        if not path.is_file():
            return 0
        state = torch.load(path, map_location=dev, weights_only=True)
        if state.get("fingerprint") != fingerprint:
            return 0  # another model, other data or other settings: start afresh (and overwrite it)
        done = int(state["epochs"])
        if done > self.epochs:  # its weights are not this fit's, and overwriting them would lose work
            raise ValueError(f"checkpoint: {path} holds {done} epochs of this model, more than epochs={self.epochs}; "
                             "ask for at least that many or use another checkpoint file")
        self.net_.load_state_dict(state["net"])
        opt.load_state_dict(state["opt"])
        rng.bit_generator.state = json.loads(state["rng"])
        self.loss_history_ = [float(x) for x in state["loss_history"]]
        return done

    def predict(self, f: np.ndarray, g: np.ndarray, batch_size: int = 64) -> np.ndarray:
        dev = next(self.net_.parameters()).device
        out = []
        with torch.no_grad(), matmul_precision(self.precision, dev):
            for s in range(0, len(f), batch_size):
                F = torch.as_tensor(np.asarray(f[s:s + batch_size]), dtype=torch.float32, device=dev)
                G = torch.as_tensor(np.asarray(g[s:s + batch_size]), dtype=torch.float32, device=dev)
                out.append(torch.exp(self.net_(F, G)).cpu().numpy().astype(np.float64))
        return np.concatenate(out)

    def errors(self, f: np.ndarray, g: np.ndarray, a: np.ndarray) -> np.ndarray:
        """Per-sample relative L^1 errors of the predictions."""
        pred = torch.as_tensor(self.predict(f, g))
        return relative_l1(pred, torch.as_tensor(np.asarray(a, dtype=np.float64))).numpy()


def _wire_dtype(t: torch.Tensor) -> str:
    """A weight's dtype in the document: float32, or complex64 (the spectral convolution's)."""
    return "<c8" if t.is_complex() else "<f4"


class AMINOOperator:
    """A trained AMINO served as a model (``GET /v1/jobs/{id}/model``, ``POST /predict``; a
    budgeted EIT interval search's, lwl.design.budgeted_interval): one input row is a measurement of
    one conductivity, ``[omega_1..omega_L, g_1..g_L]``, the frequencies of its L Dirichlet data
    f_l = cos(omega_l (x cos theta_l + y sin theta_l)), theta_l = 2 pi l / L, and their Neumann
    data, each on the 4M - 4 boundary nodes (counter-clockwise from (0, 0), as the ``eit``
    oracle's); the prediction is the conductivity a on the M x M nodes, flattened ([i, j] = (x_i,
    y_j), row-major): (m, M^2). No predictive standard deviation."""

    def __init__(self, regressor: AMINORegressor, pairs: int):
        self.regressor, self.pairs = regressor, int(pairs)
        self.grid = regressor.grid

    @property
    def input_dim(self) -> int:
        return self.pairs * (1 + 4 * self.grid - 4)

    def arrays(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(f, g), (m, L, 4M - 4) each, of input rows ``X`` (class docstring)."""
        from lwl.oracles.eit import angles, dirichlet_data

        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.input_dim:
            raise ValueError(f"inputs: expected (m, {self.input_dim}) rows of {self.pairs} frequencies and their "
                             f"Neumann data, got shape {list(X.shape)}")
        L, B = self.pairs, 4 * self.grid - 4
        f = dirichlet_data(X[:, :L], angles(L), self.grid)
        return f, X[:, L:].reshape(len(X), L, B)

    def predict(self, X: np.ndarray, return_std: bool = False):
        mean = self.regressor.predict(*self.arrays(X)).reshape(len(X), -1)
        return (mean, None) if return_std else mean

    def to_spec(self, training_set: bool = False) -> dict:
        """The versioned model document: AMINO's sizes, L, and every weight (its state dict, the
        data scales included) as base64 of little-endian float32 (complex64 for the spectral
        convolution's) with its shape and dtype."""
        import base64

        from lwl import __version__
        from lwl.models.gp import DOCUMENT_KIND, DOCUMENT_VERSION

        if training_set:
            raise ValueError("training_set: an AMINO document carries its weights, not its training data")
        r = self.regressor
        weights = {k: {"shape": list(v.shape), "dtype": _wire_dtype(v),
                       "data": base64.b64encode(np.ascontiguousarray(v.detach().cpu().numpy(), dtype=_wire_dtype(v))
                                                .tobytes()).decode("ascii")}
                   for k, v in r.net_.state_dict().items()}
        return {"kind": DOCUMENT_KIND, "version": DOCUMENT_VERSION, "lwl_version": __version__, "model": "amino",
                "kernel": None, "grid": r.grid, "pairs": self.pairs, "channels": list(r.channels),
                "trunk_layers": r.trunk_layers, "trunk_width": r.trunk_width, "latent": r.latent,
                "fno_channels": r.fno_channels, "fno_modes": r.fno_modes, "precision": r.precision,
                "input_dim": self.input_dim, "weights": weights,
                "std": "none: AMINO gives no predictive standard deviation",
                "prediction": "the conductivity on the M x M nodes, (m, M^2), for (m, L (4M - 3)) rows "
                              "[omega_1..omega_L, Neumann data of pair 1..L]"}

    @classmethod
    def from_spec(cls, doc: dict, device: str = "cpu") -> "AMINOOperator":
        """The AMINO of a model document (:meth:`to_spec`), weights as written."""
        import base64
        import binascii

        sizes = ("grid", "pairs", "channels", "trunk_layers", "trunk_width", "latent", "fno_channels", "fno_modes")
        for key in (*sizes, "weights"):
            if key not in doc:
                raise ValueError(f"{key}: an amino document needs it")
        try:
            reg = AMINORegressor(int(doc["grid"]), channels=doc["channels"], trunk_layers=int(doc["trunk_layers"]),
                                 trunk_width=int(doc["trunk_width"]), latent=int(doc["latent"]),
                                 fno_channels=int(doc["fno_channels"]), fno_modes=int(doc["fno_modes"]),
                                 device=device, precision=doc.get("precision", "float32"))
            net = reg._net()
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"channels: {exc}") from None
        expected = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        dtypes = {k: _wire_dtype(v) for k, v in net.state_dict().items()}
        if set(doc["weights"]) != set(expected):
            raise ValueError(f"weights: expected the tensors {sorted(expected)}, got {sorted(doc['weights'])}")
        state = {}
        for k, w in doc["weights"].items():
            if w.get("dtype") != dtypes[k]:
                raise ValueError(f"weights.{k}.dtype: expected {dtypes[k]!r}, got {w.get('dtype')!r}")
            if tuple(w.get("shape", ())) != expected[k]:
                raise ValueError(f"weights.{k}.shape: expected {list(expected[k])}, got {w.get('shape')}")
            try:
                a = np.frombuffer(base64.b64decode(w["data"], validate=True), dtype=dtypes[k])
            except (binascii.Error, ValueError, KeyError) as exc:
                raise ValueError(f"weights.{k}.data: not base64 of {dtypes[k]} values ({exc})") from None
            if a.size != int(np.prod(expected[k])):
                raise ValueError(f"weights.{k}: {a.size} values for shape {list(expected[k])}")
            state[k] = torch.as_tensor(a.reshape(expected[k]).copy())
        net.load_state_dict(state)
        reg.net_ = net.to(resolve_device(device))
        return cls(reg, int(doc["pairs"]))


def amino_factory(model_spec, grid: int, device: str = "auto"):
    """``seed -> AMINORegressor`` for a job's ``model`` block (AMINOSpec below)."""
    m = model_spec

    def factory(seed: int) -> AMINORegressor:
        return AMINORegressor(grid, channels=m.channels, trunk_layers=m.trunk_layers, trunk_width=m.trunk_width,
                              latent=m.latent, fno_channels=m.fno_channels, fno_modes=m.fno_modes, epochs=m.epochs,
                              batch_size=m.batch_size, learning_rate=m.learning_rate, seed=seed, device=device,
                              precision=m.precision)

    return factory


# -- the job spec's block for this component, and its registration (lwl.registry) --


class AMINOSpec(StrictModel):
    """AMINO (paper SM AMINO; lwl.models.amino): convolutional branch on each Dirichlet-Neumann
    pair, averaged over the pairs, trunk MLP, one Fourier layer; AdamW. The defaults are a reduced
    model that trains on a CPU in about a minute per candidate at grid 24; the paper's sizes are
    channels [64, 128, 128, 256, 256, 512, 512, 512], trunk 8 x 512, latent 100, FNO 128 x 32 modes,
    500 epochs."""
    name: Literal["amino"] = "amino"
    channels: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [16, 32, 32, 64, 64, 128, 128, 128], min_length=8, max_length=8)
    trunk_layers: int = Field(default=4, ge=1, le=32)
    trunk_width: int = Field(default=128, ge=1, le=4096)
    latent: int = Field(default=64, ge=1, le=4096)
    fno_channels: int = Field(default=32, ge=1, le=1024)
    fno_modes: int = Field(default=12, ge=1, le=256)
    epochs: int = Field(default=40, ge=1, le=100_000)
    batch_size: int = Field(default=16, ge=1, le=100_000)
    learning_rate: float = Field(default=1e-3, gt=0)
    precision: Literal["float32", "tf32"] = Field(
        default="float32", description="float32 matrix products, or TF32 tensor-core products on NVIDIA GPUs "
                                       "(about 6x faster for AMINO on an H100; no effect on a CPU)")


MODELS.register("amino", AMINOSpec, document="lwl.models.amino:AMINOOperator.from_spec")
