"""grpo-check's command line and sandbox: exit codes, --json, --junit-xml, and bad candidates.

Every run goes through the real CLI in a subprocess, so a candidate's crash, hang, sys.exit or
stdout noise is exercised exactly as a user meets it: no traceback, valid JSON, the results
obtained before a crash kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

REPO = Path(__file__).resolve().parent.parent


def grpo_check(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", "from checker.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


MISBEHAVING = """
    import os, sys, time, torch
    from reference_impl import compute_loss as _loss

    def combine_rewards(rewards_per_func, reward_weights):       # returns NaN
        return torch.full((rewards_per_func.size(0),), float("nan"))

    def compute_advantages(rewards, num_generations, scale_rewards="group"):  # raises
        raise ValueError("boom")

    def completion_mask(completion_ids, eos_token_ids, mask_truncated_completions=False):
        return completion_ids.tolist()                            # wrong type

    def per_token_kl(per_token_logps, ref_per_token_logps):       # mutates its input
        per_token_logps.mul_(2.0)
        d = ref_per_token_logps - per_token_logps
        return torch.exp(d) - d - 1

    def selective_log_softmax(logits, index, temperature=1.0):    # hangs
        time.sleep(600)

    def completion_logps(logits, input_ids, completion_mask, temperature=1.0):  # kills the process
        os._exit(3)

    def strip_reasoning(text, open_tag="<think>", close_tag="</think>"):  # prints, then sys.exit
        print("noise on stdout")
        sys.exit(0)

    def compute_loss(per_token_logps, advantages, completion_mask, **kwargs):  # wrong shape
        return _loss(per_token_logps, advantages, completion_mask, **kwargs).reshape(1).repeat(2)
