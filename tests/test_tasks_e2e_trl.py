"""End to end on a TRL task (a second xdist group, run beside the first)."""

from __future__ import annotations

import shutil

import pytest

from task_harness.build import build_task
from task_harness.runner import AGENT_FILES, run_trial
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-e2e-trl")


def test_trio_restoring_upstream_decode_loses_the_reasoning_contract(tmp_path):
    """The SkillsBench failure mode: reverting the fork's decode to TRL's batch_decode. The decode
    bug is judged with the fork's reasoning contract, so upstream's plain decode passes neither it
    nor the contract: only the other two bugs and their decoy score."""
    (spec,) = load_tasks(ids=["trl-skillsbench-trio"])
    built = build_task(spec, tmp_path / "built")
    shutil.copytree(built / "solution" / "files", tmp_path / "agent" / "solution")
    trainer = "trl/trl/trainer/grpo_trainer.py"
    agent = (
        f"cp -R {AGENT_FILES}/solution/. /app/ && sed -i "
        "'s/completions = decode_and_strip_reasoning(self.processing_class, completion_ids)/"
        "completions = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)/' "
        f"{trainer}"
    )
    result = run_trial(built, agent, agent_files=tmp_path / "agent")
    assert result.bugs["advantage_epsilon"] == 1.0 and result.bugs["logprob_sign"] == 1.0
    assert result.bugs["decode_blanks_plain"] == 0.0
    assert result.bugs["reasoning_contract"] == 0.0
    assert result.reward == pytest.approx(0.40)
