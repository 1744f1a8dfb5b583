"""A stand-in instrument for the README's ask/tell examples: YOUR INSTRUMENT GOES HERE.

    python examples/measure.py x.npy y.npy                      # examples/kernel10d_budget.json
    python examples/measure.py x.npy y.npy --oracle friedman1   # examples/friedman1_budget.json

Reads the batch of inputs ``lwl ask`` wrote (an (n, d) array), and writes one label per row to
the second file, in order, for ``lwl tell``. A lab replaces this file with whatever measures or
simulates its inputs; a failed measurement is a NaN label, told as failed with
``lwl tell --nan-failed``. Here the labels are those of lwl's built-in oracles (``make_oracle``),
so the job's numbers can be checked against the same job run with the oracle built in:

- ``kernel10d`` (the default): the kernel expansion of the paper's Table 1 column g4 in d = 10
  (1,000 Gaussian bumps at seeded centres in [-4, 4]^10, lengthscale 5 sqrt(2));
- ``friedman1``: Friedman's test function in d = 5.
"""

from __future__ import annotations

import argparse

import numpy as np

from lwl.oracles import as_numpy, make_oracle

INSTRUMENTS = {
    "kernel10d": {"name": "kernel_expansion",
                  "params": {"dim": 10, "centres": 1000, "lengthscale": 7.0710678118654755, "seed": 0}},
    "friedman1": {"name": "friedman1"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", help=".npy file of the batch's inputs (lwl ask --out)")
    parser.add_argument("labels", help=".npy file to write, one label per input (lwl tell)")
    parser.add_argument("--oracle", choices=sorted(INSTRUMENTS), default="kernel10d")
    args = parser.parse_args()
    x = np.load(args.inputs, allow_pickle=False)
    y = as_numpy(make_oracle(INSTRUMENTS[args.oracle]).label(x))
    np.save(args.labels, np.asarray(y, dtype=float).reshape(len(x)))


if __name__ == "__main__":
    main()
