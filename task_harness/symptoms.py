"""What a user sees when a task's training script runs: measured, compared, put in words.

A task's script (rlzero's `train.py`, one line per rollout; a TRL fork's `train_grpo.py`, one
logged dict per ten steps) runs fixed, with every bug, and with each bug alone (`measure_task`,
behind `grpo-check tasks symptoms`). `differences` names the log columns in which a run visibly
departs from the fixed one; `tasks generate` redraws a bug with none, and writes its instruction
from `describe`. A run is cut after `ROLLOUTS` log lines (a fixed rlzero run usually stops
earlier, at its target).
"""

from __future__ import annotations

import ast
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROLLOUTS = 50
TRL_LOG_LINES = 6  # 60 steps of train_grpo.py (it logs every 10), about 25 s on 2 cores
BLOCK = 10
RUN_TIMEOUT = 300
LINE = re.compile(r"^step\s+(\d+)\s+reward (\S+)\s+loss (\S+)\s+length (\S+)(.*)$")
STAT = re.compile(r"(\w+) (\S+)")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b")  # a traceback's last
TRL_LINE = re.compile(r"^\{.*'loss'.*\}$")  # transformers' Trainer prints its logs as dicts
# TRL's logged columns a user reads, under the names rlzero's log uses where they mean the same.
TRL_COLUMNS = {
    "reward": "reward",
    "loss": "loss",
    "completions/mean_length": "length",
    "kl": "kl",
    "entropy": "entropy",
    "grad_norm": "grad_norm",
    "clip_ratio/region_mean": "clip_ratio/region_mean",
    # Read by instructions' figures (tests/test_tasks_figures.py), compared by nothing here.
    "frac_reward_zero_std": "frac_reward_zero_std",
    "clip_ratio/low_mean": "clip_ratio/low_mean",
    "clip_ratio/high_mean": "clip_ratio/high_mean",
    "rewards/answer_reward/mean": "answer_reward",
    "rewards/brevity_reward/mean": "brevity_reward",
}
# How far apart two runs must be for a user to notice (block means of ten rollouts).
REWARD_GAP, LENGTH_GAP, STAT_FACTOR = 0.15, 0.5, 1.5


@dataclass
class Run:
    """The log of one training run: one dict per rollout line, and how it ended."""

    steps: list[dict[str, float]] = field(default_factory=list)
    crash: str = ""  # the last line of the traceback, if the run died
    block_size: int = BLOCK  # log lines per block: 10 rollouts, or 1 (TRL logs 10-step means)

    def block(self, key: str, start: int) -> float | None:
        """Mean of `key` over log lines start+1 .. start+block_size (None: no such lines)."""
        values = [s[key] for s in self.steps[start : start + self.block_size] if key in s]
        return sum(values) / len(values) if values else None

    def blocks(self, key: str) -> list[float]:
        starts = range(0, len(self.steps), self.block_size)
        return [v for i in starts if (v := self.block(key, i)) is not None]

    @property
    def nan_loss(self) -> bool:
        return any(math.isnan(s["loss"]) for s in self.steps)

    def rollouts_to(self, target: float) -> int | None:
        """The rollout at which the mean reward of the last ten first reaches `target`."""
        width = self.block_size
        for end in range(width, len(self.steps) + 1):
            if sum(s["reward"] for s in self.steps[end - width : end]) / width >= target:
                return end
        return None


def _trl_step(line: str) -> dict[str, float] | None:
    try:
        logged = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return None
    return {ours: float(logged[theirs]) for theirs, ours in TRL_COLUMNS.items() if theirs in logged}


def is_log_line(line: str) -> bool:
    line = line.strip()
    return bool(LINE.match(line) or (TRL_LINE.match(line) and "train_runtime" not in line))


