"""The report's figures: per-group summaries, percentile-bootstrap intervals and the skill uplift.

Method (documented in the README):
- A group is the trials of one task, one agent and one condition. Its mean reward gets a 95%
  percentile-bootstrap interval: resample the group's trials with replacement, take the mean,
  and read the 2.5th and 97.5th percentiles of RESAMPLES such means (Efron & Tibshirani, "An
  Introduction to the Bootstrap", 1993, ch. 13).
- The uplift on a task is mean(skill) - mean(no skill) for one agent. Its interval resamples the
  trials of each condition independently (the two conditions' trials are separate runs).
- The overall uplift of an agent is the mean of its per-task uplifts over the tasks it ran in
  both conditions: paired by task, each task weighted equally. Its interval is a two-stage
  bootstrap: resample tasks, then each drawn task's trials within each condition. Resampling
  tasks accounts for the choice of tasks (a task set is a sample of possible bugs, and tasks
  differ far more than trials do); resampling trials accounts for the agent's run-to-run
  variation. Pairing by task removes the between-task spread from the comparison, as in
  Miller, "Adding Error Bars to Evals" (arXiv:2411.00640), section on paired differences.
- Time-to-finish uses the median instead of the mean (agent times are skewed), with the same
  resampling for its uplift.
Every interval is seeded from SEED and its own group's name, so the output is deterministic
and one group's interval does not change when another group is added.
"""

from __future__ import annotations

import statistics
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from task_harness.report_data import Trial

SEED = 0
RESAMPLES = 10_000
CONFIDENCE = 0.95
# A reward is a weighted sum of per-bug scores (e.g. 0.35 + 0.35 + 0.30), so a full pass is
# compared with a rounding margin.
FULL_PASS = 1.0 - 1e-9
CRASH_STATUSES = frozenset({"agent-error", "verifier-error", "tampered", "no-reward"})

# A statistic maps resamples (one per row) to one value per row: the mean or the median.
Statistic = Callable[[np.ndarray], np.ndarray]


def row_mean(rows: np.ndarray) -> np.ndarray:
    return rows.mean(axis=-1)


def row_median(rows: np.ndarray) -> np.ndarray:
    return np.median(rows, axis=-1)


def summarise(trials: list[Trial], left_out: Mapping[str, str] | None = None) -> dict:
    """Groups, per-task uplifts and overall uplifts, as plain JSON-ready data. The tasks in
    `left_out` ({task: why}: the diff-solvable forks and the tasks solved by reading,
    task_harness/difficulty.py `left_out_of_uplift`) keep their own rows but do not count in an
    overall uplift."""
    groups: dict[tuple[str, str, str], list[Trial]] = defaultdict(list)
    for trial in trials:
        groups[(trial.task, trial.agent, trial.condition)].append(trial)
    return {
        "method": {
            "interval": f"{CONFIDENCE:.0%} percentile bootstrap",
            "resamples": RESAMPLES,
            "seed": SEED,
            "overall_uplift": "mean of per-task uplifts; resample tasks, then trials",
        },
        "groups": [group_summary(key, groups[key]) for key in sorted(groups)],
        "uplift": task_uplifts(groups),
        "overall": overall_uplifts(groups, left_out or {}),
    }


def group_summary(key: tuple[str, str, str], trials: list[Trial]) -> dict:
    """Figures of one (task, agent, condition) group."""
    task, agent, condition = key
    rewards = [t.reward for t in trials if t.reward is not None]
    seconds = [t.seconds for t in trials if t.seconds is not None]
    return {
        "task": task,
        "agent": agent,
        "condition": condition,
        "trials": len(trials),
        "rewarded": len(rewards),
        "mean_reward": statistics.fmean(rewards) if rewards else None,
        "reward_ci": bootstrap_interval(rewards, row_mean, key) if rewards else None,
        "full_pass_rate": (sum(r >= FULL_PASS for r in rewards) / len(rewards))
        if rewards
        else None,
        "fix_rates": fix_rates(trials),
        "seconds": (
            {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds)}
            if seconds
            else None
        ),
        "input_tokens": _mean_of(t.input_tokens for t in trials),
        "output_tokens": _mean_of(t.output_tokens for t in trials),
        "cost_usd": _mean_of(t.cost_usd for t in trials),
        "crashes": sum(t.status in CRASH_STATUSES for t in trials),
        "timeouts": sum(t.status == "timeout" for t in trials),
    }


def fix_rates(trials: list[Trial]) -> dict[str, float]:
    """Share of the rewarded trials that fixed each bug (score 1.0)."""
    scores: dict[str, list[float]] = defaultdict(list)
    for trial in trials:
        for bug, score in trial.bugs.items():
            scores[bug].append(score)
    return {bug: statistics.fmean(values) for bug, values in sorted(scores.items())}


