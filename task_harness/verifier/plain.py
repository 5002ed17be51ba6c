"""Observations as plain data: what crosses from the code under test to the verifier.

The trainer under test runs in a child process; whatever it hands back is untrusted. Pickle would
run the child's code inside the verifier, so observations travel as JSON: numbers, strings,
lists, string-keyed objects, and tensors spelled out as {"tensor": dtype, "shape": [...],
"data": [...]}. Loading checks every tensor (known dtype, shape matching the data, numbers of the
right kind) and the file's size before anything is compared.

Shipped in each task's `tests/` beside `verify.py`; imports nothing from the project.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
MAX_BYTES = 64 * 2**20  # the largest observation set (a model's parameters) is about 2 MB
MAX_DEPTH = 12


class MalformedObservations(ValueError):
    """The child's observations are not plain data of the expected form."""


def encode(value):
    """`value` (tensors, numbers, strings, lists, tuples, dicts with string keys) as JSON data."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        name = next((k for k, v in DTYPES.items() if v == tensor.dtype), None)
        if name is None:
            raise TypeError(f"cannot encode a tensor of dtype {tensor.dtype}")
        return {"tensor": name, "shape": list(tensor.shape), "data": tensor.flatten().tolist()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    raise TypeError(f"cannot encode a {type(value).__name__}")


def dump(value, path: Path) -> None:
    """Write `value` to `path` as JSON (NaN and infinities spelled as JSON5 does)."""
    Path(path).write_text(json.dumps(encode(value)))


def _tensor(raw: dict) -> torch.Tensor:
    """One tensor from its plain form, refusing anything inconsistent."""
    dtype = DTYPES.get(raw.get("tensor"))
    shape, data = raw.get("shape"), raw.get("data")
    if dtype is None:
        raise MalformedObservations(f"unknown tensor dtype {raw.get('tensor')!r}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise MalformedObservations(f"bad tensor shape {shape!r}")
    if not isinstance(data, list) or len(data) != math.prod(shape):
        raise MalformedObservations(f"tensor data does not fill its shape {shape}")
    if dtype is torch.bool:
        kinds: tuple[type, ...] = (bool,)
    elif dtype.is_floating_point:
        kinds = (int, float)
    else:
        kinds = (int,)
    if not all(type(x) in kinds for x in data):
        raise MalformedObservations(
            f"tensor of dtype {raw['tensor']} holds non-{kinds[-1].__name__}s"
        )
    return torch.tensor(data, dtype=dtype).reshape(shape)


def decode(raw, depth: int = 0):
    """The observation `raw` (parsed JSON) with its tensors rebuilt and checked."""
    if depth > MAX_DEPTH:
        raise MalformedObservations("observations nested too deeply")
    if isinstance(raw, dict):
        if "tensor" in raw and set(raw) == {"tensor", "shape", "data"}:
            return _tensor(raw)
        return {k: decode(v, depth + 1) for k, v in raw.items()}
    if isinstance(raw, list):
        return [decode(v, depth + 1) for v in raw]
    return raw


def load(path: Path):
    """The observations written by `dump`, validated; MalformedObservations otherwise."""
    path = Path(path)
    if path.stat().st_size > MAX_BYTES:
        raise MalformedObservations(f"observations file of {path.stat().st_size} bytes")
    try:
        raw = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError) as error:
        raise MalformedObservations(f"observations are not JSON: {error}") from None
    return decode(raw)