def parse(stdout: str, stderr: str, returncode: int) -> Run:
    run = Run()
    for line in stdout.splitlines():
        line = line.strip()
        if TRL_LINE.match(line) and "train_runtime" not in line:
            step = _trl_step(line)
            if step:
                run.steps.append(step)
                run.block_size = 1
            continue
        match = LINE.match(line)
        if match:
            step = {
                "reward": float(match[2]),
                "loss": float(match[3]),
                "length": float(match[4]),
            }
            step |= {name: float(value) for name, value in STAT.findall(match[5])}
            run.steps.append(step)
    if returncode not in (0, -9):  # -9: cut by us after ROLLOUTS lines
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        raised = [line for line in lines if EXCEPTION_LINE.match(line)]
        run.crash = (raised or lines or [f"exit status {returncode}"])[-1]
    return run


def train(
    workspace: Path,
    rollouts: int = ROLLOUTS,
    script: str = "train.py",
    env: dict | None = None,
    python: Path | str = sys.executable,
) -> Run:
    """Run `python script` in `workspace` until it ends or has logged `rollouts` lines."""
    process = subprocess.Popen(
        [str(python), script],
        cwd=workspace,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines, logged = [], 0
    try:
        for line in process.stdout:
            lines.append(line)
            logged += is_log_line(line)
            if logged >= rollouts:
                process.kill()
                break
        stderr = process.stderr.read()
        process.wait(timeout=RUN_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return parse("".join(lines), stderr, process.returncode)


def _apart(a: float | None, b: float | None, gap: float) -> bool:
    return a is not None and b is not None and abs(a - b) >= gap


def _factor_apart(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    low, high = sorted((abs(a), abs(b)))
    return high >= STAT_FACTOR * max(low, 1e-3) and high - low >= 0.05


# The columns compared, each with how far apart two runs' block means must be: an absolute gap,
# or a factor (on the distance from 1 for a ratio).
GAPS = {"reward": REWARD_GAP, "length": LENGTH_GAP}
FACTORS = {
    "ratio_max": 1.0,
    "kl": 0.0,
    "entropy": 0.0,
    "grad_norm": 0.0,
    "clip_ratio/region_mean": 0.0,
}


def _pairs(run: Run, fixed: Run, key: str) -> list[tuple[float, float]]:
    """(run, fixed) block means of `key` over the blocks both runs logged."""
    width = min(len(run.steps), len(fixed.steps))
    pairs = [(run.block(key, i), fixed.block(key, i)) for i in range(0, width, run.block_size)]
    return [(a, b) for a, b in pairs if a is not None and b is not None]


def differences(run: Run, fixed: Run, target: float) -> list[str]:
    """The log columns in which `run` visibly differs from `fixed` (empty: it does not)."""
    found = []
    if run.crash and not fixed.crash:
        found.append("crash")
    if run.nan_loss and not fixed.nan_loss:
        found.append("nan")
    reached, reached_fixed = run.rollouts_to(target), fixed.rollouts_to(target)
    if reached_fixed and (reached is None or reached >= 1.5 * reached_fixed):
        found.append("target")
    for key, gap in GAPS.items():
        if any(abs(a - b) >= gap for a, b in _pairs(run, fixed, key)):
            found.append(key)
    for key, offset in FACTORS.items():
        if any(_factor_apart(a - offset, b - offset) for a, b in _pairs(run, fixed, key)):
            found.append(key)
    return found


def summary(run: Run, fixed: Run, target: float) -> str:
    """One line: each visibly different column, as the run's block means against the fixed
    run's (`reward 0.09-0.11 vs 0.12-0.98`)."""
    parts = []
    for key in differences(run, fixed, target):
        if key == "crash":
            parts.append(f"dies after {len(run.steps)} log lines: {run.crash[:120]}")
        elif key == "nan":
            parts.append("loss nan")
        elif key == "target":
            where = fixed.rollouts_to(target)
            parts.append(
                f"mean reward {target} not reached by line {len(run.steps)} (fixed: {where})"
            )
        else:
            ours, theirs = run.blocks(key), fixed.blocks(key)
            parts.append(f"{key} {summary_span(ours)} vs {summary_span(theirs)}")
    return "; ".join(parts) or "no visible difference"


def summary_span(values: list[float]) -> str:
    """`0.09-0.11`, or one figure when they round alike; "none" for no values."""
    if not values:
        return "none"
    low, high = min(values), max(values)
    return _num(low) if _num(low) == _num(high) else f"{_num(low)}-{_num(high)}"


def _num(value: float) -> str:
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def describe(run: Run, fixed: Run, target: float) -> list[str]:
    """Sentences a user would write about `run`, next to the earlier `fixed` run of the same
    configuration; never a word about the code."""
    seen = differences(run, fixed, target)
    sentences = []
    reached_fixed = fixed.rollouts_to(target)
    if reached_fixed:
        sentences.append(
            f"Before the last refactor this run reached a mean reward of {target} "
            f"(over ten rollouts) by rollout {reached_fixed}."
        )
    if "nan" in seen:
        first = next(i for i, s in enumerate(run.steps, 1) if math.isnan(s["loss"]))
        sentences.append(f"Now log line {first} already shows `loss +nan`.")
    if "crash" in seen:
        where = f"after {len(run.steps)} rollouts" if run.steps else "before its first log line"
        sentences.append(f"The run dies {where} with `{run.crash[:160]}`.")
    rewards = run.blocks("reward")
    if ("reward" in seen or "target" in seen) and rewards and not run.crash:
        spread = f"between {_num(min(rewards))} and {_num(max(rewards))}"
        sentences.append(
            f"Now the mean reward over each block of ten rollouts stays {spread} for the first "
            f"{len(run.steps)} rollouts."
        )
    for stat, name in (("ratio_max", "`ratio_max`, the largest importance ratio of a step,"),):
        if stat in seen:
            ours, theirs = run.blocks(stat), fixed.blocks(stat)
            sentences.append(
                f"{name} averages {_num(ours[0])} over the first ten rollouts; the earlier run "
                f"printed {_num(theirs[0])}."
            )
    if "kl" in seen:
        ours, theirs = run.blocks("kl"), fixed.blocks("kl")
        sentences.append(
            f"`kl` averages {_num(ours[0])} over the first ten rollouts against {_num(theirs[0])} "
            "in the earlier run."
        )
    if "length" in seen:
        ours, theirs = run.blocks("length"), fixed.blocks("length")
        sentences.append(
            f"Completions average {_num(ours[0])} tokens over the first ten rollouts, against "
            f"{_num(theirs[0])} before."
        )
    return sentences


def measure_task(spec, lines: int | None = None) -> dict[str, Run]:
    """The task's training script run fixed ("fixed"), with every bug ("all bugs") and with each
    bug alone (under its id), each cut after `lines` log lines."""
    from task_harness.agent_env import agent_env
    from task_harness.build import build_task, fork_version

    trl = spec.family == "trl"
    logs_dicts = spec.family in ("trl", "user")  # TRL's Trainer runs train_grpo.py
    lines = lines or (TRL_LOG_LINES if logs_dicts else ROLLOUTS)
    script = "train_grpo.py" if logs_dicts else "train.py"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    # The Python the agent's user runs the script with: the task's own stack (an older fork's
    # dependencies included), and no GRPO library but the fork.
    python = agent_env("no-skill", spec.family, fork_version(spec)) / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix=f"grpo-symptoms-{spec.id}-") as scratch:
        built = build_task(spec, Path(scratch))
        workspace = built / "environment" / "workspace"
        fixed = Path(scratch) / "fixed"
        shutil.copytree(workspace, fixed, symlinks=True)
        shutil.copytree(built / "solution" / "files", fixed, dirs_exist_ok=True)
        runs = {
            "fixed": train(fixed, lines, script, env, python),
            "all bugs": train(workspace, lines, script, env, python),
        }
        bugs = [patch for patch in spec.patches if patch.kind == "bug"]
        if len(bugs) == 1:  # the bug alone is the workspace as built: its run is "all bugs"
            runs[bugs[0].id] = runs["all bugs"]
            return runs
        for patch in bugs:
            alone = Path(scratch) / f"alone-{patch.id}"
            shutil.copytree(fixed, alone, symlinks=True)
            patch.mutant.apply(alone / "trl" if trl else alone)
            runs[patch.id] = train(alone, lines, script, env, python)
    return runs
