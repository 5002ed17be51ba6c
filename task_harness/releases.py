"""Real TRL releases, and the packages an old release needs beside the project's torch, installed
once into the project cache (`<cache>/trl-releases/`, the cache of the tiny models).

Used by the task build (a fork of release X is a copy of X's `trl` package), by the agent's
environment (a fork of TRL 0.17-0.26 needs transformers 4.57.6 where the runner has 5.x) and by
the tests that check claims against old releases (`tests/trl_releases.py`).

- every folder is installed with `pip install --no-deps --target` into a temporary folder next
  to its final place and renamed when complete, so an interrupted install never leaves a
  half-filled folder that later runs would trust;
- which releases need transformers 4.57.6 or `requests` beside them is in the release table,
  `reference_impl/trl_semantics.py` (`needs_transformers4`, `imports_undeclared_requests`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from reference_impl.tiny import cache_root as project_cache_root
from reference_impl.trl_semantics import imports_undeclared_requests, needs_transformers4

TRANSFORMERS4 = "transformers==4.57.6"
# What TRL 0.17 to 0.26 need next to transformers 4.57.6. The exact set is resolved at install
# time with `pip install --dry-run --report` against the running environment, so only packages
# whose venv version does not fit transformers 4 (huggingface-hub, tokenizers, ...) land in the
# folder; torch and everything compatible come from the venv.
TRANSFORMERS4_REQUEST = (TRANSFORMERS4, "accelerate", "datasets")


class ReleaseUnavailable(RuntimeError):
    """pip could not install or resolve a release (the registry is unreachable)."""


def cache_root() -> Path:
    """The folder holding every cached install: `<project cache>/trl-releases`."""
    root = project_cache_root() / "trl-releases"
    root.mkdir(parents=True, exist_ok=True)
    return root


def install(name: str, requirements: tuple[str, ...]) -> Path:
    """Install `requirements` without dependencies into cache_root()/name, once, atomically."""
    final = cache_root() / name
    if final.is_dir():
        return final
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_root()))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
    command += ["--disable-pip-version-check", "--target", str(staging), *requirements]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise ReleaseUnavailable(
            f"cannot install {' '.join(requirements)} (registry unreachable?): "
            f"{result.stderr.strip()[-300:]}"
        )
    try:
        staging.rename(final)
    except OSError:  # another process finished the same install first: keep its copy
        shutil.rmtree(staging, ignore_errors=True)
    return final


def install_resolved(name: str, request: tuple[str, ...]) -> Path:
    """`install(name, resolve(request))`, asking pip nothing when the folder is already there: a
    resolution is a round trip to the registry that costs 5 to 30 s, and a folder once installed is
    kept whatever a later resolution would pick."""
    final = cache_root() / name
    if final.is_dir():
        return final
    return install(name, resolve(request))


def resolve(requirements: tuple[str, ...]) -> tuple[str, ...]:
    """The exact `name==version` pins pip would add to the running environment for
    `requirements`, without torch and CUDA wheels."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report"]
        command += [str(report), "--disable-pip-version-check", *requirements]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise ReleaseUnavailable(
                f"cannot resolve {' '.join(requirements)} (registry unreachable?): "
                f"{result.stderr.strip()[-300:]}"
            )
        chosen = json.loads(report.read_text())["install"]
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in chosen]
    return tuple(
        pin for pin in pins if not pin.lower().startswith(("torch==", "nvidia-", "triton=="))
    )


def trl_release_path(version: str) -> Path:
    """Folder holding the `trl` package of release `version` (`<folder>/trl/__init__.py`)."""
    return install(f"trl-{version}", (f"trl=={version}",))


def transformers4_path() -> Path:
    """Folder holding transformers 4.57.6 and the few packages that must match it."""
    return install_resolved("transformers-4.57.6", TRANSFORMERS4_REQUEST)


def requests_path() -> Path:
    """Folder holding `requests` and what it needs that the running environment lacks."""
    return install_resolved("requests", ("requests",))


def needs_requests(version: str) -> bool:
    """True for the releases that import `requests` without declaring it, when the running
    environment lacks it."""
    return imports_undeclared_requests(version) and importlib.util.find_spec("requests") is None


def dependency_paths(version: str) -> list[Path]:
    """The folders that must come before the running environment on sys.path for release
    `version` to import (none for releases the environment's transformers serves)."""
    paths = []
    if needs_transformers4(version):
        paths.append(transformers4_path())
    if needs_requests(version):
        paths.append(requests_path())
    return paths


def import_paths(version: str) -> list[Path]:
    """The folders to put first on sys.path so that `import trl` gives release `version`."""
    return [trl_release_path(version), *dependency_paths(version)]


def distributions(folder: Path) -> dict[str, str]:
    """{normalised distribution name: version} of the dist-infos installed in `folder`."""
    found = {}
    for info in folder.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].partition("-")
        found[normalise(name)] = version
    return found


def normalise(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")
