"""The agent's Python environment per condition: the third-party stack, and grpo-skill only with --skill.

The runner's own environment holds this project (an editable install of the checker, the harness,
the task specs around it), so the agent never gets it. Each condition gets a venv of its own,
built once and cached: the runner's site-packages (and folders their .pth files add) without
this project's entries, linked in file by file (hard links, so torch is not copied), plus, for the skill condition only, grpo-skill
laid out exactly as the Harbor image's skill condition gets it (`export.copy_grpo_skill`) and a
`grpo-check` command. The venv is shown read-only at /opt/venv in the agent's view.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from task_harness.verifier.jail import PYTHON_ENV

# This project's entries in a site-packages folder (its packages, editable finders, dist-infos).
OWN_ENTRIES = (
    "grpo_skill",
    "__editable__",
    "_grpo_skill",
    "checker",
    "reference_impl",
    "skill_installer",
    "task_harness",
)
CONDITIONS = ("no-skill", "skill")


def cache_dir() -> Path:
    return Path(os.environ.get("GRPO_SKILL_CACHE", Path.home() / ".cache" / "grpo-skill"))


def third_party_entries(site: Path) -> list[Path]:
    """The entries of `site` that are not this project's; `.pth` files are left out too (they
    run code at start-up and the stack needs none)."""
    return sorted(
        entry
        for entry in site.iterdir()
        if not entry.name.startswith(OWN_ENTRIES)
        and entry.suffix != ".pth"
        and entry.name != "__pycache__"
    )


def site_folders() -> list[Path]:
    """The runner's site-packages folders, and the folders their `.pth` files add to the path
    (a development install may keep its dependencies in one)."""
    sites = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    added = []
    for folder in sites:
        for pth in sorted(folder.glob("*.pth")):
            for line in pth.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import")) and Path(line).is_dir():
                    added.append(Path(line))
    return sites + added


def _fingerprint(sites: list[Path], skill: bool) -> str:
    """Changes when the stack or (skill condition) grpo-skill changes: a new env is built."""
    from task_harness.installed import package_dir
    from task_harness.verifier.digest import tree_digest

    digest = hashlib.sha256()
    for entry in (e for folder in sites for e in third_party_entries(folder)):
        digest.update(f"{entry}:{entry.stat().st_mtime_ns}\n".encode())
    if skill:
        from skill_installer import skill_source

        for name in ("checker", "reference_impl", "skill_installer"):
            digest.update(tree_digest(package_dir(name), "*").encode())
        digest.update(tree_digest(skill_source(), "*").encode())
    return digest.hexdigest()[:16]


def _link_tree(source: Path, target: Path) -> None:
    """`target` as a copy of `source` whose files are hard links to the originals, symlinks
    followed (a full copy across devices)."""
    if target.exists():  # an earlier folder on the path wins, as it does for imports
        return
    done = subprocess.run(["cp", "-RLl", str(source), str(target)], capture_output=True)
    if done.returncode != 0:
        if target.is_dir():
            shutil.rmtree(target)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)


def _venv_site(venv: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / version / "site-packages"


def _add_grpo_skill(venv: Path) -> None:
    """grpo-skill as the skill condition's image has it, and `grpo-check` on the PATH."""
    from task_harness.export import copy_grpo_skill

    staged = venv.parent / f"{venv.name}.grpo-skill"
    copy_grpo_skill(staged)
    shutil.copytree(staged / "site-packages", _venv_site(venv), dirs_exist_ok=True)
    shutil.copytree(staged / "share", venv / "share", dirs_exist_ok=True)
    shutil.rmtree(staged)
    script = venv / "bin" / "grpo-check"
    script.write_text(f"#!{PYTHON_ENV}/bin/python\nfrom checker.cli import main\nmain()\n")
    script.chmod(0o755)


def agent_env(condition: str) -> Path:
    """The cached venv of `condition` ("skill" or "no-skill"), built on first use."""
    if condition not in CONDITIONS:
        raise ValueError(f"unknown condition {condition!r}")
    sites = site_folders()
    skill = condition == "skill"
    venv = cache_dir() / "agent-env" / f"{condition}-{_fingerprint(sites, skill)}"
    if (venv / "pyvenv.cfg").exists():
        return venv
    staging = venv.with_name(f"{venv.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(staging)],
        check=True,
        capture_output=True,
    )
    for folder in sites:
        for entry in third_party_entries(folder):
            _link_tree(entry, _venv_site(staging) / entry.name)
    if skill:
        _add_grpo_skill(staging)
    try:
        staging.rename(venv)
    except OSError:  # another trial built it first; the two are identical
        shutil.rmtree(staging, ignore_errors=True)
    return venv
