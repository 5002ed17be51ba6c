"""Content digests for the anti-cheat checks.

Shipped in each task's `tests/` beside `verify.py`, and imported by the task builder and the
local runner, so that what is recorded at build time and what is checked after the agent are
computed by the same code.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

# Python's start-up hooks, digested by their bytes; every other file of an environment (1.5 GB,
# 37,000 files here) by its size and modification time, which keeps a digest to a second. The
# environments are out of the agent's reach anyway (not in its view, or read-only and root's);
# the digest is the second line of defence.
STARTUP_HOOKS = ("sitecustomize.py", "usercustomize.py")


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


def environment_digest(roots: list[Path]) -> str:
    """One digest of Python environments: the bytes of every start-up hook (`.pth` files,
    sitecustomize, usercustomize), the size and modification time of every other file, and every
    symlink's target, under each of `roots`."""
    digest = hashlib.sha256()
    for root in roots:
        _digest_folder(str(root), digest)
    return digest.hexdigest()


def _digest_folder(folder: str, digest) -> None:
    # os.scandir with plain strings: a venv holds ~100,000 files, and a Path per file made one
    # digest take seconds (benchmarks/trial_digest.py).
    with os.scandir(folder) as listing:
        entries = sorted(listing, key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_symlink():
            digest.update(f"{entry.path}->{os.readlink(entry.path)}".encode())
        elif entry.is_dir():
            if entry.name != "__pycache__":
                _digest_folder(entry.path, digest)
        elif entry.name.endswith(".pth") or entry.name in STARTUP_HOOKS:
            with open(entry.path, "rb") as hook:
                digest.update(f"{entry.path}:".encode() + hook.read())
        else:
            status = entry.stat(follow_symlinks=False)
            digest.update(f"{entry.path}:{status.st_size}:{status.st_mtime_ns}".encode())
