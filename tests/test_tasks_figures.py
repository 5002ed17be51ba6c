"""Every figure an instruction states is one the agent's own run reproduces.

A task's training script pins its threads and seed, and its instruction states figures as ranges
wide enough for another machine's float rounding. Each claim below quotes the instruction and
checks the quoted figure against the logged run (`task_harness/symptoms.py`: the script run
fixed, the earlier run a user compares with, and with every bug, the run they see now; a few
claims read a variant: the script with one setting changed, or one update of a fork's loss on a
hand-made batch). Every number of an instruction is a quoted claim or a setting of the run. The
suite checks a few tasks (each run costs a training run); `GRPO_FIGURES=all` checks every task
that has claims.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

import task_harness
from task_harness import symptoms
from task_harness.agent_env import agent_env
from task_harness.build import build_task, fork_version
from task_harness.spec import TRL_REWARD_WEIGHTS, load_tasks

TASKS = {spec.id: spec for spec in load_tasks()}


@dataclass(frozen=True)
class Claim:
    quote: str  # the instruction's words, figure included
    # "fixed" (the earlier run) or "all bugs" (the run now); either with a setting of the script
    # changed ("all bugs, beta=0.0"), or its fork's loss on a hand-made batch ("fixed, hand-made
    # batch"): see `logged_runs`
    run: str
    holds: Callable[[symptoms.Run], bool]


def block(run: symptoms.Run, key: str, index: int) -> float:
    """Mean of `key` over rollouts 10 * index + 1 .. 10 * index + 10."""
    return run.blocks(key)[index]


def column(run: symptoms.Run, key: str, lines: slice = slice(None)) -> list[float]:
    return [step[key] for step in run.steps[lines]]


def within(value: float | None, low: float, high: float) -> bool:
    return value is not None and low <= value <= high


def at_step(run: symptoms.Run, key: str, step: int) -> float | None:
    """`key` on the log line of `step` (a TRL run logs every 10 steps: line 1 is step 10)."""
    line = step // 10 - 1
    return run.steps[line].get(key) if 0 <= line < len(run.steps) else None


def _half_digit(figure: str) -> float:
    """Half a unit of the last digit `figure` is stated with ("0.69": 0.005; "2": 0.5)."""
    return 0.5 * 10 ** -len(figure.partition(".")[2]) + 1e-12


def reads(value: float | None, figure: str) -> bool:
    """Whether `value`, rounded to the digits of `figure` ("0.69", "about 2"), reads `figure`."""
    return value is not None and abs(value - float(figure)) <= _half_digit(figure)


def reaches(values: list[float], figure: str) -> bool:
    """Whether one of `values`, rounded to the digits of `figure`, reads `figure` or more."""
    return any(v >= float(figure) - _half_digit(figure) for v in values)


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
    # 150-step claims: checked on the whole run's 15 log lines (LOG_LINES) where they read past
    # step 60
    "user-flat-grad": [
        Claim(
            "Every log line shows `'grad_norm': '0'` and `'kl': '0'`",
            "all bugs",
            lambda run: all(s["grad_norm"] == 0 and s["kl"] == 0 for s in run.steps),
        ),
        Claim(
            "`reward` stays between 0.08 and\n0.12 from the first line to the last",
            "all bugs",
            lambda run: (
                len(run.steps) == 15 and all(within(v, 0.08, 0.12) for v in column(run, "reward"))
            ),
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
            lambda run: (
                len(run.steps) == 15
                and all(within(v, 0.03, 0.08) for v in column(run, "reward")[1:])
            ),
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
    "trl-kl-reference": [
        Claim(
            "With\n`beta=0.0` the same script trains",
            "all bugs, beta=0.0",
            lambda run: (
                not run.crash
                and len(run.steps) == symptoms.TRL_LOG_LINES
                and all(v > 0 for v in column(run, "grad_norm"))
                and run.steps[-1]["reward"] > run.steps[0]["reward"]
            ),
        ),
        Claim(
            "the run dies in its very first step:\n"
            "`TypeError: 'NoneType' object is not subscriptable`",
            "all bugs",
            lambda run: (
                not run.steps and run.crash == "TypeError: 'NoneType' object is not subscriptable"
            ),
        ),
    ],
    "trl-never-stops": [
        Claim(
            "the run dies in its very first step (0/150): `IndexError: list index out of\nrange`",
            "all bugs",
            lambda run: not run.steps and run.crash == "IndexError: list index out of range",
        ),
        Claim(
            "`rewards/answer_reward/mean` rose from 0.06 at step 10 to 0.69 at step 150",
            "fixed",
            lambda run: (
                reads(at_step(run, "answer_reward", 10), "0.06")
                and reads(at_step(run, "answer_reward", 150), "0.69")
            ),
        ),
        Claim(
            "`completions/mean_length` fell from 3.5 to 2.1 tokens by step 60 (one word and the end"
            " of the\nanswer) and ended at 2.6",
            "fixed",
            lambda run: (
                reads(at_step(run, "length", 10), "3.5")
                and reads(at_step(run, "length", 60), "2.1")
                and reads(at_step(run, "length", 150), "2.6")
            ),
        ),
    ],
    "trl-ratio-aggregation": [
        Claim(
            "`clip_ratio/region_mean`, `clip_ratio/low_mean` and\n`clip_ratio/high_mean` are"
            " exactly 0 at every logging step of the 150",
            "all bugs",
            lambda run: (
                len(run.steps) == 15
                and all(
                    v == 0.0
                    for k in (
                        "clip_ratio/region_mean",
                        "clip_ratio/low_mean",
                        "clip_ratio/high_mean",
                    )
                    for v in column(run, k)
                )
            ),
        ),
        Claim(
            "a `clip_ratio/region_mean` between 0.01 and 0.055\nover the first 110 steps",
            "fixed",
            lambda run: all(
                within(v, 0.01, 0.055) for v in column(run, "clip_ratio/region_mean", slice(11))
            ),
        ),
        Claim(
            "`rewards/answer_reward/mean` is 0.77 at step 150",
            "all bugs",
            lambda run: reads(at_step(run, "answer_reward", 150), "0.77"),
        ),
        Claim(
            "against 0.91\nfor the earlier run",
            "fixed",
            lambda run: reads(at_step(run, "answer_reward", 150), "0.91"),
        ),
        Claim(
            "one of 8 tokens and one of 2: the long answer is pushed down four times as hard as the"
            "\nshort one",
            "all bugs, hand-made batch",
            lambda run: (
                column(run, "tokens") == [8, 2]
                and run.steps[1]["push"] > 0
                and math.isclose(run.steps[0]["push"], 4 * run.steps[1]["push"], rel_tol=1e-4)
            ),
        ),
        Claim(
            "pushes each\nanswer equally, whatever its length",
            "fixed, hand-made batch",
            lambda run: (
                column(run, "tokens") == [8, 2]
                and run.steps[1]["push"] > 0
                and math.isclose(run.steps[0]["push"], run.steps[1]["push"], rel_tol=1e-4)
            ),
        ),
    ],
    "trl-reward-weights-clipping": [
        Claim(
            "by step 40 `completions/mean_length` is down to 1.8 tokens",
            "all bugs",
            lambda run: reads(at_step(run, "length", 40), "1.8"),
        ),
        Claim(
            "`rewards/brevity_reward/mean` reaches 0.98 by step 90",
            "all bugs",
            lambda run: reaches(column(run, "brevity_reward", slice(9)), "0.98"),
        ),
        Claim(
            "`rewards/answer_reward/mean` stays between 0.45 and 0.75 over the last 60 of the 150"
            " steps",
            "all bugs",
            lambda run: (
                len(run.steps) == 15
                and all(within(v, 0.45, 0.75) for v in column(run, "answer_reward", slice(9, 15)))
            ),
        ),
        Claim(
            "reached an answer reward of 0.95 by step\n110, with completions of about 4 tokens",
            "fixed",
            lambda run: (
                reaches(column(run, "answer_reward", slice(11)), "0.95")
                and all(reads(v, "4") for v in column(run, "length", slice(11)))
            ),
        ),
        Claim(
            "`grad_norm` jumps to 1.9 at step 50 and 1.8 at step 120",
            "all bugs",
            lambda run: (
                reads(at_step(run, "grad_norm", 50), "1.9")
                and reads(at_step(run, "grad_norm", 120), "1.8")
            ),
        ),
        Claim(
            "the\nearlier run stayed below 0.9 until its last line",
            "fixed",
            lambda run: len(run.steps) == 15 and max(column(run, "grad_norm", slice(14))) < 0.9,
        ),
    ],
    "user-long-answers": [
        Claim(
            "Over the 150 steps `reward` stays between 0.08 and 0.13",
            "all bugs",
            lambda run: (
                len(run.steps) == 15 and all(within(v, 0.08, 0.13) for v in column(run, "reward"))
            ),
        ),
        Claim(
            "`rewards/answer_reward/mean` between\n0.04 and 0.10",
            "all bugs",
            lambda run: all(within(v, 0.04, 0.10) for v in column(run, "answer_reward")),
        ),
        Claim(
            "`completions/mean_length` between 3.6 and 3.9 tokens",
            "all bugs",
            lambda run: all(within(v, 3.6, 3.9) for v in column(run, "length")),
        ),
        Claim(
            "on some lines exactly 0 (steps 70 and 80)",
            "all bugs",
            lambda run: (
                [10 * i for i, s in enumerate(run.steps, 1) if s["grad_norm"] == 0] == [70, 80]
            ),
        ),
    ],
    "user-ref-anchor": [
        Claim(
            "`kl` is about 0.02 on the first line (step 10) and exactly `'0'` on every line after"
            " it, for the\nwhole run",
            "all bugs",
            lambda run: (
                len(run.steps) == 15
                and reads(at_step(run, "kl", 10), "0.02")
                and all(v == 0 for v in column(run, "kl", slice(1, None)))
            ),
        ),
        Claim(
            "`grad_norm` between 0.5 and 1.5",
            "all bugs",
            lambda run: all(within(v, 0.5, 1.5) for v in column(run, "grad_norm")),
        ),
        Claim(
            "`reward` from\nabout 0.14 to 0.88",
            "all bugs",
            lambda run: (
                reads(at_step(run, "reward", 10), "0.14")
                and reads(at_step(run, "reward", 150), "0.88")
            ),
        ),
    ],
    "user114-kl-climb": [
        Claim(
            "`kl` climbs from about 0.1 at step 10 to above 1 by step 30 and stays between 1.4 and"
            " 2.6 from\nstep 40 to the end",
            "all bugs",
            lambda run: (
                len(run.steps) == 15
                and reads(at_step(run, "kl", 10), "0.1")
                and max(column(run, "kl", slice(3))) > 1
                and all(within(v, 1.4, 2.6) for v in column(run, "kl", slice(3, None)))
            ),
        ),
        Claim(
            "`loss` is negative on every line, below -0.1 from step 40 on",
            "all bugs",
            lambda run: (
                all(v < 0 for v in column(run, "loss"))
                and all(v < -0.1 for v in column(run, "loss", slice(3, None)))
            ),
        ),
        Claim(
            "`reward`\nnever gets above 0.32",
            "all bugs",
            lambda run: all(v <= 0.32 for v in column(run, "reward")),
        ),
        Claim(
            "from step 70 on `grad_norm` is below 0.01",
            "all bugs",
            lambda run: all(v < 0.01 for v in column(run, "grad_norm", slice(6, None))),
        ),
    ],
}
# Tasks whose claims read a 150-step run past step 60, to its end: all 15 of its log lines, where
# the others' runs are cut as `symptoms.measure_task` cuts them (`symptoms.TRL_LOG_LINES`, 6).
LOG_LINES = {
    task_id: 15
    for task_id in (
        "user-flat-grad",
        "user-loo-clip",
        "trl-never-stops",
        "trl-ratio-aggregation",
        "trl-reward-weights-clipping",
        "user-long-answers",
        "user-ref-anchor",
        "user114-kl-climb",
    )
}
SUITE = ["rz-succ-temperature"]  # a task whose buggy run dies at once: the cheapest to run
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")


# The user family's project config: `TRAINING`, the settings every run of the project makes.
USER_CONFIG = Path(task_harness.__file__).parent / "trainers" / "mygrpo" / "mygrpo" / "config.py"


def user_training(spec) -> dict:
    """`mygrpo/config.py`'s `TRAINING = dict(...)` as the task's setup patches leave it."""
    text = USER_CONFIG.read_text()
    for patch in spec.patches:
        if patch.kind == "setup" and patch.mutant.file == "mygrpo/config.py":
            text = patch.mutant.apply_to_text(text)
    (call,) = (
        node.value
        for node in ast.parse(text).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "TRAINING"
    )
    return {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}


def settings(spec) -> set[str]:
    """Numbers an instruction may state that are settings of the run, not measured figures."""
    train = (user_training(spec) if spec.family == "user" else {}) | spec.train
    values = {str(v) for v in train.values() if isinstance(v, int | float)}
    values |= {"0", "1", "2", "3", "4", "7", "10", "150"}  # counts, the format task's "7"
    values |= {str(w) for w in TRL_REWARD_WEIGHTS}  # train_grpo.py's reward_weights
    if spec.trl_version:  # "TRL 0.17's defaults"
        values.add(spec.trl_version.rsplit(".", 1)[0])
    return values


# One update of a trl fork's loss (TRL 1.16's `_compute_loss`) on a hand-made batch: two wrong
# answers (advantage -1) of the lengths given as arguments, one prompt. It prints, per answer, its
# length and its push: d loss / d log p(answer), the sum of the gradient over its tokens (> 0: the
# update lowers the answer's probability).
HAND_MADE_UPDATE = """
import json, sys
from pathlib import Path

