"""`tasks generate`: rlzero tasks drawn from the shipped rlzero bugs, run and measured before the
instruction is written (task_harness/generate.py, task_harness/symptoms.py)."""

from __future__ import annotations

import random
import re
import shutil

import pytest
from test_tasks_spec import MECHANISM_WORDS

from task_harness import generate
from task_harness.build import build_task
from task_harness.generate import (
    LOSS_STAGES,
    apply_together,
    draw,
    generate_task,
    load_corpus,
    train_config,
)
from task_harness.generate import write_task as write_generated
from task_harness.runner import run_trial
from task_harness.spec import load_task

CORPUS = load_corpus()


@pytest.mark.parametrize("seed", range(12))
def test_a_draw_has_distinct_stages_half_conditioned_and_a_run_where_each_condition_holds(
    seed, tmp_path
):
    rng = random.Random(seed)
    count = 1 + seed % 3
    bugs = draw(CORPUS.bugs, rng, count, exclude=set())
    stages = [d.bug.stage for d in bugs]
    assert len(set(stages)) == count and len(set(stages) & LOSS_STAGES) <= 1
    assert 2 * sum(1 for d in bugs if d.bug.condition) >= count
    decoy = CORPUS.decoys[seed % len(CORPUS.decoys)]
    train = train_config(bugs)
    folder = write_generated(tmp_path / "gen", bugs, decoy, train, [])
    spec = load_task(folder)  # refuses a condition the run lacks
    assert sum(b.weight for b in spec.bugs if b.kind == "decoy") == pytest.approx(0.2)
    kept = bugs[:1]
    redrawn = draw(CORPUS.bugs, rng, count, exclude={d.bug.id for d in bugs[1:]}, kept=kept)
    assert redrawn[0] == kept[0] and not {d.bug.id for d in redrawn[1:]} & {
        d.bug.id for d in bugs[1:]
    }


def test_two_bugs_that_rewrite_the_same_text_are_never_drawn_together():
    """The sampler's and the scorer's temperature bugs (different stages) both rewrite the
    config's help for `temperature`: applied together the second finds nothing, so no draw holds
    both, whatever the seed."""
    by_id = {d.bug.id: d for d in CORPUS.bugs}
    pair = [by_id["sampler_without_temperature"], by_id["scoring_without_temperature"]]
    assert pair[0].bug.stage != pair[1].bug.stage
    assert apply_together([pair[0].mutant]) and apply_together([pair[1].mutant])
    assert not apply_together([d.mutant for d in pair])
    ids = {d.bug.id for d in pair}
    for seed in range(20):  # without the check, seeds 8 and 16 draw both among 4 bugs
        drawn = {d.bug.id for d in draw(CORPUS.bugs, random.Random(seed), 4, exclude=set())}
        assert not ids <= drawn, seed


def test_a_bug_the_run_does_not_show_is_redrawn_and_the_others_kept(tmp_path, monkeypatch):
    """Seed 3's first draw, with its measurement stood in (the run is the e2e's below): the bug
    whose run looked like the fixed one is replaced, the other kept, and the spec written holds
    the second draw and the sentences measured for it."""
    rng = random.Random(3)
    first = [d.bug.id for d in draw(CORPUS.bugs, rng, 2, exclude=set())]
    measured = []

    def measure(folder, bugs):
        measured.append([d.bug.id for d in bugs])
        return ["The reward stays at 0.123."], [first[1]] if len(measured) == 1 else []

    monkeypatch.setattr(generate, "measure", measure)
    spec = load_task(generate_task(3, 2, tmp_path / "specs", verify=False))
    assert measured[0] == first and len(measured) == 2, measured
    ids = [b.id for b in spec.bugs if b.kind == "bug"]
    assert ids[0] == first[0] and first[1] not in ids and len(ids) == 2, (first, ids)
    assert "The reward stays at 0.123." in " ".join(spec.instruction.split())


@pytest.mark.xdist_group("tasks-generate")
def test_a_generated_task_states_its_measured_symptoms_and_its_oracle_scores_one(tmp_path):
    # seed 0's first draw shows both bugs in its run, so its 4 training runs are measured once
    folder = generate_task(0, 2, tmp_path / "specs", verify=False)
    spec = load_task(folder)
    text = " ".join(spec.instruction.split())  # the instruction is wrapped at 100 columns
    assert "Before the last refactor this run reached a mean reward of 0.9" in text
    assert re.search(r"\d\.\d{3}", text.split("Before", 1)[1])  # a measured figure
    assert not MECHANISM_WORDS.findall(re.sub(r"`[^`]*/[^`]*`", "", text))
    built = build_task(spec, tmp_path / "built")
    assert run_trial(built, "oracle").reward == 1.0
    shutil.rmtree(built)
