"""Comparing observations: the one notion of "same result" every hidden check uses.

Shipped inside each task's `tests/`; imports nothing from the project.
"""

from __future__ import annotations

import math

import torch

ATOL = 1e-5
RTOL = 1e-4


def same(seen, expected, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """True when `seen` equals `expected`: tensors within tolerance (NaN equals NaN), the rest exactly."""
    if isinstance(expected, dict) and "error" in expected:
        return False
    if isinstance(seen, dict) and "error" in seen:
        return False
    if isinstance(expected, torch.Tensor):
        if not isinstance(seen, torch.Tensor) or seen.shape != expected.shape:
            return False
        if not expected.is_floating_point():
            return bool(torch.equal(seen.to(expected.dtype), expected))
        return bool(
            torch.allclose(seen.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True)
        )
    if isinstance(expected, float):
        return isinstance(seen, int | float) and math.isclose(
            seen, expected, rel_tol=rtol, abs_tol=atol
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(seen, list | tuple)
            and len(seen) == len(expected)
            and all(same(s, e, atol, rtol) for s, e in zip(seen, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(seen, dict)
            and seen.keys() == expected.keys()
            and all(same(seen[k], expected[k], atol, rtol) for k in expected)
        )
    return seen == expected


def describe(value) -> str:
    """A short one-line rendering of an observation for the verifier log."""
    if isinstance(value, dict) and "error" in value:
        return f"raised {value['error']}"
    if isinstance(value, torch.Tensor):
        flat = value.detach().flatten()
        shown = ", ".join(
            f"{v:.4g}" if value.is_floating_point() else str(int(v)) for v in flat[:6]
        )
        more = ", ..." if flat.numel() > 6 else ""
        return f"tensor{tuple(value.shape)}[{shown}{more}]"
    if isinstance(value, list | tuple):
        return (
            "[" + ", ".join(describe(v) for v in value[:4]) + (", ...]" if len(value) > 4 else "]")
        )
    if isinstance(value, dict):
        shown = ", ".join(f"{key}: {describe(item)}" for key, item in list(value.items())[:4])
        return "{" + shown + (", ...}" if len(value) > 4 else "}")
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def difference(expected, seen) -> str:
    """ "expected X, got Y" for the verifier log; of two observations with the same keys, only the
    entries that differ, so the one that failed is not cut off behind those that agree."""
    if (
        isinstance(expected, dict)
        and isinstance(seen, dict)
        and "error" not in seen
        and set(expected) == set(seen)
    ):
        differing = [key for key in expected if not same(seen[key], expected[key])]
        expected = {key: expected[key] for key in differing}
        seen = {key: seen[key] for key in differing}
    return f"expected {describe(expected)}, got {describe(seen)}"
