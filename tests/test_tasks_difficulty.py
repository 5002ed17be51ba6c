"""A task's difficulty is measured (task_harness/difficulty.py): each task.toml records the
checker's findings and the best baseline, its label follows the rule from them, and the
recorded findings are what grpo-check reports on the task today."""

from __future__ import annotations

import json
import shutil
import tomllib

import pytest
from click.testing import CliRunner

from task_harness import difficulty
from task_harness.cli import tasks
from task_harness.spec import TASKS_DIR, load_task, load_tasks

pytestmark = pytest.mark.xdist_group("tasks-difficulty")


def test_the_label_follows_the_larger_solved_share():
    assert difficulty.label(0.0, 0.0) == "hard"
    assert difficulty.label(0.3, 0.45) == "hard"
    assert difficulty.label(0.5, 0.0) == "medium"
    assert difficulty.label(0.0, 0.5) == "medium"
    assert difficulty.label(0.9375, 0.4) == "medium"
    assert difficulty.label(1.0, 0.0) == "easy"
    assert difficulty.label(0.2, 1.0) == "easy"


def test_a_blind_trial_labels_by_the_reward_and_minutes_without_the_skill():
    assert difficulty.trial_label(difficulty.Trial(1.0, 3.5)) == "easy"
    assert difficulty.trial_label(difficulty.Trial(1.0, 9.9)) == "easy"
    assert difficulty.trial_label(difficulty.Trial(1.0, 10)) == "medium"
    assert difficulty.trial_label(difficulty.Trial(0.75, 4)) == "medium"
    assert difficulty.trial_label(difficulty.Trial(0.5, 30)) == "medium"
    assert difficulty.trial_label(difficulty.Trial(0.45, 30)) == "hard"


def test_one_quick_full_pass_among_several_trials_makes_a_task_easy():
    """Issue: a task a no-skill agent fully solves in under 10 minutes is retired or hardened,
    so one such trial counts even where the mean of its round is slower."""
    assert difficulty.trial_label(difficulty.Trial(1.0, 13.1, fastest_full=3.7)) == "easy"
    assert difficulty.trial_label(difficulty.Trial(0.9, 12, fastest_full=9.9)) == "easy"
    assert difficulty.trial_label(difficulty.Trial(1.0, 13.1, fastest_full=12)) == "medium"


def test_the_report_leaves_out_the_tasks_solved_by_reading_and_the_diff_solvable_forks():
    """The headline uplift is over the tasks that measure the skill: an easy-by-trial task (a
    no-skill agent fixed every bug in minutes) and a diff-solvable fork keep their own rows
    and are named, with why, beside the overall figure."""
    reasons = difficulty.left_out_of_uplift(SPECS)
    for spec in SPECS:
        trials = difficulty.recorded_trials(spec)
        quick = "no_skill" in trials and difficulty.trial_label(trials["no_skill"]) == "easy"
        if difficulty.diff_solvable(spec):
            assert reasons[spec.id] == "diff-solvable"
        elif quick:
            assert reasons[spec.id] == "solved by reading"
        else:
            assert spec.id not in reasons
    assert reasons["user-loo-clip"] == "solved by reading"  # 3.7 min in one of its two trials


def test_the_headline_averages_each_condition_over_the_tasks_the_uplift_counts():
    """Each task with trials in both conditions counts once (its record is already the mean of
    its trials); the diff-solvable forks and the tasks solved by reading do not count."""
    left_out = difficulty.left_out_of_uplift(SPECS)
    records = {spec.id: spec.toml["grpo"].get("difficulty", {}).get("trials", {}) for spec in SPECS}
    counted = [task for task, t in records.items() if len(t) == 2 and task not in left_out]
    shown = difficulty.headline(SPECS, left_out)
    assert shown.tasks == tuple(counted)
    assert shown.no_skill == pytest.approx(
        sum(records[task]["no_skill"]["reward"] for task in counted) / len(counted)
    )
    assert shown.skill == pytest.approx(
        sum(records[task]["skill"]["reward"] for task in counted) / len(counted)
    )
    assert "user-loo-clip" not in shown.tasks
    assert len(difficulty.headline(SPECS, {}).tasks) == len(counted) + len(
        [task for task in left_out if len(records[task]) == 2]
    )


def test_the_target_needs_both_a_low_no_skill_mean_and_a_wide_gap():
    def met(no_skill: float, skill: float) -> bool:
        return difficulty.Headline(("t",), no_skill, skill).met

    assert met(0.5, 0.8) and met(0.2, 1.0)
    assert not met(0.51, 1.0)  # the gap is wide, but the tasks are solved without the skill
    assert not met(0.4, 0.69)  # hard without the skill, but the skill adds too little


