"""`tasks report` on Harbor job folders: a small job written in Harbor 0.26's schema, read by the
report, and (where Harbor is installed) checked against Harbor's own pydantic models."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from task_harness.cli import tasks
from task_harness.report_data import ReportInputError, load_harbor_job, load_trials
from task_harness.report_stats import summarise
from tests.test_tasks_export import harbor  # noqa: F401  (the fixture that installs Harbor)

pytestmark = pytest.mark.xdist_group("tasks-export")

STARTED = "2026-03-02T10:00:00Z"


def harbor_trial(
    task: str,
    number: int,
    *,
    skills: list[str],
    rewards: dict | None,
    agent_seconds: int,
    exception: str | None = None,
    tokens: tuple[int, int] | None = None,
    cost: float | None = None,
    finished: bool = True,
) -> dict:
    """A trial's result.json as Harbor 0.26 writes it (harbor/models/trial/result.py): only
    the required fields and those the report reads; `reward_valid` is Harbor's computed field."""
    minutes, seconds = divmod(agent_seconds, 60)
    hours, minutes = divmod(minutes, 60)
    record = {
        "schema_version": 1,
        "id": f"00000000-0000-4000-8000-{number:012d}",
        "task_name": task,
        "trial_name": f"{task}__trial{number}",
        "trial_uri": f"file:///jobs/job/{task}__trial{number}",
        "task_id": {"path": f"harbor-tasks/{task}"},
        "task_checksum": "0" * 64,
        "config": {
            "task": {"path": f"harbor-tasks/{task}"},
            "trial_name": f"{task}__trial{number}",
            "agent": {
                "name": "claude-code",
                "model_name": "anthropic/claude-opus-4-1",
                "skills": skills,
            },
        },
        "agent_info": {
            "name": "claude-code",
            "version": "2.1.0",
            "model_info": {"name": "claude-opus-4-1", "provider": "anthropic"},
        },
        "agent_result": (
            {"n_input_tokens": tokens[0], "n_output_tokens": tokens[1], "cost_usd": cost}
            if tokens
            else None
        ),
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "exception_info": (
            {
                "exception_type": exception,
                "exception_message": "stopped",
                "exception_traceback": "Traceback ...",
                "occurred_at": STARTED,
            }
            if exception
            else None
        ),
        "started_at": STARTED,
        "finished_at": f"2026-03-02T{10 + hours + 1:02d}:00:00Z" if finished else None,
        "agent_execution": {
            "started_at": STARTED,
            "finished_at": f"2026-03-02T{10 + hours:02d}:{minutes:02d}:{seconds:02d}Z",
        },
        # Harbor's rule: rewards present and no exception whose policy voids them; a time-out
        # keeps its reward, an environment that never started has none.
        "reward_valid": bool(rewards) and exception != "EnvironmentStartTimeoutError",
    }
    return record


def bugs(kl: float, eos: float) -> dict:
    """reward.json as the verifier writes it: the total, each bug, and the two gates."""
    gates = {"anti_cheat": 1.0, "learning": 1.0}
    return {"reward": 0.5 * kl + 0.5 * eos, "kl_sign": kl, "first_eos_only": eos} | gates


