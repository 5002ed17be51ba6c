"""Invariants of the reference stage functions over generated inputs (hypothesis).

Each test states one rule that must hold for every input, not just for a worked example.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import (
    compute_advantages,
    compute_loss,
    get_per_token_logps,
    per_token_kl,
    selective_log_softmax,
)
from reference_impl.protocol import LOSS_TYPES
from reference_impl.tiny import load_tiny

FAST = settings(max_examples=60, deadline=None)
MODEL = settings(max_examples=15, deadline=None)

reward = st.floats(-10, 10, allow_nan=False, width=32)
log_prob = st.floats(-8, 0, allow_nan=False, width=32)


@st.composite
def grouped_rewards(draw, allow_nan: bool = False) -> tuple[torch.Tensor, int]:
    """Rewards [num_groups * G] in contiguous groups; NaN stands for an unscorable row."""
    group_size = draw(st.integers(2, 6))
    num_groups = draw(st.integers(1, 4))
    value = st.one_of(reward, st.just(math.nan)) if allow_nan else reward
    values = draw(
        st.lists(value, min_size=group_size * num_groups, max_size=group_size * num_groups)
    )
    return torch.tensor(values, dtype=torch.float32), group_size


@st.composite
def loss_batch(draw) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(per_token_logps [B, T], advantages [B], completion_mask [B, T]) with right-padded masks."""
    rows = draw(st.integers(1, 4))
    length = draw(st.integers(1, 5))
    logps = torch.tensor(draw(st.lists(log_prob, min_size=rows * length, max_size=rows * length)))
    # zero or clearly signed: a subnormal advantage would underflow the gradient to 0
    advantage = st.one_of(st.just(0.0), st.floats(1e-3, 3), st.floats(-3, -1e-3))
    advantages = torch.tensor(draw(st.lists(advantage, min_size=rows, max_size=rows)))
    lengths = draw(st.lists(st.integers(0, length), min_size=rows, max_size=rows))
    mask = (torch.arange(length) < torch.tensor(lengths).unsqueeze(1)).int()
    return logps.view(rows, length), advantages, mask


# --- advantages ------------------------------------------------------------------------------


@FAST
@given(grouped_rewards(allow_nan=True), st.sampled_from(["group", "batch", "none"]))
def test_advantages_are_centred_per_group_and_finite(data, scale_rewards):
    """Every scaling subtracts the group mean, so the valid advantages of a group sum to 0;
    unscorable rows get exactly 0 and nothing is NaN (gt:L2810)."""
    rewards, group_size = data
    advantages = compute_advantages(rewards, group_size, scale_rewards)
    assert not advantages.isnan().any(), advantages
    assert (advantages[rewards.isnan()] == 0).all()
    for group_rewards, group_advantages in zip(
        rewards.view(-1, group_size), advantages.view(-1, group_size), strict=True
    ):
        valid = ~group_rewards.isnan()
        spread = group_rewards[valid].abs().max().item() if valid.any() else 0.0
        # fp32 rounding of the mean, amplified by at most 1 / 1e-4 when the std is tiny
        tolerance = 1e-5 * max(spread, 1.0) * (1e4 if scale_rewards != "none" else 1.0)
        assert abs(group_advantages[valid].sum().item()) <= tolerance


@FAST
@given(grouped_rewards(), st.data())
def test_advantages_ignore_other_groups(data, draw):
    """Under "group" (and "none") scaling, a group's advantages depend on its own rewards only."""
    rewards, group_size = data
    if rewards.numel() == group_size:
        return
    changed = rewards.clone()
    changed[group_size:] = torch.tensor(
        draw.draw(
            st.lists(
                reward, min_size=rewards.numel() - group_size, max_size=rewards.numel() - group_size
            )
        )
    )
    for scale_rewards in ("group", "none"):
        before = compute_advantages(rewards, group_size, scale_rewards)[:group_size]
        after = compute_advantages(changed, group_size, scale_rewards)[:group_size]
        assert torch.equal(before, after)


@FAST
@given(grouped_rewards())
def test_group_advantages_are_bounded(data):
    """With the Bessel std, a z-score within n samples is at most (n - 1) / sqrt(n) < sqrt(n)
    (Samuelson's inequality); the 1e-4 added to the std only shrinks it."""
    rewards, group_size = data
    advantages = compute_advantages(rewards, group_size, "group")
    bound = (group_size - 1) / math.sqrt(group_size)
    assert advantages.abs().max() <= bound * (1 + 1e-5), (advantages, bound)


@FAST
@given(grouped_rewards(), st.floats(0.1, 10), st.floats(-5, 5))
def test_group_advantages_ignore_affine_reward_changes(data, scale, shift):
    """z-scores are invariant to r -> a r + b with a > 0, up to the 1e-4 added to the std: with
    std s, that constant moves |A| <= sqrt(G) by at most about sqrt(G) * 1e-4 / s."""
    rewards, group_size = data
    smallest_std = rewards.view(-1, group_size).std(1).min().item() * min(scale, 1.0)
    if smallest_std < 1e-2:
        return  # near-constant groups: the 1e-4 dominates and there is no invariance to test
    before = compute_advantages(rewards, group_size, "group")
    after = compute_advantages(rewards * scale + shift, group_size, "group")
    tolerance = 1e-5 + 2e-4 * math.sqrt(group_size) / smallest_std
    assert torch.allclose(before, after, atol=tolerance), (before, after)


# --- logprobs and kl -------------------------------------------------------------------------


