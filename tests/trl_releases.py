"""Real TRL releases (and a transformers 4 environment), and verl, installed once into a cache folder
(`task_harness/releases.py`; here a registry that cannot be reached skips the test).

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
- verl (0.9.1 and the older lines of VERL_RELEASES) is installed the same way
  (`verl_environment(version)`), next to only what `verl.trainer.ppo.core_algos` and
  `verl.workers.config` need to import (see VERL_REQUEST);
- when the package registry cannot be reached, the calling test is skipped with the pip error,
  not failed: the claims are about the releases, not about the network.
"""

from __future__ import annotations

import contextlib
import functools
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from task_harness import releases
from task_harness.releases import TRANSFORMERS4, needs_requests, needs_transformers4

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

__all__ = ["TRANSFORMERS4", "needs_requests", "needs_transformers4"]


def _skipping(function):
    """`function`, skipping the calling test when pip cannot reach the registry."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except releases.ReleaseUnavailable as error:
            pytest.skip(str(error))

    return wrapper


cache_root = releases.cache_root
_install = _skipping(releases.install)
_install_resolved = _skipping(releases.install_resolved)
trl_release_path = _skipping(releases.trl_release_path)
transformers4_path = _skipping(releases.transformers4_path)
requests_path = _skipping(releases.requests_path)
import_paths = _skipping(releases.import_paths)


def import_environment(version: str) -> dict[str, str]:
    """`os.environ` plus the PYTHONPATH under which `import trl` gives release `version`."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, import_paths(version)))}


# What `from verl.trainer.ppo import core_algos` and `from verl.workers.config import ActorConfig`
# import beyond the project's venv, found by importing verl 0.9.1 alone and adding each missing
# module: Ray (`verl/__init__.py` imports `verl.protocol`, which imports ray at module level),
# tensordict within verl's declared range, omegaconf (verl's configs) and codetiming. verl's
# other requirements (vLLM, wandb, hydra, peft, ...) serve its trainer, not core_algos.
VERL_REQUEST = ("ray>=2.41.0", "tensordict>=0.8.0,<=0.10.0,!=0.9.0", "omegaconf", "codetiming")


# The verl releases `grpo-check verl` is checked on: the current one and the lines users still run
# (0.4/0.5 without `ActorConfig`, 0.6 before `agg_loss` took batch-wide normalisers).
VERL_RELEASES = ("0.9.1", "0.6.1", "0.5.0", "0.4.1")


def verl_environment(version: str = "0.9.1") -> dict[str, str]:
    """`os.environ` plus the PYTHONPATH under which `import verl` gives verl `version`.

    verl itself is installed without dependencies; the few packages its core_algos imports are
    resolved against the running environment (so torch and numpy come from the venv), once for
    every release (0.9.1's set serves 0.4-0.9). verl 0.6 also imports `AutoModelForVision2Seq`,
    which transformers 5 dropped (so transformers 4 goes first), and 0.4 `pkg_resources`, which
    setuptools 81 dropped.
    """
    paths = [
        _install(f"verl-{version}", (f"verl=={version}",)),
        _install_resolved("verl-0.9.1-deps", VERL_REQUEST),
    ]
    if version.startswith("0.6."):
        paths.insert(1, transformers4_path())
    if version.startswith("0.4."):
        paths.append(_install("setuptools-80", ("setuptools<81",)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}


def prefetch() -> None:
    """Install every release folder the suite uses, several pip runs at a time.

    On a cold cache (a fresh CI machine) each folder is otherwise installed by the first test that
    needs it, one pip run after another on each worker: 12 releases, transformers 4.57.6 and verl's
    imports took minutes of waiting on the registry. pip spends that time on the network, so
    running them side by side costs little CPU. A folder that cannot be installed is left to the
    tests that need it, which skip with pip's error."""
    first = [functools.partial(releases.trl_release_path, version) for version in RELEASES]
    first += [
        releases.transformers4_path,
        functools.partial(releases.install_resolved, "verl-0.9.1-deps", VERL_REQUEST),
        functools.partial(releases.install, "setuptools-80", ("setuptools<81",)),
    ]
    first += [
        functools.partial(releases.install, f"verl-{version}", (f"verl=={version}",))
        for version in VERL_RELEASES
    ]
    # `requests` is needed only by releases that import it undeclared, which their source says.
    then = [functools.partial(releases.dependency_paths, version) for version in RELEASES]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for jobs in (first, then):
            for future in [pool.submit(job) for job in jobs]:
                with contextlib.suppress(releases.ReleaseUnavailable):
                    future.result()
