"""user-ref-anchor's reference probe runs the trainer's callbacks, as `Trainer.train` does.

Two blind agents fixed the shared storage of the reference model and moved its sync into a
`TrainerCallback`; a probe that called `training_step` alone never ran it, and failed a correct
fix. The probe now sends the callbacks the events of each step, so a sync kept in a callback at a
time NOTES.md allows (before the update of every `ref_sync_steps`-th step) passes, and the
shared storage still fails from a callback as from `training_step`. The probe's updates are a
fixed drift, so the reference stage is scored apart from the others; user-loo-clip's reversed
soft sync still fails when it is the only bug left.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from task_harness.build import build_task
from task_harness.spec import load_tasks
from task_harness.verifier import jail
from tests.user_task_scoring import bug_score

pytestmark = [
    pytest.mark.xdist_group("tasks-user-ref-sync"),
    pytest.mark.skipif(
        not jail.available(), reason="the verifier's children need root and unshare"
    ),
]

IN_TRAINING_STEP = """\
    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        every = getattr(self.args, "ref_sync_steps", 0)
        if every and self.ref_model is not None and (self.state.global_step + 1) % every == 0:
            self.sync_reference()
        return loss
"""
# The blind agents' event (`on_step_end`, after the optimizer step and the global step's count),
# at the end of the step before each `ref_sync_steps`-th: the policy the next update starts from.
IN_A_CALLBACK = """\
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_callback(ReferenceSync(self))
"""
CALLBACK_CLASS = """

class ReferenceSync(TrainerCallback):
    \"\"\"Keeps the trainer's reference model a copy of the policy every ref_sync_steps steps.\"\"\"

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        every = getattr(args, "ref_sync_steps", 0)
        if every and self.trainer.ref_model is not None and (state.global_step + 1) % every == 0:
            self.trainer.sync_reference()
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    (spec,) = load_tasks(ids=["user-ref-anchor"])
    return build_task(spec, tmp_path_factory.mktemp("built"))


def _callback_trainer(source: str, shared_storage: bool) -> str:
    """The oracle's trainer with its sync moved from `training_step` into a callback."""
    assert IN_TRAINING_STEP in source
    source = source.replace(IN_TRAINING_STEP, IN_A_CALLBACK)
    source = source.replace(
        "from trl import GRPOTrainer\n",
        "from transformers import TrainerCallback\nfrom trl import GRPOTrainer\n",
    )
    source = source.replace(
        "\n\nclass TeamGRPOTrainer", CALLBACK_CLASS + "\n\nclass TeamGRPOTrainer"
    )
    if shared_storage:
        assert "ref.copy_(param)" in source
        source = source.replace("ref.copy_(param)", "ref.data = param.data")
    return source


# A blind agent's guard (user-ref-anchor, 2026-12-04): the trainer counts the step it last synced
# at, so that a step of several micro-batches syncs once. The probe runs several cases on one
# trainer; each must start from the trainer's own state as a new run has it.
ONCE_PER_STEP = """\
    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        every = getattr(self.args, "ref_sync_steps", 0)
        step = self.state.global_step + 1
        due = every and self.ref_model is not None and step % every == 0
        if due and step != getattr(self, "_synced_at", None):
            self.sync_reference()
            self._synced_at = step
        return loss
"""


def _counted_trainer(source: str) -> str:
    """The oracle's trainer whose sync remembers the step it last ran at."""
    assert IN_TRAINING_STEP in source
    return source.replace(IN_TRAINING_STEP, ONCE_PER_STEP)


def _reference_score(built: Path, tmp_path: Path, rewrite) -> tuple[float, str]:
    """The verifier's score of the reference bug alone on the oracle with `rewrite` applied."""
    return bug_score(built, tmp_path, "reference_shares_storage", rewrite)


def test_a_sync_kept_in_a_callback_passes(built, tmp_path):
    score, log = _reference_score(built, tmp_path, lambda s: _callback_trainer(s, False))
    assert score == 1.0, log


def test_a_sync_that_counts_its_own_steps_passes(built, tmp_path):
    score, log = _reference_score(built, tmp_path, _counted_trainer)
    assert score == 1.0, log


def test_shared_storage_fails_from_a_callback_too(built, tmp_path):
    score, log = _reference_score(built, tmp_path, lambda s: _callback_trainer(s, True))
    assert score == 0.0, log
    assert "reference_model.sync" in log


def _bias_corrected_kl(source: str) -> str:
    """The oracle's trainer with its KL weighted by the ratio (TRL's use_bias_correction_kl),
    against NOTES.md's plain k3: a kl-stage departure, as a blind skill agent made it."""
    plain = "            per_token_loss = per_token_loss + self.beta * kl\n"
    assert plain in source
    return source.replace(
        plain, "            per_token_loss = per_token_loss + self.beta * kl * ratio\n"
    )


def test_a_kl_weighted_another_way_does_not_cost_the_reference_stage(built, tmp_path):
    """The probe's updates move the policy by a fixed drift, not by the loss's gradient, so what
    the reference is synced from does not depend on how the kl stage weights its term."""
    score, log = _reference_score(built, tmp_path, _bias_corrected_kl)
    assert score == 1.0, log


def _groups_interleaved(source: str) -> str:
    """The oracle's trainer with user-ref-anchor's advantages bug put back (groups read as G
    rounds of the prompts): every update's gradient changes, the reference code does not."""
    grouped = "        grouped = rewards.view(-1, self.num_generations)\n"
    assert grouped in source
    return source.replace(grouped, "        grouped = rewards.view(self.num_generations, -1).T\n")


def test_an_advantages_bug_left_in_does_not_cost_the_reference_stage(built, tmp_path):
    score, log = _reference_score(built, tmp_path, _groups_interleaved)
    assert score == 1.0, log


@pytest.fixture(scope="module")
def built_loo(tmp_path_factory) -> Path:
    (spec,) = load_tasks(ids=["user-loo-clip"])
    return build_task(spec, tmp_path_factory.mktemp("built-loo"))


def _mix_reversed(source: str) -> str:
    """user-loo-clip's oracle with its soft sync mixed the other way round put back."""
    mix = "                ref.mul_(1 - alpha).add_(param, alpha=alpha)\n"
    assert mix in source
    return source.replace(mix, "                ref.mul_(alpha).add_(param, alpha=1 - alpha)\n")


def test_a_reversed_soft_sync_alone_fails_under_the_drift_probe(built_loo, tmp_path):
    """The probe's fixed drift must still tell alpha * policy + (1 - alpha) * ref from its
    reverse when that is the only bug left."""
    score, log = bug_score(built_loo, tmp_path, "reference_mix_reversed", _mix_reversed)
    assert score == 0.0, log


def test_the_soft_sync_as_intended_passes(built_loo, tmp_path):
    score, log = bug_score(built_loo, tmp_path, "reference_mix_reversed", lambda s: s)
    assert score == 1.0, log
