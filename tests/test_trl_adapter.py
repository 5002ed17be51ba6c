"""`checker.adapters.trl_adapter` computes the stage protocol with TRL 1.16's own code: it must agree with
`reference_impl` (which reproduces TRL stage by stage) on seeded inputs, to the tolerances of the
shared and it must drive whichever TRL copy is first on sys.path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reference_impl as reference
from reference_impl import train as reference_train
from reference_impl.protocol import STAGES
from reference_impl.tiny import load_tiny

adapter = pytest.importorskip("checker.adapters.trl_adapter")

pytestmark = pytest.mark.xdist_group("trl_adapter")

REPO_ROOT = Path(__file__).resolve().parent.parent
NAN = float("nan")
# advantages atol 1e-6, log-probs atol 1e-5, loss atol 1e-6, dL/dlogp atol 1e-7
ADVANTAGE_ATOL, LOGP_ATOL, LOSS_ATOL, GRAD_ATOL = 1e-6, 1e-5, 1e-6, 1e-7


def assert_close(ours: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    torch.testing.assert_close(ours.float(), expected.float(), atol=atol, rtol=0, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# rewards and advantages


@pytest.fixture(scope="module")
def rewards() -> torch.Tensor:
    """4 groups of G = 4: random, with a NaN, all NaN but one, and a constant non-dyadic group."""
    generator = torch.Generator().manual_seed(0)
    values = torch.rand(16, generator=generator)
    values[1] = NAN
    values[8:11] = NAN
    values[12:16] = 0.35
    return values


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_match_reference(rewards, scale_rewards):
    ours = adapter.compute_advantages(rewards, 4, scale_rewards)
    assert_close(ours, reference.compute_advantages(rewards, 4, scale_rewards), ADVANTAGE_ATOL)


def test_advantages_of_unscorable_rows_are_zero(rewards):
    ours = adapter.compute_advantages(rewards, 4)
    assert torch.isfinite(ours).all()
    assert ours[1] == 0 and (ours[8:12] == 0).all()  # 8..10 NaN, 11 alone in its group


def test_combine_rewards_matches_reference():
    generator = torch.Generator().manual_seed(1)
    per_func = torch.randn(8, 3, generator=generator)
    per_func[0, 1] = NAN  # one function returned None: adds nothing
    per_func[3] = NAN  # all returned None: the row is NaN
    weights = [1.0, 0.5, 2.0]
    ours = adapter.combine_rewards(per_func, weights)
    assert_close(ours, reference.combine_rewards(per_func, weights), ADVANTAGE_ATOL)
    assert torch.isnan(ours[3]) and torch.isfinite(ours[[0, 1, 2, 4, 5, 6, 7]]).all()


# ---------------------------------------------------------------------------------------------
# masking


@pytest.mark.parametrize("mask_truncated", [False, True])
def test_completion_mask_matches_reference(mask_truncated):
    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 17, (12, 7), generator=generator)
    ids[0, 0] = 1  # EOS first
    ids[1, 6] = 1  # EOS last
    ids[2, 2:] = 1  # EOS used as padding after the first EOS
    ids[3, 3], ids[3, 5] = 2, 1  # second EOS id first
    ids[4, 4:] = 0  # pad id inside a row with no EOS: still truncated
    for eos_token_ids in ([1], [1, 2]):
        ours = adapter.completion_mask(ids, eos_token_ids, mask_truncated)
        expected = reference.completion_mask(ids, eos_token_ids, mask_truncated)
        assert ours.shape == ids.shape
        assert torch.equal(ours.int(), expected.int()), (eos_token_ids, ours, expected)


# ---------------------------------------------------------------------------------------------
# logprobs


def test_selective_log_softmax_matches_reference():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 5, 17, generator=generator) * 4
    index = torch.randint(0, 17, (3, 5), generator=generator)
    ours = adapter.selective_log_softmax(logits, index, 0.7)
    assert_close(ours, reference.selective_log_softmax(logits, index, 0.7), LOGP_ATOL)
    assert (ours <= 0).all()


def test_completion_logps_match_reference_and_are_zero_where_masked():
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 9, 17, generator=generator, requires_grad=True)
    input_ids = torch.randint(0, 17, (3, 9), generator=generator)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    ours = adapter.completion_logps(logits, input_ids, mask, 0.7)
    expected = reference.completion_logps(logits, input_ids, mask, 0.7)
    assert_close(ours, expected, LOGP_ATOL)
    assert (ours[mask == 0] == 0).all()
    (gradient,) = torch.autograd.grad(ours.sum(), logits)
    (expected_gradient,) = torch.autograd.grad(expected.sum(), logits)
    assert_close(gradient, expected_gradient, LOGP_ATOL)


def test_get_per_token_logps_matches_reference_and_restores_the_model():
    model, _ = load_tiny()
    generator = torch.Generator().manual_seed(5)
    input_ids = torch.randint(3, 17, (3, 10), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0  # left-padded prompt
    attention_mask[1, -2:] = 0  # right-padded completion
    for temperature in (1.0, 0.7):
        ours = adapter.get_per_token_logps(model, input_ids, attention_mask, 6, temperature)
        expected = reference.get_per_token_logps(model, input_ids, attention_mask, 6, temperature)
        assert_close(ours, expected, LOGP_ATOL)
    assert "forward" not in vars(model), "the fused LM head patch must not outlive the call"
    assert ours.requires_grad


# ---------------------------------------------------------------------------------------------
# ratio, clipping, kl, loss_aggregation


@pytest.fixture(scope="module")
def loss_inputs() -> dict[str, torch.Tensor]:
    """Unequal lengths, a fully masked row, ratios both inside and outside the clip band."""
    generator = torch.Generator().manual_seed(6)
    logps = -torch.rand(5, 7, generator=generator) * 3
    mask = torch.ones(5, 7, dtype=torch.long)
    mask[0, 4:] = 0
    mask[1, 1:] = 0
    mask[3] = 0
    return {
        "logps": logps,
        "old": logps + 0.4 * torch.randn(5, 7, generator=generator),
        "ref": logps + 0.3 * torch.randn(5, 7, generator=generator),
        "advantages": torch.randn(5, generator=generator),
        "mask": mask,
    }


REGIMES = {
    "on_policy": {},
    "off_policy_clip_higher": {"old": True, "epsilon_high": 0.28},
    "sequence_level": {"old": True, "importance_sampling_level": "sequence"},
    "delta": {"old": True, "delta": 1.1},
    "kl_bias_corrected": {"old": True, "ref": True, "beta": 0.04},
    "kl_plain": {"old": True, "ref": True, "beta": 0.1, "use_bias_correction_kl": False},
    "normalisers": {"max_completion_length": 12, "num_items_in_batch": 40},
    "sapo_temperatures": {"old": True, "sapo_temperature_pos": 0.5, "sapo_temperature_neg": 2.0},
}
from reference_impl.protocol import LOSS_TYPES  # noqa: E402


def _loss_and_grad(compute_loss, inputs, loss_type, regime):
    options = dict(regime)
    logps = inputs["logps"].clone().requires_grad_()
    if options.pop("old", False):
        options["old_per_token_logps"] = inputs["old"]
    if options.pop("ref", False):
        options["ref_per_token_logps"] = inputs["ref"]
    loss = compute_loss(logps, inputs["advantages"], inputs["mask"], loss_type=loss_type, **options)
    (gradient,) = torch.autograd.grad(loss, logps)
    return loss.detach(), gradient


@pytest.mark.parametrize("regime", list(REGIMES))
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_compute_loss_matches_reference(loss_inputs, loss_type, regime):
    loss, gradient = _loss_and_grad(adapter.compute_loss, loss_inputs, loss_type, REGIMES[regime])
    expected_loss, expected_gradient = _loss_and_grad(
        reference.compute_loss, loss_inputs, loss_type, REGIMES[regime]
    )
    assert_close(loss, expected_loss, LOSS_ATOL)
    assert_close(gradient, expected_gradient, GRAD_ATOL)


def test_per_token_kl_matches_reference(loss_inputs):
    logps = loss_inputs["logps"].clone().requires_grad_()
    ours = adapter.per_token_kl(logps, loss_inputs["ref"])
    assert_close(ours, reference.per_token_kl(logps, loss_inputs["ref"]), LOSS_ATOL)
    (gradient,) = torch.autograd.grad(ours.sum(), logps)
    assert_close(gradient, 1 - torch.exp(loss_inputs["ref"] - loss_inputs["logps"]), GRAD_ATOL)


def test_kl_measured_by_value_is_trls_own_term(loss_inputs):
    """The by-value measurement a subclass's own loss gets (one counted token at a time, the loss
    at beta = 1 minus beta = 0 over the token's policy weight) recovers, on TRL's own loss, the
    k3 values and gradient that TRL's `per_token_kl` local holds."""
    logps = loss_inputs["logps"][:3, :4].clone().requires_grad_()
    ref = loss_inputs["ref"][:3, :4]
    ours = adapter._kl_by_value(logps, ref)
    assert_close(ours, reference.per_token_kl(logps, ref), LOSS_ATOL)
    (gradient,) = torch.autograd.grad(ours.sum(), logps)
    assert_close(gradient, 1 - torch.exp(ref - logps.detach()), GRAD_ATOL)


