"""End to end on a built task: the oracle scores 1, nop 0, and the cheats and shortcuts agents take
(replacing the trainer's convention by the textbook one, editing protected files or the checker)
lose what they should.

The task is rz-format-stop, the one tests/test_tasks_exploits.py builds: the verifier's cache of
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

BUGS = ("pad_masks_eos", "scoring_without_temperature", "unscored_rows_in_std")
DECOY = "population_std"  # rlzero's population std, guarding unscored_rows_in_std


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
POPULATION_STD = "std = (centred.pow(2).sum(dim=1, keepdim=True) / count).sqrt()"


def test_oracle_scores_one_and_nop_scores_zero_on_every_bug(decoy_task):
    oracle = run_trial(decoy_task, "oracle")
    nop = run_trial(decoy_task, "nop")
    assert oracle.reward == 1.0, oracle.detail
    assert nop.reward == 0.0
    assert nop.bugs == {"anti_cheat": 1.0, "learning": 0.0} | dict.fromkeys((*BUGS, DECOY), 0.0)


def test_the_textbook_convention_loses_the_decoy_and_its_stage(decoy_task, agent_files):
    """Every bug fixed, but the group std made the sample std (what copying a textbook or
    reference implementation gives): the trainer's population std is part of the advantages
    stage, so that stage's bug and the decoy guarding it both score 0; the other bugs keep their
    credit."""
    textbook = POPULATION_STD.replace("/ count)", "/ (count - 1).clamp(min=1))")
    agent = f"{FIX} && sed -i 's|{POPULATION_STD}|{textbook}|' rlzero/advantages.py"
    agent += f" && grep -qF '{textbook}' rlzero/advantages.py"
    result = run_trial(decoy_task, agent, agent_files=agent_files)
    assert result.status == "ok", result.detail
    assert result.bugs["pad_masks_eos"] == result.bugs["scoring_without_temperature"] == 1.0
    assert result.bugs["unscored_rows_in_std"] == result.bugs[DECOY] == 0.0, result.detail
    assert "advantages.pairs: intended" in result.detail  # the decoy's own probe saw it
    assert result.reward == pytest.approx(0.5)


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
    """The checks test behaviour: the std's count fixed in the agent's own words (the buggy
    advantages.py kept, its NaN count of the zero-filled deviations replaced by the scored mask
    as integers under a name of its own) gets full credit."""
    agent = (
        f"cp rlzero/advantages.py /tmp/advantages.py && {FIX}"
        " && cp /tmp/advantages.py rlzero/advantages.py"
        " && grep -qF '(~torch.isnan(centred))' rlzero/advantages.py"
        " && sed -i -e 's/centred, _ = _centred/centred, kept = _centred/'"
        " -e 's/(~torch.isnan(centred))/kept.to(torch.int64)/' rlzero/advantages.py"
    )
    result = run_trial(decoy_task, agent, agent_files=agent_files)
    assert result.reward == 1.0, result.detail
