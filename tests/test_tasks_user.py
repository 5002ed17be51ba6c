"""The user family (a user's GRPOTrainer subclass on a pristine TRL): the stock-trainer shortcut
removes every override, and the judge refuses a report whose inputs are not the verifier's."""

import json
import sys
from pathlib import Path

import pytest

from task_harness.shortcuts import strip_overrides

VERIFIER = Path(__file__).resolve().parents[1] / "task_harness" / "verifier"


def test_stock_trainer_leaves_the_subclass_without_a_method(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "trainer.py").write_text(
        "import torch\nfrom trl import GRPOTrainer\n\n\n"
        'class Mine(GRPOTrainer):\n    """Ours."""\n\n'
        "    def _compute_loss(self, model, inputs):\n        return torch.zeros(())\n\n\n"
        "def helper():\n    return 1\n"
    )
    (package / "other.py").write_text("class Plain:\n    def f(self):\n        return 2\n")
    assert strip_overrides(package) == ["pkg/trainer.py"]
    text = (package / "trainer.py").read_text()
    assert "_compute_loss" not in text and '"""Ours."""\n\n    pass\n' in text
    assert "def helper" in text
    assert "def f" in (package / "other.py").read_text()


@pytest.fixture
def user_judge(monkeypatch):
    monkeypatch.syspath_prepend(str(VERIFIER))
    import user_judge

    yield user_judge
    sys.modules.pop("user_judge", None)


TRAINER = {
    "class": "m:T",
    "config_class": "m:C",
    "reward_functions": ["m:answer"],
}


def test_a_job_is_drawn_from_its_seed_and_covers_each_stage_asked(user_judge):
    stages = ["rewards", "advantages", "masking", "ratio", "kl", "loss_aggregation", "clipping"]
    first = user_judge.make_job(stages, TRAINER, 7)
    again, other = (json.dumps(user_judge.make_job(stages, TRAINER, s)) for s in (7, 8))
    assert json.dumps(first) == again != other  # NaN rewards: compared as JSON
    assert {case["stage"] for case in first["cases"]} == set(stages)


def test_a_report_with_other_inputs_fails_even_with_the_expected_output(user_judge):
    job = user_judge.make_job(["advantages"], TRAINER, 3)
    # as a child's report arrives: JSON, its tensors rebuilt (plain.decode)
    reported = {c["name"]: {"inputs": c["inputs"], "output": [1.0]} for c in job["cases"]}
    intended = user_judge.plain.decode(json.loads(json.dumps(reported)))
    honest = user_judge.plain.decode(json.loads(json.dumps(reported)))
    assert user_judge.judge(job, honest, intended) == {"advantages": []}
    forged = dict(honest)
    first = job["cases"][0]["name"]
    forged[first] = {"inputs": {"rewards": [0.0], "num_generations": 1}, "output": [1.0]}
    problems = user_judge.judge(job, forged, intended)["advantages"]
    assert problems == [f"{first}: the trainer reported inputs other than the verifier's"]


def test_a_local_read_from_an_overriding_method_is_the_subclass_s():
    """The driver reads a local (`rewards`) from every implementation along the MRO; the
    subclass's value must win over the base's, whichever one the driver was handed."""
    from trl import GRPOTrainer

    from checker.adapters import trl_trainer

    class Override(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            return super()._generate_and_score_completions(inputs)

    trl_trainer.check_subclass(Override)
    try:
        codes = trl_trainer._implementations(Override._generate_and_score_completions)
    finally:
        trl_trainer.check_subclass(GRPOTrainer)
    assert codes == [
        GRPOTrainer._generate_and_score_completions.__code__,
        Override._generate_and_score_completions.__code__,
    ]
