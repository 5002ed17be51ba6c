"""What a user sees when an rlzero task's training script runs: measured, compared, put in words.

`tasks generate` runs `python train.py` of the task fixed, with all its bugs, and with each bug
alone; a bug whose run cannot be told from the fixed one by its log (`visible`) is redrawn, and
the instruction reports what the run with every bug shows next to the fixed run (`describe`).
A run is cut after `ROLLOUTS` log lines (the fixed one usually stops earlier, at its target).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROLLOUTS = 50
BLOCK = 10
RUN_TIMEOUT = 300
LINE = re.compile(r"^step\s+(\d+)\s+reward (\S+)\s+loss (\S+)\s+length (\S+)(.*)$")
STAT = re.compile(r"(\w+) (\S+)")
# How far apart two runs must be for a user to notice (block means of ten rollouts).
REWARD_GAP, LENGTH_GAP, STAT_FACTOR = 0.15, 0.5, 1.5


@dataclass
class Run:
    """The log of one training run: one dict per rollout line, and how it ended."""

    steps: list[dict[str, float]] = field(default_factory=list)
    crash: str = ""  # the last line of the traceback, if the run died

    def block(self, key: str, start: int) -> float | None:
        """Mean of `key` over rollouts start+1 .. start+BLOCK (None: no such rollouts)."""
        values = [s[key] for s in self.steps[start : start + BLOCK] if key in s]
        return sum(values) / len(values) if values else None

    def blocks(self, key: str) -> list[float]:
        return [
            v for i in range(0, len(self.steps), BLOCK) if (v := self.block(key, i)) is not None
        ]

    @property
    def nan_loss(self) -> bool:
        return any(math.isnan(s["loss"]) for s in self.steps)

    def rollouts_to(self, target: float) -> int | None:
        """The rollout at which the mean reward of the last ten first reaches `target`."""
        for end in range(BLOCK, len(self.steps) + 1):
            if sum(s["reward"] for s in self.steps[end - BLOCK : end]) / BLOCK >= target:
                return end
        return None


def parse(stdout: str, stderr: str, returncode: int) -> Run:
    run = Run()
    for line in stdout.splitlines():
        match = LINE.match(line.strip())
        if match:
            step = {
                "reward": float(match[2]),
                "loss": float(match[3]),
                "length": float(match[4]),
            }
            step |= {name: float(value) for name, value in STAT.findall(match[5])}
            run.steps.append(step)
    if returncode not in (0, -9):  # -9: cut by us after ROLLOUTS lines
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        run.crash = lines[-1].strip() if lines else f"exit status {returncode}"
    return run


def train(workspace: Path, rollouts: int = ROLLOUTS) -> Run:
    """Run `python train.py` in `workspace` until it ends or has logged `rollouts` lines."""
    process = subprocess.Popen(
        [sys.executable, "train.py"],
        cwd=workspace,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if sum(1 for x in lines if LINE.match(x.strip())) >= rollouts:
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
    if any(
        _apart(run.block("reward", i), fixed.block("reward", i), REWARD_GAP) for i in (0, 10, 20)
    ):
        found.append("reward")
    if any(_apart(run.block("length", i), fixed.block("length", i), LENGTH_GAP) for i in (0, 10)):
        found.append("length")
    for stat, offset in (
        ("ratio_max", 1.0),
        ("kl", 0.0),
    ):  # a ratio is judged by its distance from 1
        pairs = [(run.block(stat, i), fixed.block(stat, i)) for i in (0, 10, 20)]
        if any(
            a is not None and b is not None and _factor_apart(a - offset, b - offset)
            for a, b in pairs
        ):
            found.append(stat)
    return found


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