HERE = Path.cwd()
sys.path[:0] = [str(HERE / "trl"), str(HERE)]  # the fork, as train_grpo.py imports it
import torch
from reward_fn import answer_reward, make_dataset
from transformers import PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

torch.set_num_threads(1)
lengths = [int(n) for n in sys.argv[1:]]
width = max(lengths)
config = GRPOConfig(
    output_dir=str(HERE / "runs"), use_cpu=True, bf16=False, report_to="none", beta=0.0,
    loss_type="grpo", per_device_train_batch_size=len(lengths), num_generations=len(lengths),
    max_completion_length=width,
)
tokenizer = PreTrainedTokenizerFast.from_pretrained(HERE / "model")
trainer = GRPOTrainer(
    model=str(HERE / "model"), reward_funcs=[answer_reward], args=config,
    train_dataset=make_dataset(), processing_class=tokenizer,
)
trainer.current_gradient_accumulation_steps = 1  # set by train()
kept, score = {}, trainer._get_per_token_logps_and_entropies

def keep(*args, **kwargs):
    out = score(*args, **kwargs)
    kept["logps"] = out[0]
    return out

trainer._get_per_token_logps_and_entropies = keep
prompt = tokenizer(["3 ="] * len(lengths), return_tensors="pt")  # its answer is 4
mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
trainer.model.train()
loss = trainer._compute_loss(trainer.model, dict(
    prompt_ids=prompt["input_ids"], prompt_mask=prompt["attention_mask"],
    completion_ids=torch.full(mask.shape, tokenizer.convert_tokens_to_ids("7")),
    completion_mask=mask, advantages=-torch.ones(len(lengths)),
))
(grad,) = torch.autograd.grad(loss, kept["logps"])
pushes = (grad * mask).sum(-1).tolist()
print(json.dumps([{"tokens": n, "push": p} for n, p in zip(lengths, pushes)]))
"""
HAND_MADE_TOKENS = (8, 2)


def _hand_made_update(tree: Path, env: dict, python: Path) -> symptoms.Run:
    args = [str(python), "-c", HAND_MADE_UPDATE, *map(str, HAND_MADE_TOKENS)]
    done = subprocess.run(
        args, cwd=tree, env=env, capture_output=True, text=True, timeout=symptoms.RUN_TIMEOUT
    )
    if done.returncode:
        return symptoms.Run(crash=(done.stderr.strip().splitlines() or ["no output"])[-1])
    return symptoms.Run(steps=json.loads(done.stdout.strip().splitlines()[-1]))


def _with_setting(tree: Path, spec, setting: str, copy: Path) -> Path:
    """A copy of `tree` whose script makes `setting` ("beta=0.0") on top of the task's own."""
    name, _, value = setting.partition("=")
    shutil.copytree(tree, copy, symlinks=True)
    script = copy / "train_grpo.py"
    text = script.read_text()
    assert text.count(repr(spec.train)) == 1, f"{spec.id}: no settings line in {script.name}"
    changed = spec.train | {name: ast.literal_eval(value)}
    script.write_text(text.replace(repr(spec.train), repr(changed)))
    return copy