def task_uplifts(groups: dict[tuple[str, str, str], list[Trial]]) -> list[dict]:
    """Skill minus no skill, per agent and task, for every task the agent ran in both."""
    rows = []
    for agent, task, skill, no_skill in _pairs(groups):
        row = {"agent": agent, "task": task}
        for name, (values, statistic) in _measures(skill, no_skill).items():
            a, b = values
            row[name] = (
                {
                    "skill": _point(statistic, a),
                    "no_skill": _point(statistic, b),
                    "delta": _point(statistic, a) - _point(statistic, b),
                    "ci": uplift_interval(a, b, statistic, (agent, task, name)),
                }
                if a and b
                else None
            )
        rows.append(row)
    return rows


def overall_uplifts(
    groups: dict[tuple[str, str, str], list[Trial]], left_out: Mapping[str, str]
) -> list[dict]:
    """Per agent: the mean per-task uplift over the tasks it ran in both conditions, but those
    in `left_out` (listed with why, {task: reason})."""
    by_agent: dict[str, list[tuple[str, list[Trial], list[Trial]]]] = defaultdict(list)
    skipped: dict[str, list[str]] = defaultdict(list)
    for agent, task, skill, no_skill in _pairs(groups):
        if task in left_out:
            skipped[agent].append(task)
        else:
            by_agent[agent].append((task, skill, no_skill))
    rows = []
    for agent, tasks in sorted(by_agent.items()):
        row: dict = {
            "agent": agent,
            "tasks": [task for task, _, _ in tasks],
            "left_out": {task: left_out[task] for task in sorted(skipped[agent])},
        }
        for name in ("reward", "seconds"):
            pairs = []
            for _, skill, no_skill in tasks:
                (a, b), statistic = _measures(skill, no_skill)[name]
                if a and b:
                    pairs.append((a, b))
            row[name] = (
                {
                    "tasks": len(pairs),
                    "delta": statistics.fmean(
                        _point(statistic, a) - _point(statistic, b) for a, b in pairs
                    ),
                    "ci": paired_uplift_interval(pairs, statistic, (agent, name)),
                }
                if pairs
                else None
            )
        rows.append(row)
    return rows


def _pairs(groups):
    """(agent, task, skill trials, no-skill trials) for each agent and task with both."""
    for task, agent, condition in sorted(groups):
        if condition == "skill" and (task, agent, "no-skill") in groups:
            yield agent, task, groups[(task, agent, "skill")], groups[(task, agent, "no-skill")]


def _measures(skill: list[Trial], no_skill: list[Trial]) -> dict:
    """The compared quantities: mean reward and median time-to-finish, skill vs no skill."""
    return {
        "reward": (
            (
                [t.reward for t in skill if t.reward is not None],
                [t.reward for t in no_skill if t.reward is not None],
            ),
            row_mean,
        ),
        "seconds": (
            (
                [t.seconds for t in skill if t.seconds is not None],
                [t.seconds for t in no_skill if t.seconds is not None],
            ),
            row_median,
        ),
    }


def bootstrap_interval(values: Sequence[float], statistic: Statistic, name) -> list[float]:
    """Percentile-bootstrap interval of `statistic` over `values` (resampled with replacement)."""
    rng = _rng(name)
    return _percentile_interval(statistic(_resample(values, RESAMPLES, rng)))


def uplift_interval(
    skill: Sequence[float], no_skill: Sequence[float], statistic: Statistic, name
) -> list[float]:
    """Interval of statistic(skill) - statistic(no skill), each condition resampled on its own."""
    rng = _rng(name)
    a = statistic(_resample(skill, RESAMPLES, rng))
    b = statistic(_resample(no_skill, RESAMPLES, rng))
    return _percentile_interval(a - b)


def paired_uplift_interval(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]], statistic: Statistic, name
) -> list[float]:
    """Two-stage bootstrap of the mean per-task uplift: draw tasks, then trials within each.

    Every slot of every replicate that draws a task gets its own fresh resample of that task's
    trials, so a task drawn twice in one replicate contributes two independent uplifts."""
    rng = _rng(name)
    slots = rng.integers(0, len(pairs), size=(RESAMPLES, len(pairs)))
    deltas = np.empty(slots.shape)
    for task, (skill, no_skill) in enumerate(pairs):
        drawn = slots == task
        count = int(drawn.sum())
        deltas[drawn] = statistic(_resample(skill, count, rng)) - statistic(
            _resample(no_skill, count, rng)
        )
    return _percentile_interval(deltas.mean(axis=1))


def _point(statistic: Statistic, values: Sequence[float]) -> float:
    """The statistic of the observed values themselves."""
    return float(statistic(np.asarray(values, dtype=float)))


def _resample(values: Sequence[float], times: int, rng: np.random.Generator) -> np.ndarray:
    """`times` resamples of `values` with replacement, one per row."""
    data = np.asarray(values, dtype=float)
    return data[rng.integers(0, len(data), size=(times, len(data)))]


def _percentile_interval(draws: np.ndarray) -> list[float]:
    """The central CONFIDENCE interval of the draws (numpy's linear interpolation)."""
    tail = 100 * (1.0 - CONFIDENCE) / 2
    low, high = np.percentile(draws, [tail, 100 - tail])
    return [float(low), float(high)]


def _rng(name) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(repr(name).encode())])


def _mean_of(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