@FAST
@given(
    st.lists(st.floats(-50, 50, width=32), min_size=2, max_size=8),
    st.floats(0.05, 5.0),
    st.data(),
)
def test_log_probs_are_at_most_zero(logits, temperature, draw):
    index = draw.draw(st.integers(0, len(logits) - 1))
    logp = selective_log_softmax(torch.tensor([logits]), torch.tensor([index]), temperature)
    assert logp.item() <= 0.0
    # and they are log-probabilities: exp sums to 1 over the vocabulary, up to fp32 rounding of
    # logsumexp, which grows with the size of the scaled logits
    all_logps = selective_log_softmax(
        torch.tensor([logits] * len(logits)), torch.arange(len(logits)), temperature
    )
    rounding = 1e-6 * max(1.0, max(abs(v) for v in logits) / temperature)
    assert abs(all_logps.exp().sum().item() - 1.0) <= rounding


@FAST
@given(st.lists(log_prob, min_size=1, max_size=10), st.lists(log_prob, min_size=1, max_size=10))
def test_kl_is_zero_on_itself_and_never_negative(logps, ref_logps):
    size = min(len(logps), len(ref_logps))
    policy, reference = torch.tensor([logps[:size]]), torch.tensor([ref_logps[:size]])
    assert (per_token_kl(policy, policy) == 0).all()
    # k3 = exp(d) - d - 1 >= 0 exactly; in fp32, exp(d) for |d| < 6e-8 rounds to 1 and leaves -d
    assert (per_token_kl(policy, reference) >= -1e-7).all()


# --- loss ------------------------------------------------------------------------------------


@FAST
@given(loss_batch(), st.sampled_from(LOSS_TYPES))
def test_gradient_follows_the_advantage_sign_on_policy(batch, loss_type):
    """On policy, dL/dlogp_t = -A_i * (a positive weight) on unmasked tokens and 0 on masked ones:
    descending the loss raises the probability of tokens with positive advantage."""
    logps, advantages, mask = batch
    logps.requires_grad_(True)
    loss = compute_loss(logps, advantages, mask, loss_type=loss_type)
    (grad,) = torch.autograd.grad(loss, logps)
    unmasked = mask.bool()
    expected_sign = -advantages.sign().unsqueeze(1).expand_as(grad)
    assert (grad[~unmasked] == 0).all(), grad
    assert (grad[unmasked].sign() == expected_sign[unmasked]).all(), (grad, advantages)


@FAST
@given(loss_batch(), st.sampled_from(LOSS_TYPES), st.sampled_from(["token", "sequence"]), st.data())
def test_masked_log_probs_do_not_matter(batch, loss_type, level, draw):
    """Values at mask == 0 (padding, tokens after EOS) change neither the loss nor the gradient,
    off policy and with the KL term on."""
    logps, advantages, mask = batch
    # off policy: old log-probs differ from the current ones by up to +-0.5 (ratios 0.6 .. 1.6)
    old = logps + 0.5 * torch.sin(torch.arange(logps.numel(), dtype=logps.dtype)).view_as(logps)
    ref = logps - 0.2
    kwargs = {
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "beta": 0.04,
        "loss_type": loss_type,
        "importance_sampling_level": level,
    }
    noise = torch.tensor(
        draw.draw(
            st.lists(st.floats(-30, 0, width=32), min_size=logps.numel(), max_size=logps.numel())
        )
    )
    scrambled = torch.where(mask.bool(), logps, noise.view_as(logps))

    def loss_and_grad(values):
        values = values.clone().requires_grad_(True)
        loss = compute_loss(values, advantages, mask, **kwargs)
        (grad,) = torch.autograd.grad(loss, values)
        return loss, grad

    loss, grad = loss_and_grad(logps)
    scrambled_loss, scrambled_grad = loss_and_grad(scrambled)
    assert torch.allclose(loss, scrambled_loss, atol=1e-6), (loss, scrambled_loss)
    assert torch.allclose(grad, scrambled_grad, atol=1e-7)


# --- padding invariance through the model ----------------------------------------------------


@functools.cache
def _tiny_model() -> torch.nn.Module:
    model, _ = load_tiny()
    return model.eval()


word = st.integers(2, 16)  # token ids that are neither <pad> (0) nor <eos> (1)


@MODEL
@given(
    st.lists(word, min_size=1, max_size=5),
    st.lists(word, min_size=1, max_size=5),
    st.integers(0, 4),
    st.integers(0, 4),
    st.floats(0.5, 1.5),
)
def test_padding_does_not_change_log_probs(prompt, completion, left_pad, right_pad, temperature):
    """Left-padding the prompt and right-padding the completion (mask 0) leave the log-probs of
    the real completion tokens unchanged: RoPE scores depend on relative positions only."""
    model = _tiny_model()

    def score(left: int, right: int) -> torch.Tensor:
        ids = [0] * left + prompt + completion + [0] * right
        attention = [0] * left + [1] * (len(prompt) + len(completion)) + [0] * right
        with torch.no_grad():
            logps = get_per_token_logps(
                model,
                torch.tensor([ids]),
                torch.tensor([attention]),
                len(completion) + right,
                temperature,
            )
        return logps[0, : len(completion)]

    unpadded = score(0, 0)
    padded = score(left_pad, right_pad)
    assert (unpadded <= 0).all()
    assert torch.allclose(unpadded, padded, atol=1e-5), (unpadded - padded).abs().max()


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_all_masked_batch_gives_zero_loss_not_nan(loss_type):
    """Every normaliser is clamped at 1 token, so an all-masked micro-batch contributes 0."""
    logps = torch.full((2, 3), -1.0, requires_grad=True)
    loss = compute_loss(
        logps, torch.tensor([1.0, -1.0]), torch.zeros(2, 3, dtype=torch.int), loss_type=loss_type
    )
    assert loss.item() == 0.0