def logged_runs(spec, names: Iterable[str] = ("fixed", "all bugs")) -> dict[str, symptoms.Run]:
    """The task's runs `names`: its script run fixed and with every bug, cut as
    `symptoms.measure_task` cuts it (or after `LOG_LINES[spec.id]` lines); either of them with a
    setting changed ("all bugs, beta=0.0"); a trl fork's loss on a hand-made batch ("fixed,
    hand-made batch")."""
    trl = spec.family in ("trl", "user")  # TRL's Trainer runs train_grpo.py
    lines = LOG_LINES.get(spec.id, symptoms.TRL_LOG_LINES if trl else symptoms.ROLLOUTS)
    script = "train_grpo.py" if trl else "train.py"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    python = agent_env("no-skill", spec.family, fork_version(spec)) / "bin" / "python"
    runs = {}
    with tempfile.TemporaryDirectory(prefix=f"grpo-figures-{spec.id}-") as scratch:
        built = build_task(spec, Path(scratch))
        workspace = built / "environment" / "workspace"
        fixed = Path(scratch) / "fixed"
        shutil.copytree(workspace, fixed, symlinks=True)
        shutil.copytree(built / "solution" / "files", fixed, dirs_exist_ok=True)
        trees = {"fixed": fixed, "all bugs": workspace}
        for index, name in enumerate(names):
            tree, _, variant = name.partition(", ")
            if variant == "hand-made batch":
                runs[name] = _hand_made_update(trees[tree], env, python)
                continue
            path = trees[tree]
            if variant:
                path = _with_setting(path, spec, variant, Path(scratch) / f"variant-{index}")
            runs[name] = symptoms.train(path, lines, script, env, python)
    return runs


