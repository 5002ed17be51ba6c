"""End to end on a user-family task: a user's GRPOTrainer subclass on a pristine TRL."""

from __future__ import annotations

import shutil

import pytest

from task_harness.build import build_task
from task_harness.runner import AGENT_FILES, run_trial
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-e2e-user")


def test_a_fix_of_two_bugs_of_three_scores_those_two(tmp_path):
    """The oracle's files with the ratio bug put back: the verifier drives the workspace's
    subclass through grpo-check's driver on the shipped release and scores each stage apart;
    with a bug left the training gate is not run."""
    (spec,) = load_tasks(ids=["user-flat-grad"])
    built = build_task(spec, tmp_path / "built")
    shutil.copytree(built / "solution" / "files", tmp_path / "agent" / "solution")
    agent = (
        f"cp -R {AGENT_FILES}/solution/. /app/ && sed -i "
        "'s/old_logps = logps.detach()/old_logps = logps/' /app/mygrpo/trainer.py"
    )
    result = run_trial(built, agent, agent_files=tmp_path / "agent")
    assert (
        result.bugs["mean_bessel_corrected"] == 1.0 and result.bugs["answer_weight_unused"] == 1.0
    )
    assert result.bugs["old_logps_attached"] == 0.0
    assert result.bugs["learning"] == 0.0
    assert result.reward == pytest.approx(0.50)
