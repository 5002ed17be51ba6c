"""`tasks export --format harbor DIR`: every task fully expanded, ready for `harbor run -p`.

Each task's `environment/` gets the condition's Dockerfile (python 3.11, torch 2.13.0 CPU, TRL
1.16.0) and the agent's workspace. With `skill=True`, and only then, it also gets grpo-skill as
installed here (`grpo-skill/`: the checker, reference_impl and the skill installer as
site-packages folders with the distribution's entry points, and the skill as its data files),
which that Dockerfile copies into the image so that the agent can run `grpo-check`, and the grpo
skill is placed in the workspace's agent skill folders by our installer. No image holds the
harness, a task spec, the verifier or the oracle's solution: Harbor uploads `tests/` to a
separate, fresh verifier environment after the agent has finished.
"""

from __future__ import annotations

import shutil
from importlib.metadata import distribution
from pathlib import Path

from skill_installer import skill_source
from task_harness.build import IGNORE, build_task
from task_harness.installed import package_dir
from task_harness.spec import TaskSpec

# The packages of the grpo-skill distribution (the task harness stays out of the image).
IMAGE_PACKAGES = ("checker", "reference_impl", "skill_installer")


def export_harbor(specs: list[TaskSpec], out: Path, skill: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    folders = []
    for spec in specs:
        folder = build_task(spec, out, skill=skill)
        if skill:
            copy_grpo_skill(folder / "environment" / "grpo-skill")
        folders.append(folder)
    return folders


def copy_grpo_skill(target: Path) -> None:
    """grpo-skill as installed here (a checkout's editable install or a wheel), laid out as the
    image's `site-packages/` and `share/` so that the Dockerfile copies it in place."""
    site = target / "site-packages"
    for name in IMAGE_PACKAGES:
        shutil.copytree(package_dir(name), site / name, ignore=IGNORE)
    dist = distribution("grpo-skill")
    info = site / f"grpo_skill-{dist.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: grpo-skill\nVersion: {dist.version}\n"
    )
    (info / "entry_points.txt").write_text(dist.read_text("entry_points.txt") or "")
    shutil.copytree(
        skill_source(), target / "share" / "grpo-skill" / "skills" / "grpo", ignore=IGNORE
    )
