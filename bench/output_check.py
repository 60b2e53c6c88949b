"""numpy-only helpers shared by bench/zoo.py (GPU machine) and
tests/zoo_models_test.py (CI, Debian's python3 with numpy and no torch):
keep this module free of torch."""
import numpy as np


def rel_l2(a, b):
    """||a - b|| / ||b|| over the flattened arrays in float64; inf when the
    shapes differ, a difference is not finite, or b is all zeros (an all-zero
    reference checks nothing)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        return float("inf")
    d, n = np.linalg.norm(a - b), np.linalg.norm(b)
    if not np.isfinite(d) or n == 0:
        return float("inf")
    return float(d / n)


def first_error(text, limit=400):
    """gpuc's message: the first 'gpuc:' line that is not a note, else the
    last line; at most limit characters."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if l.startswith("gpuc:") and "note:" not in l:
            return l[:limit]
    return (lines[-1] if lines else "no output")[:limit]