def test_tasks_trials_prints_each_record_and_the_headline_and_fails_without_any():
    done = CliRunner().invoke(tasks, ["trials"])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    with_trials = [s for s in SPECS if difficulty.recorded_trials(s)]
    assert [line.split()[0] for line in lines[1 : 1 + len(with_trials)]] == [
        s.id for s in with_trials
    ]
    assert "user-loo-clip" in done.output and "(fastest full 3.7)" in done.output
    assert "(left out: solved by reading)" in done.output
    headline = difficulty.headline(SPECS, difficulty.left_out_of_uplift(SPECS))
    assert (
        f"headline, {len(headline.tasks)} tasks: no skill {headline.no_skill:.3f}, skill"
        f" {headline.skill:.3f}"
    ) in done.output
    fork = CliRunner().invoke(tasks, ["trials", "trl-never-stops"])
    assert fork.exit_code == 1
    assert "no task here records a blind trial" in fork.output


def test_a_user_task_is_checked_as_its_declared_subclass_on_its_release(tmp_path):
    """The target is the conventions YAML that `declare_user_conventions` writes, and the
    release the task pins comes first on the child's path."""
    from task_harness.releases import trl_release_path

    spec = next(s for s in load_tasks() if s.family == "user" and s.trl_version == "1.14.2")
    target, env = difficulty._target(spec, tmp_path)
    assert target == difficulty.USER_CONVENTIONS
    assert env["PYTHONPATH"].split(":")[0] == str(trl_release_path("1.14.2"))


def test_a_check_that_errors_flags_its_stage_as_a_failure_does():
    """rz-succ-temperature's untempered scorer raises inside the adapter on the buggy trainer:
    the checker reports an error in that stage, and the user reads it as a finding."""
    results = [
        {"stage": "logprobs", "check": "logprobs.temperature", "status": "error"},
        {"stage": "logprobs", "check": "logprobs.shift", "status": "pass"},
        {"stage": "ratio", "check": "ratio.on_policy", "status": "fail"},
        {"stage": "kl", "check": "kl.k3", "status": "skip"},
    ]
    assert difficulty.flagged_checks(results) == {
        "logprobs": {"logprobs.temperature"},
        "ratio": {"ratio.on_policy"},
    }


# `tasks difficulty` drives the checker on a fork, an rlzero workspace, or a user task's subclass
# with the team's conventions declared by `profile --write` on its fixed trainer: every task is
# measured, and the tasks of the two new families also have blind trials.
SPECS = load_tasks()


@pytest.mark.parametrize(
    "spec", [s for s in SPECS if s.family in ("reference", "user")], ids=lambda s: s.id
)
def test_each_task_of_the_two_new_families_records_a_blind_trial_per_condition(spec):
    """Issue: a task ships with at least one blind trial per condition, recorded where its label
    is derived (README, "What real agents did, blind", has the table and how bugs were found)."""
    trials = difficulty.recorded_trials(spec)
    assert set(trials) == {"no_skill", "skill"}, f"{spec.id}: trials {sorted(trials)}"
    assert all(0 <= t.reward <= 1 and t.minutes > 0 for t in trials.values()), trials


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_every_task_records_its_measurement_and_is_labelled_by_its_trials_or_it(spec):
    measured = difficulty.recorded(spec)
    assert measured is not None, f"{spec.id}: run `grpo-check tasks difficulty --write {spec.id}`"
    bugs = {b.id: b.weight for b in spec.bugs if b.kind == "bug"}
    assert set(measured.checker_found) <= set(bugs)
    share = sum(bugs[b] for b in measured.checker_found) / sum(bugs.values())
    assert measured.checker_share == pytest.approx(share, abs=1e-4)
    assert spec.toml["metadata"]["difficulty"] == difficulty.stated_label(spec, measured)


def test_write_replaces_the_label_and_the_table(tmp_path):
    folder = tmp_path / "rz-format-stop"
    shutil.copytree(TASKS_DIR / "rz-format-stop", folder)
    toml = folder / "task.toml"  # without its trials, the measurement labels it
    toml.write_text(toml.read_text().split(difficulty.TRIALS_TABLE)[0])
    spec = load_task(folder)
    difficulty.write(spec, difficulty.Measurement(("pad_masks_eos",), 0.375, 0.1))
    every_bug = tuple(b.id for b in spec.bugs if b.kind == "bug")
    difficulty.write(load_task(folder), difficulty.Measurement(every_bug, 1.0, 0.0))
    text = (folder / "task.toml").read_text()
    assert text.count("[grpo.difficulty]") == 1
    parsed = tomllib.loads(text)
    assert parsed["metadata"]["difficulty"] == "easy"
    assert parsed["grpo"]["difficulty"] == {
        "checker_found": list(every_bug),
        "checker_share": 1.0,
        "baseline_max": 0.0,
    }
    assert parsed["grpo"]["bugs"] == spec.toml["grpo"]["bugs"]  # the rest is untouched


