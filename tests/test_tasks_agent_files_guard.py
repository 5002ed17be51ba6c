"""`tasks run --agent-files` refuses a folder that holds a run's output: a scripted attacker whose
payload folder also held an earlier run's kept trial read that trial's `tests/expected` (the
verifier's copy of the intended files) at /opt/agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GRPO_CHECK = str(Path(sys.executable).parent / "grpo-check")


def _run(agent_files: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GRPO_CHECK, "tasks", "run", "user-loo-clip", "--agent", "true"]
        + ["--out", str(out), "--agent-files", str(agent_files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("kept", ["runs/results.jsonl", "runs/trials/t/tests/expected/x.py"])
def test_an_earlier_runs_output_is_refused(tmp_path, kept):
    payload = tmp_path / "payload"
    (payload / kept).parent.mkdir(parents=True)
    (payload / kept).write_text("{}")
    done = _run(payload, tmp_path / "out")
    assert done.returncode == 1 and "holds a run's output" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_out_inside_the_payload_is_refused(tmp_path):
    payload = tmp_path / "payload"
    payload.mkdir()
    done = _run(payload, payload / "runs")
    assert done.returncode == 1 and "holds a run's output" in done.stderr, done.stderr
