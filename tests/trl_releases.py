"""Real TRL releases (and a transformers 4 environment), and verl, installed once into a cache folder.

Tests that check a claim against an old TRL release use this module instead of the installed
TRL. Two ways to use a release:

- read its source without importing it: `trl_release_path("0.17.0") / "trl" / "trainer" /
  "grpo_trainer.py"` (fast, needs no matching transformers);
- import it in a child process: `PYTHONPATH=<trl_release_path(v)>:<transformers4_path()>` for
  TRL 0.17 to 0.26, which do not import with transformers 5 (see `needs_transformers4`), or
  `PYTHONPATH=<trl_release_path(v)>` alone for later releases (the venv's transformers 5 and
  torch serve them). `import_environment(v)` builds that environment.

Rules:
- every folder is installed with `pip install --no-deps --target` into a temporary folder next
  to its final place and renamed when complete, so an interrupted install never leaves a
  half-filled folder that later runs would trust;
- the cache is `trl-releases/` in the project's cache (`$GRPO_SKILL_CACHE`, else
  `~/.cache/grpo-skill`, where the tiny models are cached too);
- verl 0.9.1 is installed the same way (`verl_environment()`), next to only what
  `verl.trainer.ppo.core_algos` and `verl.workers.config` need to import (see VERL_REQUEST);
- when the package registry cannot be reached, the calling test is skipped with the pip error,
  not failed: the claims are about the releases, not about the network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from reference_impl.tiny import cache_root as project_cache_root

# One release per family, the versions the skill's version table is checked against.
RELEASES = (
    "0.14.0",
    "0.15.2",
    "0.17.0",
    "0.19.1",
    "0.21.0",
    "0.23.1",
    "0.26.2",
    "0.29.1",
    "1.0.0",
    "1.8.0",
    "1.14.2",
    "1.16.0",
)

# TRL 0.17 to 0.26 call transformers' `_is_package_available("vllm")`, which in transformers 5
# returns a tuple (always true), so they import vllm or weave and fail; 4.57.6 works for all.
TRANSFORMERS4 = "transformers==4.57.6"

# What TRL 0.17 to 0.26 need next to transformers 4.57.6. The exact set is resolved at install
# time with `pip install --dry-run --report` against the running environment, so only packages
# whose venv version does not fit transformers 4 (huggingface-hub, tokenizers, datasets, ...)
# land in the folder; torch and everything compatible come from the venv.
TRANSFORMERS4_REQUEST = (TRANSFORMERS4, "accelerate", "datasets")


def cache_root() -> Path:
    """The folder holding every cached install: `<project cache>/trl-releases`."""
    root = project_cache_root() / "trl-releases"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _install(name: str, requirements: tuple[str, ...]) -> Path:
    """Install `requirements` without dependencies into cache_root()/name, once, atomically.

    Skips the calling test if pip cannot reach the registry.
    """
    final = cache_root() / name
    if final.is_dir():
        return final
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_root()))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
    command += ["--disable-pip-version-check", "--target", str(staging), *requirements]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(
            f"cannot install {' '.join(requirements)} (registry unreachable?): "
            f"{result.stderr.strip()[-300:]}"
        )
    try:
        staging.rename(final)
    except OSError:  # another process finished the same install first: keep its copy
        shutil.rmtree(staging, ignore_errors=True)
    return final


def trl_release_path(version: str) -> Path:
    """Folder holding the `trl` package of release `version` (`<folder>/trl/__init__.py`).

    Installed with `pip install --no-deps --target` on first use, then cached. Put the folder
    first on `PYTHONPATH` to import that release, or read its files directly.
    """
    return _install(f"trl-{version}", (f"trl=={version}",))


def transformers4_path() -> Path:
    """Folder holding transformers 4.57.6 and the few packages that must match it.

    TRL 0.17 to 0.26 import with it: `PYTHONPATH=<trl_release_path(v)>:<transformers4_path()>`.
    Everything else (torch, accelerate, datasets, ...) comes from the running environment.
    """
    return _install("transformers-4.57.6", _resolve(TRANSFORMERS4_REQUEST))


def _resolve(requirements: tuple[str, ...]) -> tuple[str, ...]:
    """The exact `name==version` pins pip would add to the running environment for `requirements`."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report"]
        command += [str(report), "--disable-pip-version-check", *requirements]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(
                f"cannot resolve {' '.join(requirements)} (registry unreachable?): "
                f"{result.stderr.strip()[-300:]}"
            )
        chosen = json.loads(report.read_text())["install"]
    pins = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in chosen]
    return tuple(
        pin for pin in pins if not pin.lower().startswith(("torch==", "nvidia-", "triton=="))
    )


def needs_transformers4(version: str) -> bool:
    """True for the TRL releases (0.17 to 0.26) that only import with transformers 4."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return major == 0 and 17 <= minor <= 26


def needs_requests(version: str) -> bool:
    """True for the releases (0.29 to 1.8) that import `requests` without declaring it, when the
    running environment lacks it (transformers 5 no longer brings it)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    in_range = (0, 29) <= (major, minor) <= (1, 8)
    return in_range and importlib.util.find_spec("requests") is None


def requests_path() -> Path:
    """Folder holding `requests` and what it needs that the running environment lacks."""
    return _install("requests", _resolve(("requests",)))


def import_environment(version: str) -> dict[str, str]:
    """`os.environ` plus the PYTHONPATH under which `import trl` gives release `version`."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, import_paths(version)))}


def import_paths(version: str) -> list[Path]:
    """The folders to put first on sys.path so that `import trl` gives release `version`."""
    paths = [trl_release_path(version)]
    if needs_transformers4(version):
        paths.append(transformers4_path())
    if needs_requests(version):
        paths.append(requests_path())
    return paths


VERL = "verl==0.9.1"

# What `from verl.trainer.ppo import core_algos` and `from verl.workers.config import ActorConfig`
# import beyond the project's venv, found by importing verl 0.9.1 alone and adding each missing
# module: Ray (`verl/__init__.py` imports `verl.protocol`, which imports ray at module level),
# tensordict within verl's declared range, omegaconf (verl's configs) and codetiming. verl's
# other requirements (vLLM, wandb, hydra, peft, ...) serve its trainer, not core_algos.
VERL_REQUEST = ("ray>=2.41.0", "tensordict>=0.8.0,<=0.10.0,!=0.9.0", "omegaconf", "codetiming")


def verl_environment() -> dict[str, str]:
    """`os.environ` plus the PYTHONPATH under which `import verl` gives verl 0.9.1.

    verl itself is installed without dependencies; the few packages its core_algos imports are
    resolved against the running environment (so torch and numpy come from the venv).
    """
    paths = [_install("verl-0.9.1", (VERL,)), _install("verl-0.9.1-deps", _resolve(VERL_REQUEST))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