def _checked() -> list[str]:
    if os.environ.get("GRPO_FIGURES") == "all":
        return sorted(CLAIMS)
    return SUITE


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_every_figure_of_an_instruction_is_a_quoted_claim_or_a_setting(task_id):
    """Every task's, with claims or not: a task whose instruction states a figure has claims."""
    spec = TASKS[task_id]
    claims = CLAIMS.get(task_id, [])
    text = " ".join(spec.instruction.split())
    quoted = " ".join(" ".join(claim.quote.split()) for claim in claims)
    for claim in claims:
        assert " ".join(claim.quote.split()) in text, f"{task_id}: {claim.quote!r} not stated"
    unchecked = [
        n
        for n in NUMBER.findall(text)
        if n not in NUMBER.findall(quoted) and n not in settings(spec)
    ]
    assert not unchecked, f"{task_id}: figures {unchecked} have no claim in this test"


@pytest.mark.parametrize("task_id", _checked())
def test_every_claimed_figure_is_in_the_logged_run(task_id):
    runs = logged_runs(TASKS[task_id], dict.fromkeys(claim.run for claim in CLAIMS[task_id]))
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


def test_a_stated_figure_is_read_to_its_own_digits():
    assert reads(0.8331, "0.83") and reads(0.1379, "0.14") and reads(1.83, "1.8")
    assert not reads(0.8351, "0.83") and not reads(2.624, "2") and not reads(None, "2")
    assert reaches([0.5, 0.9794], "0.98") and not reaches([0.9749], "0.98")
    run = symptoms.Run(steps=[{"kl": 0.021}] + [{"kl": 0.0}] * 14, block_size=1)
    claim = CLAIMS["user-ref-anchor"][0]
    assert claim.holds(run)
    run.steps[9]["kl"] = 1e-6
    assert not claim.holds(run)
    assert not claim.holds(symptoms.Run(steps=run.steps[:6], block_size=1))
