"""End to end on a built task: the oracle scores 1, nop 0, and the cheats and shortcuts agents take
(replacing the trainer's convention by the textbook one, editing protected files or the checker)
lose what they should.

The task is rz-format-stop (seven bugs and a decoy), the one tests/test_tasks_exploits.py builds: the verifier's cache of
intended observations ($GRPO_TASK_CACHE) then serves both files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from task_harness.build import build_task
from task_harness.runner import AGENT_FILES, guarded_digests, run_trial
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-e2e")

BUGS = (
    "pad_masks_eos",
    "ref_sync_mix_swapped",
    "sequence_ratio_arithmetic_mean",
    "rewards_weighted_mean",
    "loss_rows_kept_only",
    "dual_clip_offset",
    "adv_eps_under_root",
)
DECOY = "asymmetric_band"  # rlzero's clip-higher band, guarding sequence_ratio_arithmetic_mean


@pytest.fixture(scope="module")
def decoy_task(tmp_path_factory) -> Path:
    (spec,) = load_tasks(ids=["rz-format-stop"])
    assert {b.id for b in spec.bugs} == {*BUGS, DECOY}
    return build_task(spec, tmp_path_factory.mktemp("built"))


@pytest.fixture(scope="module")
def agent_files(decoy_task, tmp_path_factory) -> Path:
    """What the scripted agents bring along (at /opt/agent): the oracle's fixed files."""
    folder = tmp_path_factory.mktemp("agent-files")
    shutil.copytree(decoy_task / "solution" / "files", folder / "solution")
    return folder


FIX = f"cp -R {AGENT_FILES}/solution/. /app/"
CLIP_HIGH = "clip_high: float = 0.28"


def test_oracle_scores_one_and_nop_scores_zero_on_every_bug(decoy_task):
    oracle = run_trial(decoy_task, "oracle")
    nop = run_trial(decoy_task, "nop")
    assert oracle.reward == 1.0, oracle.detail
    assert nop.reward == 0.0
    assert nop.bugs == {"anti_cheat": 1.0, "learning": 0.0} | dict.fromkeys((*BUGS, DECOY), 0.0)
    assert "=== Learning: not run, since a bug above is not fixed" in nop.detail, nop.detail


def test_the_textbook_convention_loses_the_decoy_and_its_stage(decoy_task, agent_files):
    """Every bug fixed, but the trust region made symmetric (what copying a textbook or
    reference implementation gives): the trainer's clip-higher band is a convention the task
    declares, so the decoy, the bug it guards (the ratio that band clips) and the clipping
    stage's own bug (the dual clip's bound, judged by every clipping probe) score 0; the other
    bugs keep their credit."""
    textbook = CLIP_HIGH.replace("0.28", "0.2")
    agent = f"{FIX} && sed -i 's|{CLIP_HIGH}|{textbook}|' rlzero/config.py"
    agent += f" && grep -qF '{textbook}' rlzero/config.py"
    result = run_trial(decoy_task, agent, agent_files=agent_files)
    assert result.status == "ok", result.detail
    lost = ("sequence_ratio_arithmetic_mean", "dual_clip_offset", DECOY)
    assert all(result.bugs[bug] == 1.0 for bug in BUGS if bug not in lost), result.bugs
    assert all(result.bugs[bug] == 0.0 for bug in lost), result.bugs
    assert "clipping.config_band: intended" in result.detail  # the decoy's own probe saw it
    # 1 - 0.15 (the guarded ratio) - 0.1 (the clipping stage's bug) - 0.2 (the decoy)
    assert result.reward == pytest.approx(0.55)


def test_editing_a_protected_file_scores_zero_even_with_the_fix(decoy_task, agent_files):
    agent = f"{FIX} && echo '# tuned' >> train.py"
    result = run_trial(decoy_task, agent, agent_files=agent_files)
    assert result.bugs["anti_cheat"] == 0.0
    assert result.reward == 0.0


def test_the_checker_is_out_of_the_agents_reach_and_a_change_is_caught(decoy_task, tmp_path):
    """The project's code is not in the agent's view; were it changed during a trial anyway, the
    trial is recorded as tampered."""
    guarded = tmp_path / "project" / "checker"
    guarded.mkdir(parents=True)
    (guarded / "verify.py").write_text("# the verifier\n")
    agent = f"echo pass >> {guarded}/verify.py; test -e {guarded}/verify.py && echo seen; true"
    result = run_trial(decoy_task, agent, guarded={"checker": guarded})
    assert result.status == "ok" and (guarded / "verify.py").read_text() == "# the verifier\n"
    before = guarded_digests({"checker": guarded})
    (guarded / "verify.py").write_text("pass\n")
    assert guarded_digests({"checker": guarded}) != before


def test_a_fix_written_differently_from_the_oracle_passes(decoy_task, agent_files):
    """The checks test behaviour: GSPO's sequence ratio fixed in the agent's own words (the
    buggy objective.py kept, its mean of the token ratios replaced by the exp of the mean of
    their logs, which the unchanged `.log()` after it undoes; the file's other bug, the dual
    clip's offset, mended in place with its docstring left as it is) gets full credit."""
    edits = [
        (
            "ratios.sum(dim=1) / counted.clamp(min=1)",
            "(torch.where(mask > 0, log_ratio, 0.0).sum(dim=1) / counted.clamp(min=1)).exp()",
        ),
        ("-(1 + dual_clip) * adv", "-dual_clip * adv"),
    ]
    agent = f"cp rlzero/objective.py /tmp/objective.py && {FIX} && cp /tmp/objective.py rlzero/objective.py"
    for buggy, mended in edits:
        # in sed's regex, * is the one character of these that would not match itself
        pattern = buggy.replace("*", "\\*")
        agent += f" && grep -qF -e '{buggy}' rlzero/objective.py"
        agent += f" && sed -i 's|{pattern}|{mended}|' rlzero/objective.py"
        agent += f" && grep -qF -e '{mended}' rlzero/objective.py"
    result = run_trial(decoy_task, agent, agent_files=agent_files)
    assert result.reward == 1.0, result.detail
