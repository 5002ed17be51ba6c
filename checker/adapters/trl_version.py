"""Which TRL a `trl` target is, read from files: no import of the candidate (the parent never runs it).

A TRL target is a package root: a folder that, put first on `sys.path`, makes `import trl` give
that TRL. Two layouts of a vendored tree are accepted: a checkout (`X/trl/trainer/grpo_trainer.py`,
root X) and the package folder itself (`X/trainer/grpo_trainer.py` with X named `trl`, root X's
parent). The version comes from the tree's own files, in the order a release or a checkout has
them; `grpo-check` supports the releases from 0.17 to 1.16 and refuses the others with one line.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import re
from pathlib import Path

from reference_impl.trl_semantics import SUPPORTED_MINORS, needs_triton, parse, supported

# The first and the last minor release whose GRPOTrainer the adapter drives (every patch of each).
OLDEST, NEWEST = SUPPORTED_MINORS
SUPPORTED_RANGE = f"{OLDEST[0]}.{OLDEST[1]}.0 to {NEWEST[0]}.{NEWEST[1]}.x"

_TRAINER = Path("trainer") / "grpo_trainer.py"
_VERSION_LITERAL = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_METADATA_VERSION = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)
_PYPROJECT_VERSION = re.compile(r"""^version\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def package_root(folder: Path) -> Path | None:
    """The folder to put first on sys.path for `folder`'s TRL, or None if it holds no TRL tree."""
    if (folder / "trl" / _TRAINER).is_file():
        return folder
    if folder.name == "trl" and (folder / _TRAINER).is_file():
        return folder.parent
    return None


def installed_root() -> Path | None:
    """The package root of the TRL `import trl` would find on sys.path (PYTHONPATH included)."""
    spec = importlib.machinery.PathFinder.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def version_in(root: Path) -> str | None:
    """TRL's version as written in the tree at `root`, or None when no file states it.

    Up to 0.2x the package states it (`__version__ = "..."`); later releases read their
    distribution's metadata, which an installed release has next to the package
    (`trl-X.dist-info`) and a source checkout has as `pyproject.toml`, `setup.cfg` or `VERSION`.
    """
    literal = _VERSION_LITERAL.search(_read(root / "trl" / "__init__.py"))
    if literal:
        return literal.group(1)
    for dist_info in sorted(root.glob("trl-*.dist-info")):
        found = _METADATA_VERSION.search(_read(dist_info / "METADATA"))
        if found:
            return found.group(1)
    for name, pattern in (
        ("PKG-INFO", _METADATA_VERSION),
        ("pyproject.toml", _PYPROJECT_VERSION),
        ("setup.cfg", re.compile(r"^version\s*=\s*(\S+)", re.MULTILINE)),
        ("VERSION", re.compile(r"^\s*(\S+)")),
        (str(Path("trl") / "VERSION"), re.compile(r"^\s*(\S+)")),
    ):
        found = pattern.search(_read(root / name))
        if found:
            return found.group(1)
    return None


def version_of(root: Path) -> str | None:
    """`version_in(root)`, else the version the `trl` distribution on sys.path reports.

    The fallback is what TRL's own `trl.__version__` says for such a tree: from 0.2x on it reads
    the installed distribution's metadata.
    """
    stated = version_in(root)
    if stated is not None:
        return stated
    try:
        return importlib.metadata.version("trl")
    except importlib.metadata.PackageNotFoundError:
        return None


def unsupported_reason(version: str | None) -> str | None:
    """Why `grpo-check` cannot drive TRL `version` on this machine (one clause), or None."""
    if version is None:
        return f"cannot tell which TRL release it is (supported: {SUPPORTED_RANGE})"
    if not parse(version) or not supported(version):
        return f"TRL {version} is not supported (supported: {SUPPORTED_RANGE})"
    if needs_triton(version) and importlib.util.find_spec("triton") is None:
        return (
            f"TRL {version} needs triton to train, which this environment lacks (a CPU torch has "
            "none); use TRL 1.14.2 or 1.16"
        )
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
