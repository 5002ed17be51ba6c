"""`tasks export --format harbor DIR`: every task fully expanded, ready for `harbor run -p`.

Each task's `environment/` gets the Dockerfile (python 3.11, torch 2.13.0 CPU, TRL 1.16.0), the
agent's workspace and a copy of this project (`grpo-skill/`, installed in the image so that the
agent can run `grpo-check`). With `skill=True` the grpo skill is placed in the workspace's agent
skill folders by our installer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from checker.tasks.build import IGNORE, build_task
from checker.tasks.spec import REPO_ROOT, TaskSpec

PROJECT_FILES = ("pyproject.toml", "README.md", "checker", "reference_impl", "skills")


def export_harbor(specs: list[TaskSpec], out: Path, skill: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    folders = []
    for spec in specs:
        folder = build_task(spec, out, skill=skill)
        project = folder / "environment" / "grpo-skill"
        project.mkdir(parents=True, exist_ok=True)
        for name in PROJECT_FILES:
            source = REPO_ROOT / name
            if source.is_dir():
                shutil.copytree(source, project / name, ignore=IGNORE)
            elif source.exists():
                shutil.copy(source, project / name)
        folders.append(folder)
    return folders
