"""Does a study still give its committed numbers? (``lwl experiment NAME --compare DIR``)

Two results documents (results.json) are walked side by side: every number must agree within
``rtol`` (relative) or ``atol`` (absolute), every string, boolean and list length must be equal,
and both must have the same keys. Wall-clock fields and the provenance stamp are not results and
are skipped. A seeded study on the same code reproduces its document bit for bit; the default
tolerance (1e-6 relative) admits round-off from another BLAS or thread count, not a changed
result.
"""

from __future__ import annotations

import math
from typing import Any

LIMIT = 50  # differences listed at most

#: keys whose values are timings or provenance, not results
SKIPPED = ("seconds", "wall", "provenance", "timings", "elapsed", "reused")  # reused: rows of an earlier run (--resume)


def skipped(key: str) -> bool:
    return any(part in key for part in SKIPPED)


def differences(new: Any, old: Any, *, rtol: float = 1e-6, atol: float = 1e-12, path: str = "",
                limit: int = LIMIT) -> list[str]:
    """Where ``new`` departs from ``old``: one line per difference (JSON path, both values), at
    most ``limit`` lines."""
    out: list[str] = []

    def walk(a: Any, b: Any, where: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                if skipped(str(key)):
                    continue
                if key not in a or key not in b:
                    out.append(f"{where}.{key}: only in the {'committed' if key in b else 'new'} document")
                    continue
                walk(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"{where}: {len(a)} entries, committed {len(b)}")
                return
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{where}[{i}]")
        elif _number(a) and _number(b):
            x, y = float(a), float(b)
            if not (x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= atol + rtol * abs(y)):
                out.append(f"{where}: {x!r}, committed {y!r}")
        elif a != b or isinstance(a, bool) != isinstance(b, bool):  # True == 1 in Python
            out.append(f"{where}: {a!r}, committed {b!r}")

    walk(new, old, path or "$")
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
