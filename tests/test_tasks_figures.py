"""Every figure an instruction states is one the agent's own run reproduces.

A task's training script pins its threads and seed, and its instruction states figures as ranges
wide enough for another machine's float rounding. Each claim below quotes the instruction and
checks the quoted figure against the logged run (`task_harness/symptoms.py`: the script run
fixed, the earlier run a user compares with, and with every bug, the run they see now). Every
number of an instruction is a quoted claim or a setting of the run. The suite checks a few tasks
(each run costs a training run); `GRPO_FIGURES=all` checks every task that has claims.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from task_harness import symptoms
from task_harness.agent_env import agent_env
from task_harness.build import build_task, fork_version
from task_harness.spec import TRL_REWARD_WEIGHTS, load_tasks

TASKS = {spec.id: spec for spec in load_tasks()}


@dataclass(frozen=True)
class Claim:
    quote: str  # the instruction's words, figure included
    run: str  # "fixed" (the earlier run) or "all bugs" (the run now)
    holds: Callable[[symptoms.Run], bool]


def block(run: symptoms.Run, key: str, index: int) -> float:
    """Mean of `key` over rollouts 10 * index + 1 .. 10 * index + 10."""
    return run.blocks(key)[index]


def column(run: symptoms.Run, key: str, lines: slice = slice(None)) -> list[float]:
    return [step[key] for step in run.steps[lines]]


def within(value: float | None, low: float, high: float) -> bool:
    return value is not None and low <= value <= high


CLAIMS: dict[str, list[Claim]] = {
    "rz-format-stop": [
        Claim(
            "reached a mean reward above 0.9 within 40\nrollouts",
            "fixed",
            lambda run: within(run.rollouts_to(0.9), 1, 40),
        ),
        Claim(
            "`reward` and `loss` print 0.000 on every line of the first 50 rollouts",
            "all bugs",
            lambda run: (
                len(run.steps) == 50
                and all(v == 0.0 for v in column(run, "reward") + column(run, "loss"))
            ),
        ),
        Claim(
            "`grad_norm` prints 0.0000 on every line",
            "all bugs",
            lambda run: all(v == 0.0 for v in column(run, "grad_norm")),
        ),
    ],
    "rz-succ-temperature": [
        Claim(
            "averaged a reward above 0.8 over rollouts 31-40",
            "fixed",
            lambda run: within(block(run, "reward", 3), 0.8, 1.0),
        ),
        Claim("the first log line prints `loss +nan`", "all bugs", lambda run: run.nan_loss),
        Claim(
            "the second rollout dies with a `RuntimeError`",
            "all bugs",
            lambda run: len(run.steps) == 1 and run.crash.startswith("RuntimeError"),
        ),
        Claim("reads 1.0000", "all bugs", lambda run: run.steps[0]["ratio_max"] == 1.0),
        # After a pass's update some token is likelier than it was, so the next pass's largest
        # ratio exceeds 1. (The block means were 1.2-5 when first stated and 1.15-2.4 on a later
        # clean clone of the same code and seed: a figure that moves is not stated.)
        Claim(
            "gave a value above 1 on every rollout",
            "fixed",
            lambda run: all(v > 1.0 for v in column(run, "ratio_max")),
        ),
    ],
    "rz-eos-stop": [
        Claim(
            "reached a mean reward above 0.9 within 40 rollouts",
            "fixed",
            lambda run: within(run.rollouts_to(0.9), 1, 40),
        ),
        Claim(
            "`reward` and `loss` print 0.000 on every line of the first 50 rollouts",
            "all bugs",
            lambda run: (
                len(run.steps) == 50
                and all(v == 0.0 for v in column(run, "reward") + column(run, "loss"))
            ),
        ),
        Claim(
            "sits between 1.1 and 1.4 on every line",
            "all bugs",
            lambda run: all(within(v, 1.1, 1.4) for v in column(run, "ratio_max")),
        ),
        Claim(
            "fell to about 1.00 once the model had learned the answer",
            "fixed",
            lambda run: within(run.steps[-1]["ratio_max"], 1.0, 1.01),
        ),
    ],
    "rz-format-kl": [
        Claim(
            "reached a mean reward above 0.9 within 40 rollouts",
            "fixed",
            lambda run: within(run.rollouts_to(0.9), 1, 40),
        ),
        Claim(
            "`kl` averaging between 2 and 4 over each block of ten rollouts after the first",
            "fixed",
            lambda run: all(within(v, 2, 4) for v in run.blocks("kl")[1:]),
        ),
        Claim(
            "`reward`, `loss` and `kl` print 0.000 and `ratio_max` (the largest importance ratio of"
            " a step) prints 1.0000 on every line of the first 50 rollouts",
            "all bugs",
            lambda run: (
                len(run.steps) == 50
                and all(v == 0.0 for k in ("reward", "loss", "kl") for v in column(run, k))
                and all(v == 1.0 for v in column(run, "ratio_max"))
            ),
        ),
    ],
    "rz-kl-anchor": [
        Claim(
            "prints exactly 1.0000 on every line",
            "all bugs",
            lambda run: all(v == 1.0 for v in column(run, "ratio_max")),
        ),
    ],
    "rz-succ-pairs": [
        Claim(
            "a mean\nreward between 0.5 and 0.9 over rollouts 31-40",
            "fixed",
            lambda run: within(block(run, "reward", 3), 0.5, 0.9),
        ),
        Claim(
            "its mean over each\nblock of ten rollouts stays between 0.08 and 0.11 for the first 50",
            "all bugs",
            lambda run: (
                len(run.steps) == 50 and all(within(v, 0.08, 0.11) for v in run.blocks("reward"))
            ),
        ),
        Claim(
            "averages above 2.6 over the first\nten rollouts and below 1.8 over rollouts 41-50",
            "all bugs",
            lambda run: block(run, "entropy", 0) > 2.6 and block(run, "entropy", 4) < 1.8,
        ),
        Claim(
            "used to print 1.0000 on every line",
            "fixed",
            lambda run: all(v == 1.0 for v in column(run, "ratio_max")),
        ),
        Claim(
            "it now averages between 1.2 and\n1.6 over the first ten rollouts",
            "all bugs",
            lambda run: within(block(run, "ratio_max", 0), 1.2, 1.6),
        ),
    ],
    "rz-trust-region": [
        Claim(
            "reached a mean reward above 0.9 within 40 rollouts",
            "fixed",
            lambda run: within(run.rollouts_to(0.9), 1, 40),
        ),
        Claim(
            "stays between 0.1 and 0.5 for the first 50 rollouts",
            "all bugs",
            lambda run: (
                len(run.steps) == 50 and all(within(v, 0.1, 0.5) for v in run.blocks("reward"))
            ),
        ),
        Claim(
            "stays above 1.8 in every such block average",
            "all bugs",
            lambda run: all(v > 1.8 for v in run.blocks("entropy")),
        ),
        Claim(
            "brought it below 0.5 before the reward reached 0.9",
            "fixed",
            lambda run: min(column(run, "entropy", slice(0, run.rollouts_to(0.9)))) < 0.5,
        ),
    ],
    "trl017-second-pass": [
        Claim(
            "`reward`, both per-function rewards, `loss` and\n`kl` are exactly 0 at every logged step"
            " of the first 60, and `clip_ratio/region_mean` stays at 0 too",
            "all bugs",
            lambda run: (
                len(run.steps) == 6
                and all(
                    v == 0.0
                    for k in ("reward", "answer_reward", "brevity_reward", "loss", "kl")
                    for v in column(run, k) + column(run, "clip_ratio/region_mean")
                )
            ),
        ),
    ],
    "trl114-kl-decode": [
        Claim(
            "over the first 60 steps the logged `reward` and both per-function rewards are exactly 0"
            " at every logged step, `loss` and `kl` are 0 as well",
            "all bugs",
            lambda run: (
                len(run.steps) == 6
                and all(
                    v == 0.0
                    for k in ("reward", "answer_reward", "brevity_reward", "loss", "kl")
                    for v in column(run, k)
                )
            ),
        ),
        Claim(
            "`entropy` stays at its first logged value, about 2.8",
            "all bugs",
            lambda run: (
                within(run.steps[0]["entropy"], 2.7, 2.9)
                and all(abs(v - run.steps[0]["entropy"]) < 0.01 for v in column(run, "entropy"))
            ),
        ),
    ],
    "trl-skillsbench-trio": [
        Claim(
            "At every logging step of the run the logged `reward` is 0, `frac_reward_zero_std` is 1"
            " and `grad_norm` is 0",
            "all bugs",
            lambda run: (
                len(run.steps) == 6
                and all(v == 0.0 for v in column(run, "reward") + column(run, "grad_norm"))
                and all(v == 1.0 for v in column(run, "frac_reward_zero_std"))
            ),
        ),
    ],
    "trl021-frozen-weights": [
        Claim(
            "`clip_ratio/region_mean` is exactly 0 at every logged step",
            "all bugs",
            lambda run: (
                len(run.steps) == 6 and all(v == 0.0 for v in column(run, "clip_ratio/region_mean"))
            ),
        ),
        Claim(
            "it was above 0 at every logged step",
            "fixed",
            lambda run: all(v > 0.0 for v in column(run, "clip_ratio/region_mean")),
        ),
        Claim(
            "should never exceed 1.1, yet it passes 1.1 by step 60",
            "all bugs",
            lambda run: run.steps[5]["reward"] > 1.1,
        ),
        Claim(
            "falls from above 3 to below 2.5",
            "all bugs",
            lambda run: run.steps[0]["length"] > 3 and run.steps[5]["length"] < 2.5,
        ),
        Claim(
            "only between 0.2 and 0.5 at step 60",
            "all bugs",
            lambda run: within(run.steps[5]["answer_reward"], 0.2, 0.5),
        ),
        Claim(
            "(between 0.5 and 0.8 in the earlier run)",
            "fixed",
            lambda run: within(run.steps[5]["answer_reward"], 0.5, 0.8),
        ),
    ],
    "rz-accum-kl": [
        Claim(
            "reached a mean reward above 0.6 over rollouts 31-40",
            "fixed",
            lambda run: block(run, "reward", 3) > 0.6,
        ),
        Claim(
            "stays below 0.12 for the first 50 rollouts",
            "all bugs",
            lambda run: len(run.steps) == 50 and max(run.blocks("reward")) < 0.12,
        ),
        Claim(
            "averages above 2.2 over every block of ten",
            "all bugs",
            lambda run: min(run.blocks("entropy")) > 2.2,
        ),
        Claim(
            "had fallen below 1.6 by rollouts 31-40",
            "fixed",
            lambda run: block(run, "entropy", 3) < 1.6,
        ),
    ],
    "rz-format-shift": [
        Claim(
            "reached a mean reward above 0.9 within 30 rollouts",
            "fixed",
            lambda run: within(run.rollouts_to(0.9), 1, 30),
        ),
        Claim(
            "print zero on every line of the first 50 rollouts",
            "all bugs",
            lambda run: (
                len(run.steps) == 50
                and all(s["reward"] == s["loss"] == s["grad_norm"] == 0 for s in run.steps)
            ),
        ),
        Claim(
            "averages between 6 and 8 over every block of ten rollouts",
            "all bugs",
            lambda run: all(6 <= v <= 8 for v in run.blocks("ratio_max")),
        ),
        Claim(
            "fell to 1.00 once the model had learned the answer",
            "fixed",
            lambda run: round(run.steps[-1]["ratio_max"], 2) == 1.00,
        ),
    ],
    "trl017-tempered-weights": [
        Claim(
            "should never exceed 1.1, yet it passes 1.1 by step 60",
            "all bugs",
            lambda run: len(run.steps) == 6 and run.steps[5]["reward"] > 1.1,
        ),
        Claim(
            "within the first 30 steps (`completions/mean_length` falls from above 3 to below 2.5)",
            "all bugs",
            lambda run: run.steps[0]["length"] > 3 and run.steps[2]["length"] < 2.5,
        ),
        Claim("`kl` is above 1.3 at step 60", "all bugs", lambda run: run.steps[5]["kl"] > 1.3),
        Claim(
            "kept completions above 3.4 tokens and had a `kl` below 1.3 at step 60",
            "fixed",
            lambda run: all(v > 3.4 for v in column(run, "length")) and run.steps[5]["kl"] < 1.3,
        ),
    ],
    # 150-step claims checked on the 60 steps logged_runs records
    "user-flat-grad": [
        Claim(
            "Every log line shows `'grad_norm': '0'` and `'kl': '0'`",
            "all bugs",
            lambda run: all(s["grad_norm"] == 0 and s["kl"] == 0 for s in run.steps),
        ),
        Claim(
            "`reward` stays between 0.08 and\n0.12 from the first line to the last",
            "all bugs",
            lambda run: all(within(v, 0.08, 0.12) for v in column(run, "reward")),
        ),
        Claim(
            "`rewards/answer_reward/mean` is about 0.05-0.08",
            "all bugs",
            lambda run: all(within(v, 0.05, 0.08) for v in column(run, "answer_reward")),
        ),
    ],
    "user-loo-clip": [
        Claim(
            "`reward` is about 0.1 on the first line (step 10)",
            "all bugs",
            lambda run: within(run.steps[0]["reward"], 0.09, 0.12),
        ),
        Claim(
            "below 0.08 from step 20 on and between 0.03\nand 0.08 until the end",
            "all bugs",
            lambda run: all(within(v, 0.03, 0.08) for v in column(run, "reward")[1:]),
        ),
        Claim(
            "`grad_norm` stays below 0.25",
            "all bugs",
            lambda run: all(within(v, 0.0, 0.25) for v in column(run, "grad_norm")),
        ),
    ],
    "user-gspo-filter": [
        Claim(
            "`loss` is `'0'` on every line, although `grad_norm` is not",
            "all bugs",
            lambda run: all(s["loss"] == 0 and s["grad_norm"] > 0 for s in run.steps),
        ),
        Claim(
            "`reward` stays between 0.09 and\n0.15 over the first 60 steps",
            "all bugs",
            lambda run: (
                len(run.steps) == 6 and all(within(v, 0.09, 0.15) for v in column(run, "reward"))
            ),
        ),
    ],
}
SUITE = ["rz-succ-temperature"]  # a task whose buggy run dies at once: the cheapest to run
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


def settings(spec) -> set[str]:
    """Numbers an instruction may state that are settings of the run, not measured figures."""
    values = {str(v) for v in spec.train.values() if isinstance(v, int | float)}
    values |= {"0", "1", "2", "3", "4", "7", "10", "150"}  # counts, the format task's "7"
    values |= {str(w) for w in TRL_REWARD_WEIGHTS}  # train_grpo.py's reward_weights
    if spec.trl_version:  # "TRL 0.17's defaults"
        values.add(spec.trl_version.rsplit(".", 1)[0])
    return values


def logged_runs(spec) -> dict[str, symptoms.Run]:
    """The task's script run fixed and with every bug, cut as `symptoms.measure_task` cuts it."""
    trl = spec.family in ("trl", "user")  # TRL's Trainer runs train_grpo.py
    lines = symptoms.TRL_LOG_LINES if trl else symptoms.ROLLOUTS
    script = "train_grpo.py" if trl else "train.py"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    python = agent_env("no-skill", spec.family, fork_version(spec)) / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix=f"grpo-figures-{spec.id}-") as scratch:
        built = build_task(spec, Path(scratch))
        workspace = built / "environment" / "workspace"
        fixed = Path(scratch) / "fixed"
        shutil.copytree(workspace, fixed, symlinks=True)
        shutil.copytree(built / "solution" / "files", fixed, dirs_exist_ok=True)
        return {
            "fixed": symptoms.train(fixed, lines, script, env, python),
            "all bugs": symptoms.train(workspace, lines, script, env, python),
        }


