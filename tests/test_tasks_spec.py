"""The task suite as specified: families, stage coverage, weights, symptom-only instructions."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from reference_impl.protocol import STAGES
from task_harness.build import build_task
from task_harness.spec import TaskSpecError, load_task, load_tasks

SPECS = load_tasks()


def test_suite_has_twelve_tasks_in_its_three_families():
    assert len(SPECS) >= 12
    assert {s.family for s in SPECS} == {"reference", "trl", "user"}


def test_every_stage_is_covered_by_some_task():
    covered = {b.stage for s in SPECS for b in s.bugs if b.kind == "bug"}
    assert covered == set(STAGES)


def test_suite_has_single_bug_three_bug_and_decoy_tasks():
    counts = [sum(b.kind == "bug" for b in s.bugs) for s in SPECS]
    assert 1 in counts and max(counts) >= 3
    assert sum(any(b.kind == "decoy" for b in s.bugs) for s in SPECS) >= 2


def test_bug_weights_sum_to_one_and_ids_are_lowercase_hyphenated():
    for spec in SPECS:
        assert sum(b.weight for b in spec.bugs) == pytest.approx(1.0), spec.id
        assert spec.id == spec.id.lower() and "_" not in spec.id


def test_skillsbench_trio_keeps_its_three_bugs_and_the_reasoning_decoy():
    trio = next(s for s in SPECS if s.id == "trl-skillsbench-trio")
    assert {b.stage for b in trio.bugs} == {"advantages", "logprobs", "decode"}
    decoy = next(b for b in trio.bugs if b.kind == "decoy")
    assert decoy.guards == "decode_blanks_plain"


def test_instructions_report_symptoms_not_the_injected_code():
    for spec in SPECS:
        text = spec.instruction
        for patch in spec.patches:
            if patch.kind == "bug":
                assert patch.mutant.replace.strip() not in text, spec.id
                assert patch.id not in text, spec.id


# Words that name a bug's mechanism rather than what a user watched (issue: instructions state
# symptoms). A logged metric's key (a `code span` with a slash, e.g. `clip_ratio/region_mean`)
# is what the user saw and may be quoted.
MECHANISM_WORDS = re.compile(
    r"clip|epsilon|mask|\bsigns?\b|kl direction|direction of the kl|token[- ]mean|normali[sz]"
    r"|old log-?prob|stale|\bpad",
    re.IGNORECASE,
)
METRIC_KEY = re.compile(r"`[^`]*/[^`]*`")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_instructions_use_no_vocabulary_of_the_bug(spec):
    prose = METRIC_KEY.sub("", spec.instruction)
    assert not MECHANISM_WORDS.findall(prose), spec.id


def test_every_task_builds_from_the_current_sources(tmp_path):
    """Each patch applies exactly once to today's reference_impl or installed TRL."""
    for spec in SPECS:
        root = build_task(spec, tmp_path)
        assert (root / "tests" / "task.json").exists()
        assert (root / "solution" / "solve.sh").exists()
        workspace = root / "environment" / "workspace"
        assert not (workspace / "tests").exists() and not (workspace / "reference_impl").exists()
        shutil.rmtree(root)


def test_trl_workspace_holds_a_patched_copy_not_the_repository(tmp_path):
    spec = next(s for s in SPECS if s.id == "trl-never-stops")
    workspace = build_task(spec, tmp_path) / "environment" / "workspace"
    trainer = (workspace / "trl" / "trl" / "trainer" / "grpo_trainer.py").read_text()
    assert "completion_mask = (completion_ids != self._tokenizer.pad_token_id).int()" in trainer
    tokenizer = json.loads((workspace / "model" / "tokenizer_config.json").read_text())
    assert tokenizer["pad_token"] == tokenizer["eos_token"]  # the bug's condition: pad == EOS
    assert not list(Path(spec.folder).rglob("grpo_trainer.py"))  # TRL code is never stored


def test_a_spec_whose_weights_do_not_sum_to_one_is_refused(tmp_path):
    source = next(s for s in SPECS if s.id == "rz-format-stop").folder
    folder = tmp_path / "bad-task"
    shutil.copytree(source, folder)
    toml = folder / "task.toml"
    toml.write_text(
        toml.read_text().replace("weight = 0.15, condition", "weight = 0.65, condition", 1)
    )
    with pytest.raises(TaskSpecError, match="sum to 1.5"):
        load_task(folder)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_at_least_half_of_the_bug_weight_needs_a_measurement(spec):
    """Bugs whose code reads as correct and that show only under a condition of the task's run
    (`condition`, checked to hold when the spec loads) carry at least half of the bug weight."""
    bugs = [b for b in spec.bugs if b.kind == "bug"]
    bound = sum(b.weight for b in bugs if b.condition)
    assert bound >= 0.5 * sum(b.weight for b in bugs) - 1e-9, (spec.id, bound)


def test_a_bug_whose_condition_the_run_lacks_or_that_is_unknown_is_refused(tmp_path):
    source = next(s for s in SPECS if s.id == "rz-format-stop").folder
    folder = tmp_path / "bad-task"
    shutil.copytree(source, folder)
    toml = folder / "task.toml"
    text = toml.read_text()
    toml.write_text(text.replace("ref_sync_every = 5", "ref_sync_every = 0"))
    with pytest.raises(TaskSpecError, match=r"shows when reference synced \(ref_sync_every > 0\)"):
        load_task(folder)
    toml.write_text(text.replace('condition = "pad == EOS"', 'condition = "on Tuesdays"'))
    with pytest.raises(TaskSpecError, match="unknown condition 'on Tuesdays'"):
        load_task(folder)


def test_a_spec_edited_after_it_was_loaded_is_refused_with_its_cause(tmp_path):
    """`tasks verify` loads every spec, then builds them one by one: a task.toml edited in
    between gives a TaskSpecError naming the task (one line from the CLI), not a ValueError."""
    source = next(s for s in SPECS if s.id == "rz-format-stop").folder
    folder = tmp_path / "edited-task"
    shutil.copytree(source, folder)
    spec = load_task(folder)
    toml = folder / "task.toml"
    toml.write_text(re.sub(r"minutes = [\d.]+", "minutes = 99", toml.read_text(), count=1))
    with pytest.raises(TaskSpecError, match="task.toml edited since it was loaded"):
        build_task(spec, tmp_path / "built")
