"""`tasks difficulty`: a task's difficulty from measurement, not from its author's guess.

Two measured inputs, each the share of the task that something other than debugging solves:

- the checker: `grpo-check` run on the task's buggy workspace and on the same workspace fixed
  by the oracle. A bug counts as found when a check of its stage is flagged (fails, or errors:
  the stage raised on the checker's inputs, which the report points at just the same) on the
  buggy workspace and not on the fixed one (a check flagged on both is a convention of the
  task, not a finding), and the report names that stage as a root, or the bug alone (the fixed
  workspace with only that bug put back) gets its stage flagged too: a stage the diagnosis
  explains as a knock-on of another bug is not a finding unless its own bug shows by itself. The share is the found bugs' weight over the weight of all bugs (decoys aside).
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

Both inputs are what scripts do. What a task is worth is what a capable coding agent does with it,
so where blind agent trials are recorded (`[grpo.difficulty.trials]`, one trial per condition,
README "What real agents did, blind") the label is theirs, from the trial without the skill:

    easy    every bug fixed in under 10 minutes (in any one trial, where several ran)
    medium  every bug fixed in 10 minutes or more, or a reward of at least 0.5
    hard    a reward below 0.5

Where a task ran several trials per condition, `[grpo.difficulty.trials]` holds their means and,
as `fastest_full`, the minutes of the fastest no-skill trial that fixed every bug: one quick full
pass is enough to call the task easy, whatever the slower trials took. An easy task is retired
from the headline (`left_out_of_uplift`).

and the checker and baseline figures stay beside it.
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
QUICK_MINUTES = 10  # a blind agent that fixes every bug faster than this found them by reading
CHECK_TIMEOUT = 600


class DifficultyError(RuntimeError):
    """The measurement could not be taken (no grpo-check, a checker run that failed)."""


@dataclass(frozen=True)
class Measurement:
    checker_found: tuple[str, ...]  # the bugs the checker's output localises, in spec order
    checker_share: float
    baseline_max: float
    upstream_hunks: float | None = None  # the hunk-level restore's reward (fork tasks only)

    @property
    def difficulty(self) -> str:
        return label(self.checker_share, self.baseline_max)


def label(checker_share: float, baseline_max: float) -> str:
    """The difficulty of a task that the checker solves `checker_share` of and the best scripted
    baseline `baseline_max` of."""
    solved = max(checker_share, baseline_max)
    return "easy" if solved >= EASY - 1e-9 else "medium" if solved >= MEDIUM - 1e-9 else "hard"


@dataclass(frozen=True)
class Trial:
    """One condition's blind agent trials: the reward and the agent's own minutes from start to
    stop (means where several ran), and the minutes of the fastest that fixed every bug."""

    reward: float
    minutes: float
    fastest_full: float | None = None


def trial_label(no_skill: Trial) -> str:
    """The difficulty a blind agent without the skill measured (the rule in the module's text)."""
    if no_skill.fastest_full is not None and no_skill.fastest_full < QUICK_MINUTES:
        return "easy"
    if no_skill.reward >= EASY - 1e-9:
        return "easy" if no_skill.minutes < QUICK_MINUTES else "medium"
    return "medium" if no_skill.reward >= MEDIUM - 1e-9 else "hard"


def recorded_trials(spec: TaskSpec) -> dict[str, Trial]:
    """{"no_skill": Trial, "skill": Trial} from `[grpo.difficulty.trials]`, or {} when none ran."""
    table = spec.toml["grpo"].get("difficulty", {}).get("trials", {})
    return {
        condition: Trial(
            float(t["reward"]),
            float(t["minutes"]),
            float(t["fastest_full"]) if "fastest_full" in t else None,
        )
        for condition, t in table.items()
    }


def stated_label(spec: TaskSpec, measured: Measurement | None) -> str:
    """The label `[metadata] difficulty` must hold: the trials' when recorded, else the
    measurement's."""
    trials = recorded_trials(spec)
    if "no_skill" in trials:
        return trial_label(trials["no_skill"])
    if measured is None:
        raise DifficultyError(f"{spec.id}: neither a measurement nor a trial is recorded")
    return measured.difficulty


# A fork task whose hunk-level restore (`upstream-hunks`: the pristine release, every hunk that
# carries no fork comment and names nothing NOTES.md names reverted) scores above this is solved
# in part by a diff, not by debugging: it stays for comparison with SkillsBench, labelled, and the
# report leaves it out of the skill's overall uplift.
DIFF_SOLVABLE_ABOVE = 0.3


def diff_solvable(spec: TaskSpec) -> bool:
    """True when the task's recorded `upstream_hunks` reward is above DIFF_SOLVABLE_ABOVE."""
    table = spec.toml["grpo"].get("difficulty", {})
    return float(table.get("upstream_hunks", 0.0)) > DIFF_SOLVABLE_ABOVE + 1e-9


def solved_by_reading(spec: TaskSpec) -> bool:
    """True when a blind agent without the skill fixed every bug in under QUICK_MINUTES (its
    recorded trial label is "easy"): the issue's rule retires such a task from the headline.
    It stays in the suite (its checker figures and probes still test grpo-check), with its own
    report row, but the overall uplift leaves it out: a task any reader solves in minutes
    measures reading, not the skill."""
    trials = recorded_trials(spec)
    return "no_skill" in trials and trial_label(trials["no_skill"]) == "easy"


def left_out_of_uplift(specs: list[TaskSpec]) -> dict[str, str]:
    """{task id: why} for the tasks the report's overall uplift leaves out."""
    reasons = {}
    for spec in specs:
        if diff_solvable(spec):
            reasons[spec.id] = "diff-solvable"
        elif solved_by_reading(spec):
            reasons[spec.id] = "solved by reading"
    return reasons


# The suite's target for blind trials (README, "The headline, measured"): without the skill a
# mean reward of at most 0.5, and with it a mean at least 0.3 higher.
TARGET_NO_SKILL = 0.5
TARGET_GAP = 0.3


@dataclass(frozen=True)
class Headline:
    """The mean recorded blind-trial reward of each condition over a set of tasks, each task
    weighted equally (a task's record is already the mean of its trials)."""

    tasks: tuple[str, ...]
    no_skill: float
    skill: float

    @property
    def gap(self) -> float:
        return self.skill - self.no_skill

    @property
    def met(self) -> bool:
        return self.no_skill <= TARGET_NO_SKILL + 1e-9 and self.gap >= TARGET_GAP - 1e-9


def headline(specs: list[TaskSpec], left_out: dict[str, str]) -> Headline | None:
    """The headline over the tasks with a trial recorded in both conditions, leaving out
    `left_out` (the tasks `left_out_of_uplift` names); None when no task qualifies."""
    rows = []
    for spec in specs:
        trials = recorded_trials(spec)
        if spec.id not in left_out and {"no_skill", "skill"} <= trials.keys():
            rows.append((spec.id, trials["no_skill"].reward, trials["skill"].reward))
    if not rows:
        return None
    return Headline(
        tasks=tuple(task for task, _, _ in rows),
        no_skill=sum(no_skill for _, no_skill, _ in rows) / len(rows),
        skill=sum(skill for _, _, skill in rows) / len(rows),
    )


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


def checker_run(spec: TaskSpec, workspace: Path) -> tuple[dict[str, set[str]], set[str]]:
    """({stage: names of its flagged checks}, the stages its diagnosis names as roots) when
    grpo-check runs on `workspace` (a copy)."""
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
    report = json.loads(done.stdout)
    roots = set((report.get("diagnosis") or {}).get("root_stages", ()))
    return flagged_checks(report["results"]), roots


def flagged_checks(results: list[dict]) -> dict[str, set[str]]:
    """{stage: names of its checks that failed or errored} from `grpo-check --json` results.
    An error localises as a failure does: `grpo-check` exits 1 on either and names the stage."""
    flagged: dict[str, set[str]] = {}
    for result in results:
        if result["status"] in ("fail", "error"):
            flagged.setdefault(result["stage"], set()).add(result["check"])
    return flagged


def checker_findings(spec: TaskSpec, built: Path) -> tuple[str, ...]:
    """The bugs of the built task `built` whose stage grpo-check flags only while they are in,
    as a root of its diagnosis or, for a stage it explains as a knock-on, with the bug alone."""
    with tempfile.TemporaryDirectory(prefix=f"grpo-difficulty-{spec.id}-") as scratch:
        buggy, fixed = Path(scratch) / "buggy", Path(scratch) / "fixed"
        shutil.copytree(built / "environment" / "workspace", buggy, symlinks=True)
        shutil.copytree(buggy, fixed, symlinks=True)
        shutil.copytree(built / "solution" / "files", fixed, dirs_exist_ok=True)
        if spec.family == "user":
            declare_user_conventions(spec, fixed, buggy)
        seen_buggy, roots = checker_run(spec, buggy)
        seen_fixed, _ = checker_run(spec, fixed)

        def new_in(seen: dict[str, set[str]], stage: str) -> bool:
            return bool(seen.get(stage, set()) - seen_fixed.get(stage, set()))

        found = []
        for patch in (p for p in spec.patches if p.kind == "bug"):
            stage = next(b.stage for b in spec.bugs if b.id == patch.id)
            if not new_in(seen_buggy, stage):
                continue
            if stage not in roots:
                alone = Path(scratch) / f"alone-{patch.id}"
                shutil.copytree(fixed, alone, symlinks=True)
                patch.mutant.apply(alone / "trl" if spec.family == "trl" else alone)
                if not new_in(checker_run(spec, alone)[0], stage):
                    continue
            found.append(patch.id)
    return tuple(b.id for b in spec.bugs if b.id in found)


def baseline_rewards(spec: TaskSpec, built: Path) -> dict[str, float]:
    """{shortcut: reward} of the scripted baselines that apply to the task's family."""
    from task_harness.runner import run_trial
    from task_harness.shortcuts import SHORTCUTS, applies

    return {name: run_trial(built, name).reward for name in SHORTCUTS if applies(name, spec.family)}


def measure(spec: TaskSpec, built: Path, baselines: dict[str, float]) -> Measurement:
    """The task's measurement, given the baselines' rewards (`baseline_rewards`, or a verify
    run's)."""
    found = checker_findings(spec, built)
    bugs = [b for b in spec.bugs if b.kind == "bug"]
    share = sum(b.weight for b in bugs if b.id in found) / sum(b.weight for b in bugs)
    hunks = baselines.get("upstream-hunks")
    return Measurement(
        found,
        round(share, 4),
        round(max(baselines.values(), default=0.0), 4),
        None if hunks is None else round(hunks, 4),
    )


def recorded(spec: TaskSpec) -> Measurement | None:
    """The measurement `--write` stored in the task's `[grpo.difficulty]`, if any."""
    table = spec.toml["grpo"].get("difficulty")
    if not table or "checker_share" not in table:
        return None
    hunks = table.get("upstream_hunks")
    return Measurement(
        tuple(table["checker_found"]),
        float(table["checker_share"]),
        float(table["baseline_max"]),
        None if hunks is None else float(hunks),
    )


DIFFICULTY_LINE = re.compile(r'^difficulty = "[a-z]+"$', re.MULTILINE)
TABLE = "[grpo.difficulty]"
TRIALS_TABLE = "[grpo.difficulty.trials]"
TRIALS_COMMENT = (
    '# Blind agent trials (README, "What real agents did, blind"): per condition, the reward and\n'
    "# the agent's minutes from its first command to its stop (means where several ran), and\n"
    "# fastest_full, the minutes of the fastest trial that fixed every bug."
)


def write(spec: TaskSpec, measured: Measurement) -> None:
    """Record `measured` in `spec`'s task.toml beside its trials, and the label that follows."""
    path = spec.folder / "task.toml"
    text = path.read_text()
    trials = recorded_trials(spec)
    starts = [i for i in (text.find(TABLE), text.find(TRIALS_TABLE)) if i >= 0]
    if starts:  # the tables are always last: replace them whole
        text = text[: min(starts)].rstrip("\n") + "\n"
    label = trial_label(trials["no_skill"]) if "no_skill" in trials else measured.difficulty
    text = DIFFICULTY_LINE.sub(f'difficulty = "{label}"', text, count=1)
    found = ", ".join(f'"{b}"' for b in measured.checker_found)
    text += (
        f"\n{TABLE}\n"
        "# Measured by `grpo-check tasks difficulty --write` (task_harness/difficulty.py).\n"
        f"checker_found = [{found}]\n"
        f"checker_share = {measured.checker_share}\n"
        f"baseline_max = {measured.baseline_max}\n"
    )
    if measured.upstream_hunks is not None:
        text += f"upstream_hunks = {measured.upstream_hunks}\n"
    if trials:
        text += f"\n{TRIALS_TABLE}\n{TRIALS_COMMENT}\n"
        for condition, trial in trials.items():
            fastest = (
                "" if trial.fastest_full is None else f", fastest_full = {trial.fastest_full:g}"
            )
            text += f"{condition} = {{ reward = {trial.reward}, minutes = {trial.minutes:g}{fastest} }}\n"
    path.write_text(text)