def test_the_command_remeasures_a_task_as_recorded_and_says_when_its_label_is_stale(tmp_path):
    """grpo-check on rz-format-stop's buggy and fixed trainer (through the rlzero adapter) finds
    the bugs recorded in its task.toml; a label that disagrees with the measurement fails."""
    shipped = load_task(TASKS_DIR / "rz-format-stop")
    recorded = difficulty.recorded(shipped)
    tasks_dir = tmp_path / "tasks"
    shutil.copytree(shipped.folder, tasks_dir / shipped.id)
    toml = tasks_dir / shipped.id / "task.toml"
    stated = shipped.toml["metadata"]["difficulty"]
    wrong = "easy" if stated != "easy" else "hard"
    toml.write_text(toml.read_text().replace(f'difficulty = "{stated}"', f'difficulty = "{wrong}"'))
    verified = tmp_path / "verify.json"
    best = {"reference-copy": recorded.baseline_max}
    verified.write_text(json.dumps([{"id": shipped.id, "baselines": best}]))
    done = CliRunner().invoke(
        tasks, ["difficulty", "--tasks-dir", str(tasks_dir), "--baselines", str(verified)]
    )
    assert done.exit_code == 1, done.output
    assert f"-> {stated}  (task.toml: {wrong})" in done.output
    found = done.output.split("found: ", 1)[1].split(")", 1)[0]
    assert tuple(found.split(", ")) == recorded.checker_found


def test_write_keeps_the_trials_and_their_label(tmp_path):
    """A new measurement replaces the checker and baseline figures, never the blind trials, and
    the label stays the trials'."""
    shipped = load_task(TASKS_DIR / "user-loo-clip")  # two trials a condition: fastest_full
    trials = difficulty.recorded_trials(shipped)
    folder = tmp_path / shipped.id
    shutil.copytree(shipped.folder, folder)
    every_bug = tuple(b.id for b in shipped.bugs if b.kind == "bug")
    difficulty.write(load_task(folder), difficulty.Measurement(every_bug, 1.0, 0.0))
    difficulty.write(load_task(folder), difficulty.Measurement((), 0.0, 0.0))
    written = load_task(folder)
    assert difficulty.recorded_trials(written) == trials
    assert written.toml["metadata"]["difficulty"] == difficulty.trial_label(trials["no_skill"])
    assert written.toml["grpo"]["difficulty"]["checker_share"] == 0.0


@pytest.mark.parametrize("spec", [s for s in SPECS if s.family == "trl"], ids=lambda s: s.id)
def test_a_fork_task_records_its_hunk_restore_and_is_diff_solvable_above_0_3(spec):
    """Every fork task records what `upstream-hunks` scored (`tasks difficulty --write` with a
    verify run); above 0.3 it is diff-solvable, which the report leaves out of the uplift."""
    measured = difficulty.recorded(spec)
    assert measured is not None and measured.upstream_hunks is not None, spec.id
    assert measured.upstream_hunks <= measured.baseline_max
    assert difficulty.diff_solvable(spec) == (measured.upstream_hunks > 0.3)


@pytest.mark.parametrize("alone_shows", [False, True], ids=["knock-on", "shows-alone"])
def test_a_stage_explained_as_a_knock_on_counts_only_if_its_bug_alone_shows(
    alone_shows, tmp_path, monkeypatch
):
    """user-ref-anchor with every bug in: grpo-check flags ratio, kl and clipping, and names
    ratio and kl as roots (the ratio of 1 breaks the clipping checks). The dual clip counts as
    found only if the fixed workspace with that bug alone gets clipping flagged."""
    from task_harness.build import build_task

    spec = load_task(TASKS_DIR / "user-ref-anchor")
    built = build_task(spec, tmp_path / "built")
    monkeypatch.setattr(difficulty, "declare_user_conventions", lambda *args: None)
    runs = {
        "buggy": ({"ratio": {"r"}, "kl": {"k"}, "clipping": {"c"}}, {"ratio", "kl"}),
        "alone-dual_clip_from_one": ({"clipping": {"c"}} if alone_shows else {}, set()),
    }
    seen = []

    def checker_run(spec, workspace):
        seen.append(workspace.name)
        return runs.get(workspace.name, ({}, set()))

    monkeypatch.setattr(difficulty, "checker_run", checker_run)
    found = difficulty.checker_findings(spec, built)
    expected = ["kl_per_completion_mean", "old_logps_from_this_pass"]
    if alone_shows:
        expected.append("dual_clip_from_one")
    assert sorted(found) == sorted(expected)
    assert seen == ["buggy", "fixed", "alone-dual_clip_from_one"]  # only the knock-on is rerun
