"""The Harbor export: every task fully expanded, and `harbor lint` accepts it.

Harbor needs Python >= 3.12; the test uses (or builds once) a venv with `pip install harbor`
under ~/.cache/grpo-skill/harbor-venv and skips, saying why, where that is impossible.
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from task_harness.export import export_harbor
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-export")

HARBOR_VENV = Path.home() / ".cache" / "grpo-skill" / "harbor-venv"


def _python312() -> str | None:
    candidates = [
        shutil.which("python3.12"),
        *sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.12*/bin/python3.12"))),
    ]
    for candidate in filter(None, candidates):
        done = subprocess.run([candidate, "--version"], capture_output=True, text=True, cwd="/")
        if done.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def harbor() -> Path:
    executable = HARBOR_VENV / "bin" / "harbor"
    if executable.exists():
        return executable
    python = _python312()
    if python is None:
        pytest.skip("harbor needs Python >= 3.12 and no python3.12 was found")
    try:
        subprocess.run(
            [python, "-m", "venv", str(HARBOR_VENV)], check=True, capture_output=True, timeout=120
        )
        subprocess.run(
            [str(HARBOR_VENV / "bin" / "pip"), "install", "-q", "harbor"],
            check=True,
            capture_output=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as error:
        shutil.rmtree(HARBOR_VENV, ignore_errors=True)
        pytest.skip(f"could not install harbor into {HARBOR_VENV}: {error}")
    return executable


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> list[Path]:
    return export_harbor(load_tasks(), tmp_path_factory.mktemp("harbor"))


def test_export_writes_harbors_layout_for_every_task(exported):
    assert len(exported) >= 12
    for folder in exported:
        for part in (
            "task.toml",
            "instruction.md",
            "environment/Dockerfile",
            "tests/test.sh",
            "solution/solve.sh",
        ):
            assert (folder / part).exists(), f"{folder.name}: {part}"
        config = tomllib.loads((folder / "task.toml").read_text())
        assert config["verifier"]["environment_mode"] == "separate"
        assert sum(b["weight"] for b in config["metadata"]["grpo"]["bugs"]) == pytest.approx(1.0)
        dockerfile = (folder / "environment" / "Dockerfile").read_text()
        # The stack is that of the fork's release (an older fork's pins its own dependencies).
        release = json.loads((folder / "tests" / "task.json").read_text())["fork_version"]
        assert (
            "python:3.11" in dockerfile
            and "torch==2.13.0" in dockerfile
            and f"trl=={release or '1.16.0'}" in dockerfile
            and f"TRL {release or '1.16.0'}'s dependencies" in dockerfile
        )
        assert not (folder / "environment" / "grpo-skill").exists()  # the no-skill condition
        assert "grpo" not in dockerfile.lower()
        assert not (folder / "environment" / "workspace" / ".claude").exists()


def test_skill_condition_places_the_skill_in_the_agents_folders(tmp_path):
    (spec,) = load_tasks(ids=["rz-format-stop"])
    (folder,) = export_harbor([spec], tmp_path, skill=True)
    site = folder / "environment" / "grpo-skill" / "site-packages"
    assert (site / "checker").is_dir() and not (site / "task_harness").exists()
    assert "COPY grpo-skill/site-packages" in (folder / "environment" / "Dockerfile").read_text()
    assert (
        folder / "environment" / "workspace" / ".claude" / "skills" / "grpo" / "SKILL.md"
    ).exists()


def test_exported_tasks_pass_harbor_lint(harbor, exported):
    done = subprocess.run(
        [str(harbor), "lint", *map(str, exported)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
