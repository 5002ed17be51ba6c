"""The shortcut baselines of `tasks verify`: scripted agents that score without debugging.

A debug task measures debugging only if copying a known-good implementation over the workspace
does not score. Two such agents run on every task they apply to:

- `upstream-restore` (trl family): replaces every file of the workspace's TRL fork by the same
  file of upstream TRL at the fork's version, downloaded from the package registry (as an agent
  with network can) and cached under `<project cache>/upstream/`.
- `reference-copy` (reference family): puts `reference_impl`'s stage functions in place of the
  trainer's, as an agent that found grpo-skill's reference would: for `minigrpo` (reference_impl
  renamed) its modules, with the package name mapped; for an independent trainer its modules
  under `<package>/_reference/` and, appended to each of the trainer's modules, functions of the
  trainer's names that call them (`trainers/<trainer>_reference_copy.py`).

Both run on the runner's side, like `oracle`: they are ours, not an outside agent.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from task_harness.installed import package_dir

SHORTCUTS = ("upstream-restore", "reference-copy")
# Which family a shortcut applies to; `tasks verify` omits it elsewhere.
FAMILY = {"upstream-restore": "trl", "reference-copy": "reference"}
VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


class ShortcutUnavailable(RuntimeError):
    """The shortcut cannot be taken here (the registry is unreachable, the fork has no version)."""


def applies(shortcut: str, family: str) -> bool:
    return FAMILY[shortcut] == family


def take(shortcut: str, workspace: Path, task: dict) -> list[str]:
    """Apply `shortcut` to `workspace` of the built task (its `task.json`), leaving the files the
    instruction forbids editing alone; the files it replaced, relative to the workspace."""
    keep = frozenset(task["protected"])
    if shortcut == "upstream-restore":
        version = fork_version(workspace) or task.get("fork_version")
        if not version:
            raise ShortcutUnavailable("the fork says no TRL version")
        return restore_upstream_trl(workspace, version, keep)
    if shortcut == "reference-copy":
        if task.get("trainer", "minigrpo") != "minigrpo":
            return copy_reference_mapped(workspace, task["trainer"], keep)
        return copy_reference(workspace, task["package"], keep)
    raise ValueError(f"unknown shortcut {shortcut!r}; known: {', '.join(SHORTCUTS)}")


def fork_version(workspace: Path) -> str | None:
    """The release the workspace's TRL fork states (`trl/trl/__init__.py`'s __version__ literal,
    as releases up to 0.2x write it); None when it reads the version from installed metadata."""
    init = workspace / "trl" / "trl" / "__init__.py"
    match = VERSION_LINE.search(init.read_text()) if init.is_file() else None
    return match.group(1) if match else None


def upstream_trl(version: str) -> Path:
    """The `trl` package folder of upstream release `version`, from the registry, cached."""
    from reference_impl.tiny import cache_root

    final = cache_root() / "upstream" / f"trl-{version}"
    if (final / "trl" / "__init__.py").is_file():
        return final / "trl"
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        command += ["--disable-pip-version-check", "--only-binary", ":all:"]
        command += ["--dest", scratch, f"trl=={version}"]
        done = subprocess.run(command, capture_output=True, text=True)
        wheels = list(Path(scratch).glob("trl-*.whl"))
        if done.returncode != 0 or not wheels:
            cause = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise ShortcutUnavailable(f"cannot download trl=={version}: {cause[:200]}")
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(unpacked)
        if not final.exists():  # another process may have finished the same download first
            unpacked.rename(final)
    return final / "trl"


def restore_upstream_trl(
    workspace: Path, version: str, keep: frozenset[str] = frozenset()
) -> list[str]:
    """Every file of the fork that upstream release `version` also has, replaced by upstream's."""
    fork = workspace / "trl" / "trl"
    if not fork.is_dir():
        raise ShortcutUnavailable(f"the workspace has no TRL fork at {fork}")
    upstream = upstream_trl(version)
    replaced = []
    for theirs in sorted(upstream.rglob("*")):
        ours = fork / theirs.relative_to(upstream)
        relative = str(ours.relative_to(workspace))
        if relative in keep or not (theirs.is_file() and ours.is_file()):
            continue
        if ours.read_bytes() != theirs.read_bytes():
            shutil.copyfile(theirs, ours)
            replaced.append(relative)
    return replaced


def copy_reference(workspace: Path, package: str, keep: frozenset[str] = frozenset()) -> list[str]:
    """Each module of the trainer's package that `reference_impl` also has, replaced by
    reference_impl's, imports renamed to the package."""
    source = package_dir("reference_impl")
    target = workspace / package
    if not target.is_dir():
        raise ShortcutUnavailable(f"the workspace has no package {package}/")
    replaced = []
    for module in sorted(source.glob("*.py")):
        ours = target / module.name
        relative = str(ours.relative_to(workspace))
        if relative in keep or not ours.is_file():
            continue
        text = module.read_text().replace("reference_impl", package)
        if ours.read_text() != text:
            ours.write_text(text)
            replaced.append(relative)
    return replaced


def copy_reference_mapped(workspace: Path, trainer: str, keep: frozenset[str] = frozenset()):
    """reference_impl as `<trainer>/_reference/`, and the shims of `trainer` appended to its
    modules, so each of the trainer's stage functions is reference_impl's under the trainer's
    name."""
    import importlib

    shims = importlib.import_module(f"task_harness.trainers.{trainer}_reference_copy").SHIMS
    target = workspace / trainer
    if not target.is_dir():
        raise ShortcutUnavailable(f"the workspace has no package {trainer}/")
    copied = target / "_reference"
    shutil.copytree(
        package_dir("reference_impl"), copied, ignore=shutil.ignore_patterns("__pycache__")
    )
    for module in copied.rglob("*.py"):
        module.write_text(module.read_text().replace("reference_impl", f"{trainer}._reference"))
    replaced = [str(copied.relative_to(workspace))]
    for relative, shim in shims.items():
        path = workspace / relative
        if relative in keep or not path.is_file():
            continue
        path.write_text(path.read_text() + "\n" + shim)
        replaced.append(relative)
    return replaced
