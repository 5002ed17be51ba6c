"""The shortcut baselines of `tasks verify`: each does what a shortcut-taking agent would, and a
task counts as sound only when none of them scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from task_harness.baselines import baseline_problem
from task_harness.build import build_task, installed_trl
from task_harness.installed import package_dir
from task_harness.runner import TrialResult
from task_harness.shortcuts import ShortcutUnavailable, applies, notes_names, revert_hunks, take
from task_harness.spec import load_tasks
from task_harness.trainers.rlzero_reference_copy import SHIMS

pytestmark = pytest.mark.xdist_group("tasks-e2e")


def _built(task_id: str, out: Path) -> Path:
    (spec,) = load_tasks(ids=[task_id])
    return build_task(spec, out)


def _task(built: Path) -> dict:
    return json.loads((built / "tests" / "task.json").read_text())


def test_each_shortcut_applies_to_one_family():
    assert applies("upstream-restore", "trl") and not applies("upstream-restore", "reference")
    assert applies("upstream-hunks", "trl") and not applies("upstream-hunks", "reference")
    assert applies("reference-copy", "reference") and not applies("reference-copy", "trl")
    assert applies("stock-trainer", "user") and not applies("stock-trainer", "trl")


def test_reference_copy_puts_reference_impl_in_place_and_leaves_protected_files(tmp_path):
    """reference_impl's modules under `rlzero/_reference/` (imports renamed), each of rlzero's
    stage modules ending with the shim that calls them, the protected files untouched."""
    built = _built("rz-format-stop", tmp_path)
    workspace = built / "environment" / "workspace"
    task = _task(built)
    protected = {rel: (workspace / rel).read_bytes() for rel in task["protected"]}
    before = {p: p.read_text() for p in (workspace / "rlzero").glob("*.py")}
    replaced = take("reference-copy", workspace, task)
    assert "rlzero/advantages.py" in replaced
    copied = workspace / "rlzero" / "_reference"
    for module in package_dir("reference_impl").glob("*.py"):
        text = module.read_text().replace("reference_impl", "rlzero._reference")
        assert (copied / module.name).read_text() == text, module.name
    for relative, shim in SHIMS.items():
        path = workspace / relative
        assert (relative in replaced) == (relative not in task["protected"]), relative
        if relative in replaced:
            assert path.read_text() == before[path] + "\n" + shim, relative
    assert {rel: (workspace / rel).read_bytes() for rel in task["protected"]} == protected


def test_upstream_restore_gives_back_the_release_the_fork_was_made_from(tmp_path):
    """The fork is made from the TRL installed here, so after the restore its files are the
    installed release's again (downloaded from the registry, compared with what pip installed)."""
    built = _built("trl-never-stops", tmp_path)
    workspace = built / "environment" / "workspace"
    try:
        replaced = take("upstream-restore", workspace, _task(built))
    except ShortcutUnavailable as error:  # the claim is about the task, not the network
        pytest.skip(str(error))
    assert replaced, "the fork differs from upstream in at least the bug's file"
    fork = workspace / "trl" / "trl"
    for path in replaced:
        relative = (workspace / path).relative_to(fork)
        assert (fork / relative).read_bytes() == (installed_trl() / relative).read_bytes()


def test_a_shortcut_without_its_target_is_a_one_line_cause(tmp_path):
    with pytest.raises(ShortcutUnavailable, match="no TRL fork"):
        take("upstream-restore", tmp_path, {"protected": {}, "fork_version": "1.16.0"})
    with pytest.raises(ShortcutUnavailable, match="no package rlzero"):
        take("reference-copy", tmp_path, {"protected": {}, "trainer": "rlzero"})


def _trial(reward: float, bugs: dict[str, float], status: str = "ok") -> TrialResult:
    return TrialResult("t", "reference-copy", "no-skill", 0, reward, bugs, status)


@pytest.mark.parametrize(
    ("trial", "why"),
    [
        (_trial(0.5, {"a": 1.0, "b": 0.0}), ""),
        (_trial(0.6, {"a": 1.0, "b": 0.0}), "scores 0.60"),
        (_trial(0.5, {"a": 1.0, "b": 1.0}), "fixes every bug"),
        (_trial(0.0, {}, status="agent-error"), "could not run"),
    ],
)
def test_a_baseline_may_score_at_most_half_and_never_fix_every_bug(trial, why):
    problem = baseline_problem("reference-copy", trial, ["a", "b"])
    assert (why in problem) if why else problem == ""


# --- upstream-hunks: the release restored hunk by hunk, the fork's customisations kept ----------
# Ten lines apart: `diff -u` (3 lines of context) shows a change of `a` and one of `i` as two hunks.
UPSTREAM = (
    "def f(x):\n    a = 1\n"
    + "".join(f"    k{n} = {n}\n" for n in range(8))
    + "    i = 8\n    return x\n"
)


def test_notes_names_are_the_identifiers_in_backticks():
    notes = "Keeps `GRPOConfig.scale_rewards` and `<think>` tags; `True` is no name, nor `ab`."
    assert notes_names(notes) == {"GRPOConfig", "scale_rewards", "think"}


def test_a_hunk_without_fork_comment_or_notes_name_goes_back_upstream():
    fork = UPSTREAM.replace("    a = 1\n", "    a = 100\n").replace("    i = 8\n", "    i = 9\n")
    assert revert_hunks(UPSTREAM, fork, frozenset()) == UPSTREAM


def test_a_hunk_with_a_fork_comment_or_a_notes_name_stays():
    commented = UPSTREAM.replace("    a = 1\n", "    # Fork: a larger a\n    a = 100\n")
    assert revert_hunks(UPSTREAM, commented, frozenset()) == commented
    named = UPSTREAM.replace("    i = 8\n", "    i = scale_rewards\n")
    assert revert_hunks(UPSTREAM, named, frozenset({"scale_rewards"})) == named
    both = commented.replace("    i = 8\n", "    i = 9\n")  # far apart: two hunks, one kept
    assert revert_hunks(UPSTREAM, both, frozenset()) == commented


def test_upstream_hunks_leaves_the_never_stops_bug_inside_a_customisation(tmp_path):
    """trl-never-stops' bug rewrites `completion_mask`, which NOTES.md names for the fork's
    truncation filter: restoring upstream hunk by hunk keeps it, so the shortcut scores 0."""
    built = _built("trl-never-stops", tmp_path)
    workspace = built / "environment" / "workspace"
    try:
        take("upstream-hunks", workspace, _task(built))
    except ShortcutUnavailable as error:
        pytest.skip(str(error))
    trainer = (workspace / "trl" / "trl" / "trainer" / "grpo_trainer.py").read_text()
    assert "completion_mask = (completion_ids != self._tokenizer.pad_token_id).int()" in trainer
