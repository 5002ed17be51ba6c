"""Scoring one bug of a user-family task on its oracle workspace with `trainer.py` rewritten: the
verifier as shipped in the built task, its task.json cut to that bug and no training run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def bug_score(
    built: Path, tmp_path: Path, bug_id: str, rewrite: Callable[[str], str]
) -> tuple[float, str]:
    """The verifier's score of `bug_id` alone and the tail of its log."""
    tests = tmp_path / "tests"
    shutil.copytree(built / "tests", tests)
    task = json.loads((tests / "task.json").read_text())
    task["bugs"] = [b for b in task["bugs"] if b["id"] == bug_id]
    task["learning"] = None
    (tests / "task.json").write_text(json.dumps(task))
    workspace = tmp_path / "workspace"
    shutil.copytree(built / "environment" / "workspace", workspace)
    shutil.copytree(built / "solution" / "files", workspace, dirs_exist_ok=True)
    trainer = workspace / "mygrpo" / "trainer.py"
    trainer.write_text(rewrite(trainer.read_text()))
    done = subprocess.run(
        [sys.executable, str(tests / "verify.py"), str(workspace), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    reward = json.loads((tmp_path / "logs" / "reward.json").read_text())
    return reward[bug_id], done.stdout[-2000:]
