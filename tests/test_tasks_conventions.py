"""No shared answer across rlzero tasks: each has conventions of its own
(task_harness/conventions.py), so one task's fixed trainer put in another's workspace scores low
there, as the verifier judges it (every probe of a bug's stage, and a decoy's probes once the bug
it guards passes, must equal the task's intended trainer's)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from rlzero_harness import inputs_of, observe

from task_harness.baselines import BASELINE_MAX
from task_harness.build import build_task
from task_harness.conventions import (
    BEYOND_CONVENTIONS,
    DECOY_NEEDS,
    Conventions,
    draw,
    setup_patches,
)
from task_harness.spec import load_tasks
from task_harness.verifier import judge, rlzero_probes

RZ_TASKS = [spec for spec in load_tasks() if spec.trainer == "rlzero"]
STAGES = sorted({stage for stage, _ in rlzero_probes.PROBES.values()})


def _observe_all(root: Path, inputs: dict | None = None, names: list[str] | None = None) -> dict:
    """Every probe (or those `names`) on the rlzero under `root`, with the probes' `inputs` (None:
    its own)."""
    if names is not None:
        return observe(root, [], names, inputs)
    return observe(root, STAGES, None, inputs)


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    """Each rz task's intended trainer."""
    out = tmp_path_factory.mktemp("rz-conventions")
    return {spec.id: build_task(spec, out) / "tests" / "expected" for spec in RZ_TASKS}


@pytest.fixture(scope="module")
def intended(trees) -> dict[str, dict]:
    """Each rz task's intended trainer, observed by every probe."""
    return {spec.id: _observe_all(trees[spec.id]) for spec in RZ_TASKS}


def _score(spec, seen: dict, expected: dict) -> float:
    """The reward the verifier gives `spec` for a trainer whose probes gave `seen` (learning
    gate aside)."""
    bugs = [b for b in spec.bugs if b.kind == "bug"]
    passed = {
        b.id: all(
            judge.same(seen[name], value)
            for name, value in expected.items()
            if rlzero_probes.PROBES[name][0] == b.stage
        )
        for b in bugs
    }
    total = sum(b.weight for b in bugs if passed[b.id])
    for decoy in (b for b in spec.bugs if b.kind == "decoy"):
        if passed[decoy.guards] and all(judge.same(seen[p], expected[p]) for p in decoy.probes):
            total += decoy.weight
    return round(total, 4)


def test_each_task_passes_its_own_intended_trainer(intended):
    """The judge above is the verifier's: the task's own trainer scores 1."""
    for spec in RZ_TASKS:
        assert _score(spec, intended[spec.id], intended[spec.id]) == 1.0, spec.id


def test_no_rz_task_oracle_solves_another(intended, trees):
    """Swapping any rz task's fixed rlzero into another rz task scores at most BASELINE_MAX. The
    donor is observed as that task's verifier observes it: the probes that take inputs get the
    task's (its intended trainer's)."""
    given = sorted(rlzero_probes.GIVEN)
    scores = {}
    for spec in RZ_TASKS:
        inputs = inputs_of(trees[spec.id])
        for donor in RZ_TASKS:
            if donor.id != spec.id:
                seen = intended[donor.id] | _observe_all(trees[donor.id], inputs, given)
                scores[donor.id, spec.id] = _score(spec, seen, intended[spec.id])
    high = {pair: s for pair, s in scores.items() if s > BASELINE_MAX}
    assert not high, f"a sibling's oracle scores above {BASELINE_MAX}: {high}"


def test_rz_tasks_state_distinct_conventions():
    """No two rz tasks share their NOTES.md conventions sentence (the intended trainer's)."""
    notes = [spec.toml["grpo"]["notes"] for spec in RZ_TASKS]
    assert len(set(notes)) == len(notes)


def test_notes_say_the_conventions_listed_are_all_of_them():
    """Every rz task's NOTES.md, shipped or drawn, closes its list of conventions: a behaviour the
    code calls deliberate but the notes leave out is a bug, not a guess left to the agent."""
    for spec in RZ_TASKS:
        assert spec.toml["grpo"]["notes"].endswith(BEYOND_CONVENTIONS), spec.id
    assert draw(random.Random(0)).notes().endswith(BEYOND_CONVENTIONS)


@pytest.mark.parametrize("decoy", sorted(DECOY_NEEDS))
def test_a_draw_keeps_what_its_decoy_checks(decoy):
    for seed in range(20):
        drawn = draw(random.Random(seed), decoy)
        for key, value in DECOY_NEEDS[decoy].items():
            assert getattr(drawn, key) == value


def test_pristine_conventions_need_no_patch():
    assert setup_patches(Conventions()) == []
    assert len(setup_patches(Conventions(1e-4, "sample", 0.1, 0.3, "tokens"))) == 8


@pytest.mark.parametrize("seed", range(8))
def test_drawn_conventions_apply_beside_every_corpus_bug(seed):
    """A generated task's convention patches and any bug of the corpus apply to the pristine
    trainer together (their `find` texts do not overlap), except a bug written for the other
    convention (`rollout_std_scale` rewrites the population std, which a drawn sample std
    replaces): its MutantError names it, and `tasks generate` redraws the bug it names
    (`generate.leaves_traces`)."""
    from task_harness.build import TRAINERS
    from task_harness.generate import load_corpus
    from task_harness.mutants import Mutant, MutantError

    source = {
        f"rlzero/{path.name}": path.read_text()
        for path in (TRAINERS / "rlzero" / "rlzero").glob("*.py")
    }
    for entry in setup_patches(draw(random.Random(seed))):
        mutant = Mutant(**{k: v for k, v in entry.items() if k != "kind"}, stage="", description="")
        source[mutant.file] = mutant.apply_to_text(source[mutant.file])
    refused = []
    for drawable in load_corpus().bugs:
        if drawable.mutant.file in source:
            try:
                drawable.mutant.apply_to_text(source[drawable.mutant.file])
            except MutantError as error:
                assert drawable.bug.id in str(error), error
                refused.append(drawable.bug.id)
    assert set(refused) <= {"rollout_std_scale"}, refused