def _checked() -> list[str]:
    if os.environ.get("GRPO_FIGURES") == "all":
        return sorted(CLAIMS)
    return SUITE


@pytest.mark.parametrize("task_id", sorted(CLAIMS))
def test_every_figure_of_an_instruction_is_a_quoted_claim_or_a_setting(task_id):
    spec = TASKS[task_id]
    text = " ".join(spec.instruction.split())
    quoted = " ".join(" ".join(claim.quote.split()) for claim in CLAIMS[task_id])
    for claim in CLAIMS[task_id]:
        assert " ".join(claim.quote.split()) in text, f"{task_id}: {claim.quote!r} not stated"
    unchecked = [
        n
        for n in NUMBER.findall(text)
        if n not in NUMBER.findall(quoted) and n not in settings(spec)
    ]
    assert not unchecked, f"{task_id}: figures {unchecked} have no claim in this test"


@pytest.mark.parametrize("task_id", _checked())
def test_every_claimed_figure_is_in_the_logged_run(task_id):
    runs = logged_runs(TASKS[task_id])
    failed = [
        f"{claim.quote!r} ({claim.run} run)"
        for claim in CLAIMS[task_id]
        if not claim.holds(runs[claim.run])
    ]
    assert not failed, f"{task_id}: the logged run does not show {failed}"


def test_a_figure_the_run_does_not_reproduce_fails():
    run = symptoms.Run(steps=[{"reward": 0.0, "loss": 0.0, "length": 2.0, "grad_norm": 0.0}])
    claim = next(c for c in CLAIMS["rz-format-stop"] if "`grad_norm` prints 0.0000" in c.quote)
    assert claim.holds(run)
    run.steps[0]["grad_norm"] = 1e-6
    assert not claim.holds(run)
