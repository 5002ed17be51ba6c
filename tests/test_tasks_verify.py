"""End to end on built tasks: the oracle scores 1, nop 0, and the cheats and shortcuts agents take
(restoring upstream code, editing protected files or the checker) lose what they should."""

from __future__ import annotations

from pathlib import Path

import pytest

from task_harness.build import build_task
from task_harness.installed import package_dir
from task_harness.runner import run_trial
from task_harness.spec import load_tasks

pytestmark = pytest.mark.xdist_group("tasks-e2e")


@pytest.fixture(scope="module")
def decoy_task(tmp_path_factory) -> Path:
    (spec,) = load_tasks(ids=["ref-flat-reward-decoy"])
    return build_task(spec, tmp_path_factory.mktemp("built"))


def test_oracle_scores_one_and_nop_scores_zero_on_every_bug(decoy_task):
    oracle = run_trial(decoy_task, "oracle")
    nop = run_trial(decoy_task, "nop")
    assert oracle.reward == 1.0, oracle.detail
    assert nop.reward == 0.0
    assert nop.bugs == {
        "anti_cheat": 1.0,
        "batch_wide_std": 0.0,
        "decode_blanks_plain": 0.0,
        "small_epsilon": 0.0,
    }


def test_restoring_upstream_fixes_the_bugs_but_loses_the_decoy(decoy_task):
    """Copying reference_impl over the package fixes both bugs and silently drops epsilon 1e-6."""
    upstream = package_dir("reference_impl")
    agent = f"for f in advantages.py decode.py; do sed 's/reference_impl/minigrpo/g' {upstream}/$f > minigrpo/$f; done"
    result = run_trial(decoy_task, agent)
    assert result.bugs["batch_wide_std"] == 1.0 and result.bugs["decode_blanks_plain"] == 1.0
    assert result.bugs["small_epsilon"] == 0.0
    assert result.reward == pytest.approx(0.8)


def test_editing_a_protected_file_scores_zero_even_with_the_fix(decoy_task):
    agent = (
        f"GRPO_TASK_WORKSPACE=. bash {decoy_task}/solution/solve.sh && echo '# tuned' >> train.py"
    )
    result = run_trial(decoy_task, agent)
    assert result.bugs["anti_cheat"] == 0.0
    assert result.reward == 0.0


def test_editing_the_checker_scores_zero(decoy_task, tmp_path):
    guarded = tmp_path / "project"
    (guarded / "checker").mkdir(parents=True)
    (guarded / "checker" / "verify.py").write_text("# the verifier\n")
    agent = f"GRPO_TASK_WORKSPACE=. bash {decoy_task}/solution/solve.sh && echo 'pass' >> {guarded}/checker/verify.py"
    result = run_trial(decoy_task, agent, guarded={"checker": guarded / "checker"})
    assert result.status == "tampered"
    assert result.reward == 0.0


def test_a_fix_written_differently_from_the_oracle_passes(decoy_task, tmp_path):
    """The checks test behaviour: an equivalent rewrite of the decode fix gets full credit."""
    decode = (
        "def strip_reasoning(text, open_tag='<think>', close_tag='</think>'):\n"
        "    head, sep, tail = text.partition(close_tag)\n"
        "    if sep:\n        return tail.strip()\n"
        "    return '' if open_tag in text else text\n"
    )
    script = tmp_path / "decode.py"
    script.write_text(decode)
    agent = f"GRPO_TASK_WORKSPACE=. bash {decoy_task}/solution/solve.sh && cp {script} minigrpo/decode.py"
    assert run_trial(decoy_task, agent).reward == 1.0
