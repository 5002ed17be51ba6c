"""`tasks generate`: rlzero tasks drawn from the shipped rlzero bugs, run and measured before the
instruction is written (task_harness/generate.py, task_harness/symptoms.py)."""

from __future__ import annotations

import math
import random
import re
import shutil

import pytest
from test_tasks_spec import MECHANISM_WORDS

from task_harness import symptoms
from task_harness.build import build_task
from task_harness.generate import LOSS_STAGES, draw, generate_task, load_corpus, train_config
from task_harness.generate import write_task as write_generated
from task_harness.runner import run_trial
from task_harness.spec import load_task

CORPUS = load_corpus()


def _log(rewards, ratio=None, kl=None, loss=0.01) -> str:
    lines = []
    for i, reward in enumerate(rewards, 1):
        extra = "" if ratio is None else f"  ratio_max {ratio:.4f}"
        extra += "" if kl is None else f"  kl {kl:.4f}"
        lines.append(f"step {i:3d}  reward {reward:.3f}  loss {loss:+.4f}  length 2.00{extra}")
    return "\n".join(lines)


FIXED = symptoms.parse(_log([0.1] * 10 + [0.6] * 10 + [0.95] * 10, ratio=1.0), "", 0)


def test_a_log_is_parsed_with_its_extra_columns_and_its_crash():
    run = symptoms.parse(
        _log([0.5, 0.7], ratio=1.2, kl=0.3, loss=float("nan")),
        "Traceback (most recent call last):\n  ...\nRuntimeError: probability tensor contains nan\n",
        1,
    )
    assert [s["reward"] for s in run.steps] == [0.5, 0.7]
    assert run.steps[0]["ratio_max"] == 1.2 and run.steps[1]["kl"] == 0.3
    assert run.nan_loss and run.crash == "RuntimeError: probability tensor contains nan"
    assert symptoms.parse(_log([0.5]), "", -9).crash == ""  # cut by us, not a crash


def test_a_run_like_the_fixed_one_shows_nothing_and_each_symptom_is_seen():
    assert symptoms.differences(FIXED, FIXED, 0.9) == []
    flat = symptoms.parse(_log([0.1] * 50, ratio=1.0), "", -9)
    assert {"reward", "target"} <= set(symptoms.differences(flat, FIXED, 0.9))
    off_policy = symptoms.parse(_log([0.1] * 10 + [0.6] * 10 + [0.95] * 10, ratio=1.28), "", 0)
    assert symptoms.differences(off_policy, FIXED, 0.9) == ["ratio_max"]
    crashed = symptoms.parse(_log([0.1], loss=math.nan), "RuntimeError: boom", 1)
    assert {"crash", "nan"} <= set(symptoms.differences(crashed, FIXED, 0.9))


def test_the_description_reports_outcomes_in_a_users_words():
    flat = symptoms.parse(_log([0.1] * 50, ratio=1.3, kl=0.02), "", -9)
    fixed = symptoms.parse(_log([0.1] * 10 + [0.6] * 10 + [0.95] * 10, ratio=1.0, kl=0.5), "", 0)
    text = " ".join(symptoms.describe(flat, fixed, 0.9))
    assert (
        "by rollout 29" in text
    )  # 0.6 + 9 x 0.95 over rollouts 20-29 and "between 0.100 and 0.100" in text
    assert "`ratio_max`" in text and "`kl` averages 0.020" in text
    assert not MECHANISM_WORDS.findall(text)


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
    folder = write_generated(tmp_path / "gen", CORPUS, bugs, decoy, train, [])
    spec = load_task(folder)  # refuses a condition the run lacks
    assert sum(b.weight for b in spec.bugs if b.kind == "decoy") == pytest.approx(0.2)
    kept = bugs[:1]
    redrawn = draw(CORPUS.bugs, rng, count, exclude={d.bug.id for d in bugs[1:]}, kept=kept)
    assert redrawn[0] == kept[0] and not {d.bug.id for d in redrawn[1:]} & {
        d.bug.id for d in bugs[1:]
    }


@pytest.mark.xdist_group("tasks-generate")
def test_a_generated_task_states_its_measured_symptoms_and_its_oracle_scores_one(tmp_path):
    folder = generate_task(3, 2, tmp_path / "specs", verify=False)
    spec = load_task(folder)
    text = spec.instruction
    assert "Before the last refactor this run reached a mean reward of 0.9" in text
    assert re.search(r"\d\.\d{3}", text.split("Before", 1)[1])  # a measured figure
    assert not MECHANISM_WORDS.findall(re.sub(r"`[^`]*/[^`]*`", "", text))
    built = build_task(spec, tmp_path / "built")
    assert run_trial(built, "oracle").reward == 1.0
    shutil.rmtree(built)
