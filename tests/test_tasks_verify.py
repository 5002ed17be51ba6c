"""End to end on built tasks: the oracle scores 1, nop 0, and the cheats and shortcuts agents take
(restoring upstream code, editing protected files or the checker) lose what they should."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from task_fixtures import MINIGRPO_TASKS

from task_harness.build import build_task
from task_harness.installed import package_dir
from task_harness.runner import AGENT_FILES, guarded_digests, run_trial
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-e2e")


@pytest.fixture(scope="module")
def decoy_task(tmp_path_factory) -> Path:
    (spec,) = load_tasks(MINIGRPO_TASKS, ids=["ref-flat-reward-decoy"])
    return build_task(spec, tmp_path_factory.mktemp("built"))


@pytest.fixture(scope="module")
def agent_files(decoy_task, tmp_path_factory) -> Path:
    """What the scripted agents bring along (at /opt/agent): the oracle's fixed files and
    upstream's stage modules."""
    folder = tmp_path_factory.mktemp("agent-files")
    shutil.copytree(decoy_task / "solution" / "files", folder / "solution")
    shutil.copytree(package_dir("reference_impl"), folder / "upstream")
    return folder


FIX = f"cp -R {AGENT_FILES}/solution/. /app/"


def test_oracle_scores_one_and_nop_scores_zero_on_every_bug(decoy_task):
    oracle = run_trial(decoy_task, "oracle")
    nop = run_trial(decoy_task, "nop")
    assert oracle.reward == 1.0, oracle.detail
    assert nop.reward == 0.0
    assert nop.bugs == {
        "anti_cheat": 1.0,
        "learning": 0.0,
        "batch_wide_std": 0.0,
        "decode_blanks_plain": 0.0,
        "small_epsilon": 0.0,
    }


def test_restoring_upstream_fixes_the_bugs_but_loses_the_decoy(decoy_task, agent_files):
    """Copying reference_impl over the package fixes both bugs and silently drops epsilon 1e-6."""
    agent = (
        "for f in advantages.py decode.py; do "
        f"sed 's/reference_impl/minigrpo/g' {AGENT_FILES}/upstream/$f > minigrpo/$f; done"
    )
    result = run_trial(decoy_task, agent, agent_files=agent_files)
    assert result.bugs["batch_wide_std"] == 1.0 and result.bugs["decode_blanks_plain"] == 1.0, (
        result.detail
    )
    assert result.bugs["small_epsilon"] == 0.0
    assert result.reward == pytest.approx(0.8)


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
    """The checks test behaviour: an equivalent rewrite of the decode fix gets full credit."""
    decode = (
        "def strip_reasoning(text, open_tag='<think>', close_tag='</think>'):\n"
        "    head, sep, tail = text.partition(close_tag)\n"
        "    if sep:\n        return tail.strip()\n"
        "    return '' if open_tag in text else text\n"
    )
    (agent_files / "decode.py").write_text(decode)
    agent = f"{FIX} && cp {AGENT_FILES}/decode.py minigrpo/decode.py"
    assert run_trial(decoy_task, agent, agent_files=agent_files).reward == 1.0