# ---------------------------------------------------------------------------------------------
# generation and reference_model


def test_generate_completions_samples_as_the_reference_does():
    model, _ = load_tiny()
    prompts = torch.tensor([[0, 3, 14, 4, 12], [5, 14, 6, 14, 7]])
    options = dict(num_generations=3, max_completion_length=6, eos_token_ids=[1], pad_token_id=0)
    for temperature in (1.0, 0.7):
        torch.manual_seed(7)
        ours = adapter.generate_completions(
            model, prompts, (prompts != 0).long(), temperature=temperature, **options
        )
        torch.manual_seed(7)
        expected = reference_train.generate_completions(
            model, prompts, (prompts != 0).long(), temperature=temperature, **options
        )
        width = max(ours.size(1), expected.size(1))
        pad = torch.nn.functional.pad
        assert torch.equal(
            pad(ours, (0, width - ours.size(1))), pad(expected, (0, width - expected.size(1)))
        )


def test_make_reference_model_is_the_policy_as_it_is_now_and_stays_so():
    policy, _ = load_tiny()
    with torch.no_grad():
        policy.lm_head.weight.add_(0.05)  # the reference must follow the live weights, not the disk
    reference_model = adapter.make_reference_model(policy)
    input_ids = torch.randint(3, 17, (2, 6), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        before = reference_model(input_ids).logits
        assert_close(before, policy(input_ids).logits, 0.0)
        policy.lm_head.weight.add_(0.05)
        assert_close(reference_model(input_ids).logits, before, 0.0)
    assert not reference_model.training


# ---------------------------------------------------------------------------------------------
# module contract


def test_every_function_points_into_the_imported_trl_source():
    trl_root = Path(sys.modules["trl"].__file__).parent
    for name in (
        "combine_rewards",
        "compute_advantages",
        "completion_mask",
        "compute_loss",
        "per_token_kl",
        "get_per_token_logps",
        "completion_logps",
        "selective_log_softmax",
        "generate_completions",
        "make_reference_model",
    ):
        path, line = getattr(adapter, name).grpo_check_location.rsplit(":", 1)
        assert Path(path).is_relative_to(trl_root.resolve()), (name, path)
        assert Path(path).read_text().splitlines()[int(line) - 1].strip(), (name, line)
        assert set(getattr(adapter, name).grpo_check_depends_on) <= set(STAGES), name


def test_conventions_are_trl_1_16_defaults():
    # GRPOConfig 1.16 defaults (trl/trainer/grpo_config.py)
    assert adapter.CONVENTIONS == {
        "loss_type": "dapo",
        "scale_rewards": "group",
        "beta": 0.0,
        "epsilon_low": 0.2,
        "epsilon_high": None,
        "delta": None,
        "importance_sampling_level": "token",
        "use_bias_correction_kl": True,
        "sapo_temperature_pos": 1.0,
        "sapo_temperature_neg": 1.05,
        "mask_truncated_completions": False,
        "temperature": 1.0,
        # semantics named by release (checker/adapters/trl_conventions.py): 1.16 excludes
        # all-None rows (since 1.6), clamps dapo's normaliser (since 1.9.2) and ends a
        # completion at every EOS id of the list (since 1.15)
        "nan_rewards": "excluded",
        "empty_batch_normaliser": "clamped",
        "eos_token_ids": "all",
    }


def test_a_trl_copy_first_on_the_path_is_the_one_driven(tmp_path):
    """A patched TRL copy placed first on sys.path changes what the adapter computes and reports."""
    import trl

    shutil.copytree(
        Path(trl.__file__).parent, tmp_path / "trl", ignore=shutil.ignore_patterns("__pycache__")
    )
    trainer_file = tmp_path / "trl" / "trainer" / "grpo_trainer.py"
    source = trainer_file.read_text()
    trainer_file.write_text(source.replace("(std_rewards + 1e-4)", "(std_rewards + 1e4)", 1))
    script = (
        "import sys, torch; sys.path.insert(0, sys.argv[1]);"
        "from checker.adapters import trl_adapter as a;"
        "print(float(a.compute_advantages(torch.tensor([0.0, 1.0]), 2)[1]));"
        "print(a.compute_advantages.grpo_check_location)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    advantage, location = result.stdout.split()
    assert abs(float(advantage) - 0.5 / (0.70711 + 1e4)) < 1e-9  # (1 - mean) / (std + 1e4)
    assert location.startswith(str(trainer_file.resolve()))


# ---------------------------------------------------------------------------------------------
# update


def _one_update(grpo_step, **options) -> tuple[float, torch.Tensor]:
    torch.manual_seed(9)
    policy, _ = load_tiny()
    frozen = reference_train.make_reference_model(policy)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    prompts = torch.tensor([[0, 3, 14, 4, 12], [5, 14, 6, 14, 7]]).repeat_interleave(4, dim=0)
    completions = torch.randint(3, 17, (8, 6), generator=torch.Generator().manual_seed(10))
    completions[0, 2], completions[0, 3:] = 1, 0  # EOS then padding
    completions[3, 4], completions[3, 5] = 1, 0
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.5, 1.0, 0.0, 0.25, 1.0])
    loss = grpo_step(
        policy,
        optimizer,
        prompts,
        (prompts != 0).long(),
        completions,
        rewards,
        num_generations=4,
        eos_token_ids=[1],
        reference=frozen,
        temperature=0.7,
        **options,
    )
    assert "forward" not in vars(policy) and "generate" not in vars(policy)
    return loss, torch.cat([p.detach().flatten() for p in policy.parameters()])


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"num_iterations": 3, "beta": 0.04, "loss_type": "grpo", "epsilon_high": 0.28},
        {"num_iterations": 2, "scale_rewards": "batch", "importance_sampling_level": "sequence"},
    ],
)
def test_grpo_step_updates_the_policy_as_the_reference_does(options):
    loss, weights = _one_update(adapter.grpo_step, **options)
    expected_loss, expected_weights = _one_update(reference_train.grpo_step, **options)
    assert abs(loss - expected_loss) < 1e-6
    assert_close(weights, expected_weights, 1e-6)  # lr 0.5 turns a 1e-7 gradient gap into 5e-8
