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

import random
import statistics
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence

from task_harness.report_data import Trial

SEED = 0
RESAMPLES = 10_000
CONFIDENCE = 0.95
# A reward is a weighted sum of per-bug scores (e.g. 0.35 + 0.35 + 0.30), so a full pass is
# compared with a rounding margin.
FULL_PASS = 1.0 - 1e-9
CRASH_STATUSES = frozenset({"agent-error", "verifier-error", "tampered", "no-reward"})

Statistic = Callable[[Sequence[float]], float]


def summarise(trials: list[Trial]) -> dict:
    """Groups, per-task uplifts and overall uplifts, as plain JSON-ready data."""
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
        "overall": overall_uplifts(groups),
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
        "reward_ci": bootstrap_interval(rewards, statistics.fmean, key) if rewards else None,
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
                    "skill": statistic(a),
                    "no_skill": statistic(b),
                    "delta": statistic(a) - statistic(b),
                    "ci": uplift_interval(a, b, statistic, (agent, task, name)),
                }
                if a and b
                else None
            )
        rows.append(row)
    return rows


def overall_uplifts(groups: dict[tuple[str, str, str], list[Trial]]) -> list[dict]:
    """Per agent: the mean per-task uplift over the tasks it ran in both conditions."""
    by_agent: dict[str, list[tuple[str, list[Trial], list[Trial]]]] = defaultdict(list)
    for agent, task, skill, no_skill in _pairs(groups):
        by_agent[agent].append((task, skill, no_skill))
    rows = []
    for agent, tasks in sorted(by_agent.items()):
        row: dict = {"agent": agent, "tasks": [task for task, _, _ in tasks]}
        for name in ("reward", "seconds"):
            pairs = []
            for _, skill, no_skill in tasks:
                (a, b), statistic = _measures(skill, no_skill)[name]
                if a and b:
                    pairs.append((a, b))
            row[name] = (
                {
                    "tasks": len(pairs),
                    "delta": statistics.fmean(statistic(a) - statistic(b) for a, b in pairs),
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
            statistics.fmean,
        ),
        "seconds": (
            (
                [t.seconds for t in skill if t.seconds is not None],
                [t.seconds for t in no_skill if t.seconds is not None],
            ),
            statistics.median,
        ),
    }


def bootstrap_interval(values: Sequence[float], statistic: Statistic, name) -> list[float]:
    """Percentile-bootstrap interval of `statistic` over `values` (resampled with replacement)."""
    rng = _rng(name)
    draws = [statistic(rng.choices(values, k=len(values))) for _ in range(RESAMPLES)]
    return _percentile_interval(draws)


def uplift_interval(
    skill: Sequence[float], no_skill: Sequence[float], statistic: Statistic, name
) -> list[float]:
    """Interval of statistic(skill) - statistic(no skill), each condition resampled on its own."""
    rng = _rng(name)
    draws = [
        statistic(rng.choices(skill, k=len(skill)))
        - statistic(rng.choices(no_skill, k=len(no_skill)))
        for _ in range(RESAMPLES)
    ]
    return _percentile_interval(draws)


def paired_uplift_interval(
    pairs: Sequence[tuple[Sequence[float], Sequence[float]]], statistic: Statistic, name
) -> list[float]:
    """Two-stage bootstrap of the mean per-task uplift: draw tasks, then trials within each."""
    rng = _rng(name)
    draws = []
    for _ in range(RESAMPLES):
        deltas = [
            statistic(rng.choices(a, k=len(a))) - statistic(rng.choices(b, k=len(b)))
            for a, b in rng.choices(pairs, k=len(pairs))
        ]
        draws.append(statistics.fmean(deltas))
    return _percentile_interval(draws)


def _percentile_interval(draws: list[float]) -> list[float]:
    ordered = sorted(draws)
    tail = (1.0 - CONFIDENCE) / 2
    return [_percentile(ordered, tail), _percentile(ordered, 1.0 - tail)]


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default `linear` method)."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _rng(name) -> random.Random:
    return random.Random(SEED * 1_000_003 + zlib.crc32(repr(name).encode()))


def _mean_of(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None