def write_job(folder: Path, trials: list[dict], agent_skills: list[list[str]]) -> Path:
    """A job folder: config.json (JobConfig) and <trial_name>/result.json per trial."""
    folder.mkdir(parents=True)
    config = {
        "job_name": folder.name,
        "agents": [
            {"name": "claude-code", "model_name": "anthropic/claude-opus-4-1", "skills": skills}
            for skills in agent_skills
        ],
        "tasks": [{"path": "harbor-tasks/ref-kl-masking"}],
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for record in trials:
        trial = folder / record["trial_name"]
        trial.mkdir()
        (trial / "result.json").write_text(json.dumps(record, indent=2))
    return folder


@pytest.fixture
def job(tmp_path) -> Path:
    """One job, both conditions (Harbor's --skill on one of its two agent configs): without the
    skill one time-out and one environment that never started; with it, token counts and cost."""
    skill = ["/home/me/grpo-skill/skills/grpo"]
    trials = [
        harbor_trial("ref-kl-masking", 1, skills=[], rewards=bugs(1, 0), agent_seconds=1383),
        harbor_trial("ref-kl-masking", 2, skills=[], rewards=bugs(0, 0), agent_seconds=1800,
                     exception="AgentTimeoutError"),
        harbor_trial("ref-kl-masking", 3, skills=[], rewards=None, agent_seconds=0,
                     exception="EnvironmentStartTimeoutError"),
        harbor_trial("ref-kl-masking", 4, skills=skill, rewards=bugs(1, 1), agent_seconds=797,
                     tokens=(120_000, 4_000), cost=0.90),
        harbor_trial("ref-kl-masking", 5, skills=skill, rewards=bugs(1, 1), agent_seconds=452,
                     tokens=(80_000, 3_000), cost=0.50),
        harbor_trial("ref-kl-masking", 6, skills=skill, rewards=bugs(1, 0), agent_seconds=600,
                     finished=False),
    ]  # fmt: skip
    return write_job(tmp_path / "2026-03-02__10-00-00", trials, [[], skill])


def test_harbor_trials_get_condition_status_time_and_usage(job):
    trials = {t.seconds: t for t in load_harbor_job(job)}
    assert len(trials) == 5, "the unfinished trial is left out"
    assert trials[1383.0].condition == "no-skill" and trials[1383.0].reward == 0.5
    assert trials[1383.0].agent == "claude-code/claude-opus-4-1"
    assert trials[1383.0].bugs == {"kl_sign": 1.0, "first_eos_only": 0.0}
    timeout = trials[1800.0]
    assert (timeout.status, timeout.reward) == ("timeout", 0.0)  # Harbor graded it: it counts
    never_started = trials[0.0]
    assert (never_started.status, never_started.reward) == ("no-reward", None)
    with_skill = trials[797.0]
    assert with_skill.condition == "skill" and with_skill.reward == 1.0
    assert (with_skill.input_tokens, with_skill.output_tokens, with_skill.cost_usd) == (
        120_000,
        4_000,
        0.90,
    )


def test_harbor_job_figures_leave_out_trials_without_a_reward(job):
    summary = summarise(load_trials([job]))
    groups = {g["condition"]: g for g in summary["groups"]}
    no_skill, skill = groups["no-skill"], groups["skill"]
    assert (no_skill["trials"], no_skill["rewarded"]) == (3, 2)
    assert no_skill["mean_reward"] == pytest.approx(0.25)  # (0.5 + 0) / 2, as Harbor's mean
    assert (no_skill["crashes"], no_skill["timeouts"]) == (1, 1)
    assert no_skill["seconds"]["median"] == pytest.approx(1383.0)  # median of 0, 1383, 1800
    assert skill["input_tokens"] == pytest.approx(100_000) and skill["cost_usd"] == pytest.approx(
        0.7
    )
    (uplift,) = summary["uplift"]
    assert uplift["reward"]["delta"] == pytest.approx(0.75)
    assert uplift["seconds"]["delta"] == pytest.approx((797 + 452) / 2 - 1383)


def test_condition_mapping_overrides_harbor_skills_and_is_checked(job, tmp_path):
    trials = load_trials([job], {job.name: "skill"})
    assert {t.condition for t in trials} == {"skill"}
    with pytest.raises(ReportInputError, match="condition 'with' is not one of"):
        load_trials([job], {job.name: "with"})


def test_cli_reads_a_folder_of_jobs_and_says_what_it_cannot_read(job, tmp_path):
    runner = CliRunner()
    done = runner.invoke(tasks, ["report", str(job.parent), "--out", str(tmp_path / "charts")])
    assert done.exit_code == 0, done.output
    assert "claude-code/claude-opus-4-1" in done.output and "overall (1 task)" in done.output
    assert "tokens in/out" in done.output and "100.0k/3.5k" in done.output
    empty = tmp_path / "empty"
    empty.mkdir()
    done = runner.invoke(tasks, ["report", str(empty)])
    assert done.exit_code == 1 and "neither a local results folder" in done.output
    assert "Traceback" not in done.output
    broken = tmp_path / "broken" / "job"
    (broken / "t__1").mkdir(parents=True)
    (broken / "config.json").write_text("{}")
    (broken / "t__1" / "result.json").write_text('{"finished_at": "2026-03-02T10:00:00Z"}')
    done = runner.invoke(tasks, ["report", str(broken)])
    assert done.exit_code == 1 and "not a Harbor TrialResult" in done.output
    done = runner.invoke(tasks, ["report", str(job), "--condition", "nojob"])
    assert done.exit_code == 2 and "expected JOB=skill or JOB=no-skill" in done.output


VALIDATE = """
import json, sys
from pathlib import Path
from harbor.models.job.config import JobConfig
from harbor.models.trial.result import TrialResult
job, copy = Path(sys.argv[1]), Path(sys.argv[2])
JobConfig.model_validate_json((job / "config.json").read_text())
copy.mkdir()
(copy / "config.json").write_text((job / "config.json").read_text())
for path in sorted(job.glob("*/result.json")):
    result = TrialResult.model_validate_json(path.read_text())
    (copy / path.parent.name).mkdir()
    (copy / path.parent.name / "result.json").write_text(result.model_dump_json(indent=2))
"""


def test_the_job_is_in_harbors_schema_and_reads_the_same_once_harbor_rewrites_it(
    harbor,  # noqa: F811
    job,
    tmp_path,
):
    """Harbor loads every record with its own models; its re-serialised job (all defaults and
    its computed `reward_valid`) gives the report exactly the same trials."""
    python = harbor.parent / "python"
    copy = tmp_path / "rewritten"
    done = subprocess.run(
        [str(python), "-c", VALIDATE, str(job), str(copy)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert load_harbor_job(copy) == load_harbor_job(job)
