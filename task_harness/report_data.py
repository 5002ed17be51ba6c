"""The trials a report is made of, read from the local runner's results or from Harbor job folders.

Both sources become the same `Trial` rows. A local results folder holds `results.jsonl` (one
`task_harness.runner.TrialResult` per line). A Harbor job folder (Harbor 0.26) holds the job's
`config.json` and one folder per trial with its `result.json`, a serialised
`harbor.models.trial.result.TrialResult`; a folder of such job folders (Harbor's `jobs/`) is read
job by job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from task_harness.runner import BUILTIN_AGENTS, agent_slug

CONDITIONS = ("no-skill", "skill")
# Keys of reward.json that are not bugs (task_harness/verifier/verify.py): the weighted total and
# the two gates, anti-cheat and the short training run ("learning", 1.0 also where no run is
# measured, so as a fix rate it would read 100% for nop).
NON_BUG_KEYS = frozenset({"reward", "anti_cheat", "learning"})
# Harbor's exception for an agent stopped at its time limit (harbor/trial/errors.py).
HARBOR_TIMEOUT = "AgentTimeoutError"


class ReportInputError(ValueError):
    """A folder or record the report cannot read; the message names it and the cause."""


@dataclass
class Trial:
    """One trial, whatever ran it. `reward` is None when the run produced no valid reward."""

    source: str  # "local" or "harbor"
    task: str
    agent: str
    condition: str  # "skill" or "no-skill"
    reward: float | None
    bugs: dict[str, float] = field(default_factory=dict)
    status: str = "ok"  # ok, timeout, agent-error, verifier-error, tampered, no-reward
    seconds: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


def load_trials(folders: list[Path], conditions: dict[str, str] | None = None) -> list[Trial]:
    """Every trial under `folders`; `conditions` maps a Harbor job folder's name to its condition
    (for jobs whose skill was baked into the image, which Harbor's own record cannot show)."""
    conditions = conditions or {}
    trials: list[Trial] = []
    for folder in folders:
        if (folder / "results.jsonl").is_file():
            trials += load_local(folder / "results.jsonl")
        elif _is_harbor_job(folder):
            trials += load_harbor_job(folder, conditions.get(folder.name))
        elif jobs := sorted(child for child in folder.iterdir() if _is_harbor_job(child)):
            for job in jobs:
                trials += load_harbor_job(job, conditions.get(job.name))
        else:
            raise ReportInputError(
                f"{folder}: neither a local results folder (results.jsonl) nor a Harbor job "
                "folder (config.json and <trial>/result.json) nor a folder of Harbor jobs"
            )
    return trials


def _is_harbor_job(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*/result.json"))


def load_local(path: Path) -> list[Trial]:
    """The local runner's trials; a half-written last line (an interrupted run) is skipped.

    The runner records a crash or time-out with reward 0, so every local trial has a reward.
    Its `seconds` is the whole trial (agent and verifier)."""
    trials = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        try:
            agent = row["agent"]
            trials.append(
                Trial(
                    source="local",
                    task=row["task"],
                    agent=agent if agent in BUILTIN_AGENTS else agent_slug(agent),
                    condition=_checked_condition(row["condition"], f"{path}:{number}"),
                    reward=float(row["reward"]),
                    bugs=_bug_scores(row.get("bugs", {})),
                    status=row.get("status", "ok"),
                    seconds=row.get("seconds"),
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ReportInputError(f"{path}:{number}: not a trial record ({error!r})") from None
    return trials


def load_harbor_job(job: Path, condition: str | None = None) -> list[Trial]:
    """The finished trials of one Harbor job folder; `condition` overrides the skill detection.

    Without an override the condition is "skill" when the trial's agent was given skills
    (`config.agent.skills`, filled by `harbor run --skill DIR`), "no-skill" otherwise.
    A trial still running (no `finished_at`) is left out."""
    if condition is not None:
        _checked_condition(condition, f"--condition for {job.name}")
    trials = []
    for result in sorted(job.glob("*/result.json")):
        try:
            record = json.loads(result.read_text())
        except (OSError, ValueError) as error:
            raise ReportInputError(f"{result}: unreadable ({error})") from None
        if record.get("finished_at") is None:
            continue
        try:
            trials.append(_harbor_trial(record, condition))
        except (KeyError, TypeError, ValueError) as error:
            raise ReportInputError(
                f"{result}: not a Harbor TrialResult ({error!r} missing or malformed)"
            ) from None
    return trials


def _harbor_trial(record: dict, condition: str | None) -> Trial:
    info = record["agent_info"]
    model = (info.get("model_info") or {}).get("name")
    agent = f"{info['name']}/{model}" if model else info["name"]
    skills = ((record.get("config") or {}).get("agent") or {}).get("skills") or []
    rewards = (record.get("verifier_result") or {}).get("rewards") or {}
    exceptions = _harbor_exceptions(record)
    # Harbor's own `reward_valid` (serialised with the result) says whether the verifier's
    # rewards count despite an exception; a time-out or a non-zero agent exit still does.
    valid = record.get("reward_valid", bool(rewards)) and "reward" in rewards
    if not valid:
        status = "no-reward"
    elif HARBOR_TIMEOUT in exceptions:
        status = "timeout"
    elif exceptions:
        status = "agent-error"
    else:
        status = "ok"
    input_tokens, output_tokens, cost = _harbor_usage(record)
    return Trial(
        source="harbor",
        task=record["task_name"],
        agent=agent,
        condition=condition or ("skill" if skills else "no-skill"),
        reward=float(rewards["reward"]) if valid else None,
        bugs=_bug_scores(rewards) if valid else {},
        status=status,
        seconds=_seconds(record.get("agent_execution")),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost,
    )


def _harbor_exceptions(record: dict) -> list[str]:
    """Exception types of the trial and of its steps (multi-step trials record them per step)."""
    infos = [record.get("exception_info")]
    infos += [step.get("exception_info") for step in record.get("step_results") or []]
    return [info["exception_type"] for info in infos if info]


def _harbor_usage(record: dict) -> tuple[int | None, int | None, float | None]:
    """Input tokens (cache included), output tokens and cost in USD, summed as Harbor sums them:
    the trial's `agent_result`, or else every step's."""
    contexts = [record["agent_result"]] if record.get("agent_result") else []
    if not contexts:
        contexts = [
            s["agent_result"] for s in record.get("step_results") or [] if s.get("agent_result")
        ]

    def total(key: str):
        values = [c[key] for c in contexts if c.get(key) is not None]
        return sum(values) if values else None

    return total("n_input_tokens"), total("n_output_tokens"), total("cost_usd")


def _seconds(timing: dict | None) -> float | None:
    """Length of a Harbor phase (`started_at` to `finished_at`), or None if not recorded."""
    if not timing or not timing.get("started_at") or not timing.get("finished_at"):
        return None
    started = datetime.fromisoformat(timing["started_at"])
    finished = datetime.fromisoformat(timing["finished_at"])
    return round((finished - started).total_seconds(), 1)


def _bug_scores(scores: dict) -> dict[str, float]:
    return {key: float(value) for key, value in scores.items() if key not in NON_BUG_KEYS}


def _checked_condition(condition: str, where: str) -> str:
    if condition not in CONDITIONS:
        raise ReportInputError(f"{where}: condition {condition!r} is not one of {CONDITIONS}")
    return condition
