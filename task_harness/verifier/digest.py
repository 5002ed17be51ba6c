"""Content digests for the anti-cheat checks.

Shipped in each task's `tests/` beside `verify.py`, and imported by the task builder and the
local runner, so that what is recorded at build time and what is checked after the agent are
computed by the same code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256(path: Path) -> str:
    """The SHA-256 of one file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path, pattern: str = "*.py") -> str:
    """One digest over the relative paths and bytes of the files under `root` matching `pattern`
    (compiled caches excluded, so running the code does not change it)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob(pattern)):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
