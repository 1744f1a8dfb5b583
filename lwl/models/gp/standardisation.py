"""The units a GP fit works in: the user's, and standardised ones.

**Units.** A lab sends inputs in its own units (Pa, m, K, ohm: spreads from 1e-3 to 1e4, an
input whose zero is far from its spread) and labels in its own. The fit works in standardised
coordinates (:class:`Standardisation`): each input centred at its mean and scaled by its standard
deviation over the training set, each output's labels likewise. Every hyperparameter it learns
or is given, and every prediction, is in the user's units: ell_d = ell_d^s x_scale_d,
s^2 = s_s^2 y_scale^2, sigma_n^2 = sigma_s^2 y_scale^2, c = y_loc + y_scale c_s, log likelihoods
carry the labels' Jacobian -n log y_scale. So a fit is the same whatever affine units it is posed
in (up to round-off), and r^2 is formed on centred inputs (|x|^2 + |y|^2 - 2 x.y on inputs offset
by 1e6 with a spread of 1e-3 cancels to noise and K_y fails to factor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lwl.device import DTYPE
from lwl.models.gp.kernel import theta_scales


@dataclass(frozen=True)
class Standardisation:
    """The affine map a fit works through (module docstring): inputs centred and scaled
    per input, x_s = (x - x_loc) / x_scale, labels per output, y_s = (y - y_loc) / y_scale, each
    scale the training set's standard deviation (1 where it is 0). A function of the training set
    alone, so a document's loader forms the same map from the same points."""

    x_loc: np.ndarray  # (d,)
    x_scale: np.ndarray  # (d,)
    y_loc: np.ndarray  # (p,)
    y_scale: np.ndarray  # (p,)

    @classmethod
    def of(cls, X: np.ndarray, Y: np.ndarray) -> "Standardisation":
        # column by column: an output's map is the same alone as beside others (a reduction over a
        # strided column sums in another order, and an ulp of scale moves an interpolant's predictions)
        cols = [np.ascontiguousarray(Y[:, j]) for j in range(Y.shape[1])]
        y_loc = np.array([c.mean() for c in cols])
        y_scale = np.array([c.std() for c in cols])
        xcols = [np.ascontiguousarray(X[:, k]) for k in range(X.shape[1])]  # and whatever X's memory order
        x_loc = np.array([c.mean() for c in xcols])
        x_scale = np.array([c.std() for c in xcols])
        x_scale[~(x_scale > 0)] = 1.0
        y_scale[~(y_scale > 0)] = 1.0
        return cls(x_loc, x_scale, y_loc, y_scale)

    def inputs(self, X: np.ndarray) -> np.ndarray:
        return (X - self.x_loc) / self.x_scale

    def resolution(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Per output, the smallest label difference the data resolve in standardised units: float64
        round-off of the labels (eps |y| / y_scale) and of the inputs carried through a change of
        the function over one input spread (eps |x| / x_scale; an input offset far from its spread,
        a wavelength in metres or a temperature in K read to mK, resolves only that finely)."""
        eps = np.finfo(np.float64).eps
        x_part = float(np.max(np.abs(X) / self.x_scale)) if X.size else 0.0
        return eps * (np.max(np.abs(Y), 0) / self.y_scale + x_part)

    def to_json(self) -> dict:
        return {"input_loc": self.x_loc.tolist(), "input_scale": self.x_scale.tolist(),
                "label_loc": self.y_loc.tolist(), "label_scale": self.y_scale.tolist()}


class StandardisedUnits:
    """A GP's training set in the user's units and in standardised ones, and its hyperparameters
    carried between them (the state every part of :class:`lwl.models.gp.GaussianProcess` reads):
    ``X_``, ``Y_``, ``Xs_``, ``Ys_``, ``standardisation_``, ``n_features_in_``, ``device_``."""

    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=DTYPE, device=self.device_)

    def _set_data(self, X: np.ndarray, Y: np.ndarray) -> None:
        """The training set in the user's units (``X_``, ``Y_``) and in standardised ones (``Xs_``,
        ``Ys_``), with the map between them (``standardisation_``)."""
        X = np.ascontiguousarray(X)  # as a document's loader will hold it (a column-major X sums in another order)
        self.standardisation_ = Standardisation.of(X, Y)
        self.X_ = self._tensor(X)
        self.Y_ = Y
        self.Xs_ = self._tensor(self.standardisation_.inputs(X))
        self.Ys_ = (Y - self.standardisation_.y_loc) / self.standardisation_.y_scale
        self.n_features_in_ = X.shape[1]

    def _to_standard(self, j: int, lengthscale, output_scale, noise) -> np.ndarray:
        """User-unit hyperparameters of output j as standardised log theta (log ell, log s^2, log sigma_n^2)."""
        s = self.standardisation_
        v = float(s.y_scale[j]) ** 2
        return np.log(np.concatenate([np.asarray(lengthscale, dtype=np.float64) / s.x_scale,
                                      [float(output_scale) / v, float(noise) / v]]))

    def _from_standard(self, j: int, theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Standardised log theta of output j as user-unit (lengthscales, output scale, noise)."""
        s = self.standardisation_
        v = float(s.y_scale[j]) ** 2
        ell, s2, noise = theta_scales(theta)
        return ell * s.x_scale, s2 * v, noise * v

    def _lml_to_user(self, lml: float, j: int, n: int) -> float:
        """A standardised label's log density as the user's label's: the Jacobian of y = y_loc + y_scale y_s."""
        return float(lml) - n * math.log(float(self.standardisation_.y_scale[j]))

    def _theta(self, j: int) -> np.ndarray:
        """Output j's fitted hyperparameters as standardised log theta."""
        return self._to_standard(j, self.lengthscale_[j], self.output_scale_[j], self.noise_[j])
