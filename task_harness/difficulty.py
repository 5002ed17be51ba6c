"""`tasks difficulty`: a task's difficulty from measurement, not from its author's guess.

Two measured inputs, each the share of the task that something other than debugging solves:

- the checker: `grpo-check` run on the task's buggy workspace and on the same workspace fixed
  by the oracle. A bug counts as found when a check of its stage fails on the buggy workspace
  and passes on the fixed one (a check failing on both is a convention of the task, not a
  finding). The share is the found bugs' weight over the weight of all bugs (decoys aside).
  rlzero is checked through `trainers/rlzero_protocol.py` (a thin adapter, with its conventions
  declared), a TRL fork as the source tree it is, on its own release's dependencies. A user
  task's GRPOTrainer subclass is checked on the release the task pins, with the team's
  conventions declared as a user would: `grpo-check profile --write` on the fixed workspace
  (the oracle's trainer, whose conventions are the intended ones), and that YAML for both.
- the scripted baselines: the best reward `upstream-restore`, `reference-copy` or
  `stock-trainer` scores.

    solved = max(checker share, best baseline reward)
    difficulty = "easy" if solved == 1, "medium" if solved >= 1/2, else "hard"

A full pass needs every bug fixed, so what the checker leaves unlocalised is what debugging has
to find by measuring: nothing (easy), less than half of the weight (medium), or most of it.

`--write` records both inputs in the task's `[grpo.difficulty]` table and the label in
`[metadata] difficulty`, which `tests/test_tasks_difficulty.py` holds to this rule.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from task_harness.spec import TaskSpec

ADAPTER = Path(__file__).resolve().parent / "trainers" / "rlzero_protocol.py"
# The YAML a user task's conventions are declared in, and the module that builds the team's
# config (its GRPOConfig subclass with its settings, as the training script does), inside each
# workspace copy.
USER_CONVENTIONS = "grpo_conventions.yaml"
USER_CONFIG = "grpo_team_config.py"
EASY, MEDIUM = 1.0, 0.5
CHECK_TIMEOUT = 600


class DifficultyError(RuntimeError):
    """The measurement could not be taken (no grpo-check, a checker run that failed)."""


@dataclass(frozen=True)
class Measurement:
    checker_found: tuple[str, ...]  # the bugs the checker's output localises, in spec order
    checker_share: float
    baseline_max: float

    @property
    def difficulty(self) -> str:
        return label(self.checker_share, self.baseline_max)


def label(checker_share: float, baseline_max: float) -> str:
    """The difficulty of a task that the checker solves `checker_share` of and the best scripted
    baseline `baseline_max` of."""
    solved = max(checker_share, baseline_max)
    return "easy" if solved >= EASY - 1e-9 else "medium" if solved >= MEDIUM - 1e-9 else "hard"


def _grpo_check() -> list[str]:
    beside = Path(sys.executable).with_name("grpo-check")
    found = str(beside) if beside.exists() else shutil.which("grpo-check")
    if not found:
        raise DifficultyError("grpo-check is not installed here: pip install grpo-skill")
    return [found]


def _target(spec: TaskSpec, workspace: Path) -> tuple[str, dict[str, str]]:
    """What to point grpo-check at inside `workspace`, and the environment it needs."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if spec.trainer == "rlzero":
        shutil.copy(ADAPTER, workspace / "grpo_protocol.py")
        shutil.copy(ADAPTER.with_suffix(".yaml"), workspace / "rlzero_protocol.yaml")
        return "rlzero_protocol.yaml", env
    if spec.trl_version:  # a fork imports with its release's dependencies; a user task its release
        from task_harness.releases import dependency_paths, import_paths

        found = import_paths if spec.family == "user" else dependency_paths
        paths = [str(p) for p in found(spec.trl_version)]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if spec.family == "user":
        return USER_CONVENTIONS, env  # `declare_user_conventions` wrote it
    return "trl", env  # grpo-check finds the fork at ./trl