"""


def test_misbehaving_candidate_is_reported_check_by_check(tmp_path):
    candidate = write(tmp_path, "misbehaving.py", MISBEHAVING)
    junit = tmp_path / "report.xml"
    stages = ["rewards", "advantages", "logprobs", "masking", "kl", "decode", "loss_aggregation"]
    run = grpo_check(
        str(candidate), "--json", "--timeout", "4", "--junit-xml", str(junit),
        *[f"--stage={s}" for s in stages],
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    report = json.loads(run.stdout)  # stdout holds exactly one JSON object despite the prints
    status = {r["check"]: r for r in report["results"]}
    assert {r["stage"] for r in report["results"]} == set(stages)
    assert status["rewards.weighted_sum_matches_reference"]["status"] == "fail"
    assert "NaN" in status["rewards.weighted_sum_matches_reference"]["message"]
    assert status["advantages.matches_reference"]["status"] == "error"
    assert "raised ValueError: boom" in status["advantages.matches_reference"]["message"]
    assert status["masking.matches_reference_random"]["status"] == "error"
    assert "returned list" in status["masking.matches_reference_random"]["message"]
    assert "in place" in status["kl.per_token_kl_matches_reference"]["message"]
    hung = status["logprobs.selective_log_softmax_matches_reference"]
    assert hung["status"] == "error" and "within 4s" in hung["message"]
    crashed = status["logprobs.completion_logps_matches_reference"]
    assert crashed["status"] == "error" and "exit code 3" in crashed["message"]
    assert status["decode.plain_answer_is_unchanged"]["status"] == "error"
    assert "SystemExit" in status["decode.plain_answer_is_unchanged"]["message"]
    assert "expected a scalar" in status["loss_aggregation.fully_masked_batch_is_zero"]["message"]
    # the checks after each crash and hang still ran in a fresh child
    assert status["masking.every_eos_id_counts"]["status"] == "error"
    assert status["logprobs.completion_logps_are_nonpositive"]["status"] == "error"
    assert status["advantages.matches_reference"]["location"].endswith("misbehaving.py:8")
    passed = {r["check"] for r in report["results"] if r["status"] == "pass"}
    # NaN everywhere is consistent with "an all-NaN row is NaN" and with permutation invariance
    assert passed == {"rewards.all_nan_row_stays_nan", "rewards.rows_are_independent"}
    assert sum(report["summary"].values()) == len(report["results"])
    suite = ElementTree.parse(junit).getroot()
    assert int(suite.get("tests")) == len(report["results"])
    assert int(suite.get("errors")) == report["summary"]["error"]


@pytest.mark.parametrize(
    ("name", "source", "cause"),
    [
        ("syntax.py", "def combine_rewards(:\n", "syntax error in syntax.py:1"),
        ("empty.py", "X = 1\n", "exposes none of the protocol functions"),
        ("other_names.py", "def my_loss(x):\n    return x\n", "a YAML file maps yours to them"),
        ("raises.py", "raise RuntimeError('no GPU')\n", "import failed: RuntimeError: no GPU"),
        ("exits.py", "import sys\nsys.exit(4)\n", "called sys.exit(4) while importing"),
        ("dies.py", "import os\nos._exit(5)\n", "died while loading the candidate (exit code 5)"),
    ],
)
def test_candidate_that_cannot_load_exits_2_with_one_line(tmp_path, name, source, cause):
    run = grpo_check(str(write(tmp_path, name, source)), "--json", "--stage", "decode")
    assert run.returncode == 2
    assert run.stdout == ""
    assert cause in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("target", "yaml_text", "cause"),
    [
        ("missing.py", None, "no such file"),
        ("bad.yaml", "module: [unclosed\n", "malformed YAML"),
        ("keys.yaml", "module: x\nfunctionz: {}\n", "unknown key(s) ['functionz']"),
        ("conv.yaml", "module: x\nconfig: {loss_typ: grpo}\n", "unknown config key 'loss_typ'"),
        # verl's, slime's and AReaL's dual clip: the key names what it is here
        ("dual.yaml", "module: x\nconfig: {clip_ratio_c: 3.0}\n", "here it is delta"),
        # A field of a subclass's own config class (a blind agent put `style_gate` here).
        (
            "team.yaml",
            "trainer: team.py:TeamGRPOTrainer\nconfig: {style_gate: false}\n",
            "goes into a config built with that class (`grpo_config: FILE.py:NAME`",
        ),
        ("rename.yaml", "module: x\nfunctions: {compute_los: f}\n", "unknown protocol function"),
    ],
)
def test_bad_target_exits_2_without_starting_a_child(tmp_path, target, yaml_text, cause):
    if yaml_text is not None:
        write(tmp_path, target, yaml_text)
    run = grpo_check(target, "--json", cwd=tmp_path)
    assert run.returncode == 2 and run.stdout == ""
    assert cause in run.stderr and "Traceback" not in run.stderr


def test_yaml_rename_to_missing_attribute_exits_2(tmp_path):
    write(
        tmp_path,
        "mine.py",
        "def f(text, open_tag='<think>', close_tag='</think>'):\n    return text\n",
    )
    target = write(tmp_path, "mine.yaml", "path: mine.py\nfunctions: {strip_reasoning: g}\n")
    run = grpo_check(str(target), "--stage", "decode")
    assert run.returncode == 2 and "maps strip_reasoning to g" in run.stderr


def test_correct_candidate_passes_with_exit_0_and_stage_filter():
    run = grpo_check(
        "reference_impl/__init__.py", "--json", "--stage", "advantages", "--stage", "decode"
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["kind"] == "functions" and "diagnosis" not in report
    assert {r["stage"] for r in report["results"]} == {"advantages", "decode"}
    assert report["summary"]["fail"] == report["summary"]["error"] == 0


def test_dotted_module_target_and_table_output():
    run = grpo_check("checker.examples.buggy_grpo", "--stage", "kl", "--stage", "rewards")
    assert run.returncode == 1
    assert "kl <- root" in run.stdout
    assert "the KL term is subtracted" in run.stdout
    assert "debugging-playbook.md#kl" in run.stdout


def test_verdicts_are_deterministic_for_a_seed():
    args = ("checker/examples/buggy_grpo.py", "--json", "--stage", "advantages", "--seed", "7")
    first, second = grpo_check(*args), grpo_check(*args)
    assert json.loads(first.stdout)["results"] == json.loads(second.stdout)["results"]
