"""The README's task tables say what the task specs hold: a task hardened (bugs added, weights
moved, trials re-run) without its README rows is caught here, not by a reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from task_harness import difficulty
from task_harness.spec import load_tasks

README = Path(__file__).resolve().parent.parent / "README.md"
SPECS = {spec.id: spec for spec in load_tasks()}


def _table_after(heading: str, header: str) -> list[list[str]]:
    """The cells of each row of the first table whose header row starts with `header`, after the
    README line `heading`."""
    text = README.read_text()
    section = text[text.index(heading) :]
    lines = section[section.index(header) :].splitlines()[2:]  # past the header and the rule
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _symptom_rows() -> dict[str, list[tuple[str, float]]]:
    """Task id -> the (bug, weight) pairs the symptoms table lists for it, in its order."""
    rows: dict[str, list[tuple[str, float]]] = {}
    task = ""
    table = _table_after(
        "### When each bug shows, and what the instruction reports", "| task (run) |"
    )
    for cells in table:
        if cells[0]:
            task = re.match(r"`([^`]+)`", cells[0]).group(1)
        bug, weight = re.match(r"`([^`]+)` \(\w+, ([\d.]+)\)", cells[1]).groups()
        rows.setdefault(task, []).append((bug, float(weight)))
    return rows


SYMPTOMS = _symptom_rows()
DIFFICULTY = {
    re.match(r"`([^`]+)`", cells[0]).group(1): cells
    for cells in _table_after(
        "### How hard each task is, measured", "| task | bugs the checker localises |"
    )
}


@pytest.mark.parametrize("task_id", sorted(SYMPTOMS))
def test_the_symptoms_table_lists_each_bug_of_the_task_with_its_weight(task_id):
    spec = SPECS[task_id]
    bugs = [(bug.id, bug.weight) for bug in spec.bugs if bug.kind == "bug"]
    assert sorted(SYMPTOMS[task_id]) == sorted(bugs), (
        f"{task_id}: run `grpo-check tasks symptoms {task_id}` and update its README rows"
    )


@pytest.mark.parametrize("task_id", sorted(DIFFICULTY))
def test_the_difficulty_table_row_is_the_recorded_measurement(task_id):
    spec = SPECS[task_id]
    _, localised, share, baseline, by_these, trial, label = DIFFICULTY[task_id]
    measured = difficulty.recorded(spec)
    bugs = [bug for bug in spec.bugs if bug.kind == "bug"]
    found, total = map(int, re.match(r"(\d+) of (\d+)", localised).groups())
    assert (found, total) == (len(measured.checker_found), len(bugs)), localised
    assert all(f"`{bug}`" in localised for bug in measured.checker_found), localised
    assert float(share) == pytest.approx(measured.checker_share, abs=0.005 + 1e-9), share
    assert float(baseline.split()[0]) == pytest.approx(measured.baseline_max), baseline
    assert by_these == measured.difficulty, by_these
    retired = " (retired from the headline)" if difficulty.solved_by_reading(spec) else ""
    assert label == spec.toml["metadata"]["difficulty"] + retired, label
    no_skill = difficulty.recorded_trials(spec).get("no_skill")
    expected = "-" if no_skill is None else f"{no_skill.reward:.2f} in {no_skill.minutes:g} min"
    if no_skill is not None and no_skill.fastest_full is not None:
        expected += f" (fastest {no_skill.fastest_full:g})"
    assert trial == expected, (trial, expected)


def test_the_headline_block_is_what_tasks_trials_prints():
    """The README's bottom line on blind trials is the command's output over the shipped
    task.toml records, not a figure typed once and left behind when a round re-runs."""
    from click.testing import CliRunner

    from task_harness.cli import tasks

    text = README.read_text()
    section = text[text.index("### The headline, measured") :]
    block = section[section.index("```\n$ grpo-check tasks trials\n") :]
    shown = block.split("\n", 2)[2].split("```", 1)[0]
    done = CliRunner().invoke(tasks, ["trials"])
    assert done.exit_code == 0, done.output
    assert shown == done.output