def declare_user_conventions(spec: TaskSpec, fixed: Path, buggy: Path) -> None:
    """Write USER_CONVENTIONS into both workspaces: `grpo-check profile --write` of the user's
    trainer with the team's config (build.USER_TRAINER: its config class built with its
    settings, in USER_CONFIG) in the fixed one, whose conventions are the task's intended ones.
    Its findings stay in the file and fail in both, so they find no bug."""
    from task_harness.build import USER_TRAINER

    config_module, config_class = USER_TRAINER["config_class"].split(":")
    values_module, values = USER_TRAINER["config_values"].split(":")
    # As the training script builds it: on CPU, the team's settings, then the task's run.
    builder = (
        f'"""The team\'s config as its training script builds it."""\n\n'
        f"from {config_module} import {config_class}\nfrom {values_module} import {values}\n\n"
        f'CONFIG = {config_class}(output_dir="grpo-check-out", use_cpu=True, bf16=False, '
        f"**{{**{values}, **{spec.train!r}}})\n"
    )
    for workspace in (fixed, buggy):
        (workspace / USER_CONFIG).write_text(builder)
    _, env = _target(spec, fixed)
    command = [*_grpo_check(), "profile", USER_TRAINER["class"]]
    command += ["--config", f"{USER_CONFIG}:CONFIG", "--write", USER_CONVENTIONS]
    try:
        done = subprocess.run(
            command, cwd=fixed, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise DifficultyError(
            f"{spec.id}: grpo-check profile took over {CHECK_TIMEOUT} s"
        ) from None
    if done.returncode not in (0, 1) or not (fixed / USER_CONVENTIONS).is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DifficultyError(f"{spec.id}: grpo-check profile exited {done.returncode}: {last}")
    shutil.copy(fixed / USER_CONVENTIONS, buggy / USER_CONVENTIONS)


def failing_checks(spec: TaskSpec, workspace: Path) -> dict[str, set[str]]:
    """{stage: names of its checks that fail} when grpo-check runs on `workspace` (a copy)."""
    target, env = _target(spec, workspace)
    try:
        done = subprocess.run(
            [*_grpo_check(), "check", target, "--json"],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        raise DifficultyError(f"{spec.id}: grpo-check took over {CHECK_TIMEOUT} s") from None
    if done.returncode not in (0, 1):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DifficultyError(f"{spec.id}: grpo-check exited {done.returncode}: {last}")
    failing: dict[str, set[str]] = {}
    for result in json.loads(done.stdout)["results"]:
        if result["status"] == "fail":
            failing.setdefault(result["stage"], set()).add(result["check"])
    return failing


def checker_findings(spec: TaskSpec, built: Path) -> tuple[str, ...]:
    """The bugs of the built task `built` whose stage grpo-check flags only while they are in."""
    with tempfile.TemporaryDirectory(prefix=f"grpo-difficulty-{spec.id}-") as scratch:
        buggy, fixed = Path(scratch) / "buggy", Path(scratch) / "fixed"
        shutil.copytree(built / "environment" / "workspace", buggy, symlinks=True)
        shutil.copytree(buggy, fixed, symlinks=True)
        shutil.copytree(built / "solution" / "files", fixed, dirs_exist_ok=True)
        if spec.family == "user":
            declare_user_conventions(spec, fixed, buggy)
        seen_buggy = failing_checks(spec, buggy)
        seen_fixed = failing_checks(spec, fixed)
    bugs = [b for b in spec.bugs if b.kind == "bug"]
    return tuple(
        b.id for b in bugs if seen_buggy.get(b.stage, set()) - seen_fixed.get(b.stage, set())
    )


def best_baseline(spec: TaskSpec, built: Path) -> float:
    """The best reward of the scripted baselines that apply to the task's family."""
    from task_harness.runner import run_trial
    from task_harness.shortcuts import SHORTCUTS, applies

    return max(
        (run_trial(built, name).reward for name in SHORTCUTS if applies(name, spec.family)),
        default=0.0,
    )


def measure(spec: TaskSpec, built: Path, baseline_max: float) -> Measurement:
    """The task's measurement, given the best baseline reward (`best_baseline`, or a verify run's)."""
    found = checker_findings(spec, built)
    bugs = [b for b in spec.bugs if b.kind == "bug"]
    share = sum(b.weight for b in bugs if b.id in found) / sum(b.weight for b in bugs)
    return Measurement(found, round(share, 4), round(baseline_max, 4))


def recorded(spec: TaskSpec) -> Measurement | None:
    """The measurement `--write` stored in the task's `[grpo.difficulty]`, if any."""
    table = spec.toml["grpo"].get("difficulty")
    if not table:
        return None
    return Measurement(
        tuple(table["checker_found"]), float(table["checker_share"]), float(table["baseline_max"])
    )


DIFFICULTY_LINE = re.compile(r'^difficulty = "[a-z]+"$', re.MULTILINE)
TABLE = "[grpo.difficulty]"


def write(spec: TaskSpec, measured: Measurement) -> None:
    """Record `measured` in `spec`'s task.toml: the label and its inputs."""
    path = spec.folder / "task.toml"
    text = path.read_text()
    if TABLE in text:  # the table is always last: replace it whole
        text = text[: text.index(TABLE)].rstrip("\n") + "\n"
    text = DIFFICULTY_LINE.sub(f'difficulty = "{measured.difficulty}"', text, count=1)
    found = ", ".join(f'"{b}"' for b in measured.checker_found)
    text += (
        f"\n{TABLE}\n"
        "# Measured by `grpo-check tasks difficulty --write` (task_harness/difficulty.py).\n"
        f"checker_found = [{found}]\n"
        f"checker_share = {measured.checker_share}\n"
        f"baseline_max = {measured.baseline_max}\n"
    )
    path.write_text(text)
