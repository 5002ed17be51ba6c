"""Stage `rewards`: `combine_rewards(rewards_per_func [N, K], reward_weights) -> [N]`.

Rule (TRL 1.16 gt:L2759-2764): r_i = nansum_k w_k R_ik; a NaN entry (a reward function that
returned None) adds nothing; a row whose K entries are all NaN stays NaN.
"""

from __future__ import annotations

import math

import torch

import reference_impl
from checker.checks import CheckFailure, check
from checker.checks.context import Context, assert_close, fmt

NAN = math.nan
WEIGHTS = [1.0, 0.5, 2.0]
# Why a NaN-reward check does not apply, per declared `nan_rewards` convention.
NAN_REWARDS_MEAN = {
    "zero": "a row with no reward counts as reward 0 (TRL before 1.6)",
    "never": "its reward functions never return None",
}


def _combine(ctx: Context, rewards_per_func: torch.Tensor, weights: list[float]) -> torch.Tensor:
    # The weights as TRL holds them (`self.reward_weights`, a float32 tensor, gt:L574): a
    # candidate written against TRL calls `.to(device)` on them, and a list would break it.
    tensor = torch.tensor(weights, dtype=torch.float32)
    out = ctx.call("combine_rewards", rewards_per_func, tensor, shape=(rewards_per_func.size(0),))
    return out.detach().float()


@check("rewards", "combine_rewards")
def weighted_sum_matches_reference(ctx: Context) -> None:
    """The combined reward is the weighted sum over reward functions (random rewards, weights 1, 0.5, 2)."""
    rewards = ctx.randn(12, 3)
    seen = _combine(ctx, rewards, WEIGHTS)
    expected = reference_impl.combine_rewards(rewards, WEIGHTS)
    assert_close(
        seen,
        expected,
        atol=1e-6,
        rtol=1e-6,
        what="weighted sums",
        causes={
            "reward_weights are ignored": rewards.sum(1),
            "rewards are averaged over functions instead of summed": (
                rewards * torch.tensor(WEIGHTS)
            ).mean(1),
            "weights are applied to the wrong reward functions": rewards
            @ torch.tensor(WEIGHTS[::-1]),
        },
    )


@check("rewards", "combine_rewards")
def nan_entry_adds_nothing(ctx: Context) -> None:
    """A NaN reward (a function that returned None) adds nothing; the row's other rewards still count."""
    ctx.skip_unless("nan_rewards", "excluded", "zero", why=NAN_REWARDS_MEAN["never"])
    rewards = torch.tensor([[1.0, NAN, 0.5], [NAN, 2.0, NAN], [0.25, 1.0, 1.0]])
    seen = _combine(ctx, rewards, WEIGHTS)
    expected = reference_impl.combine_rewards(rewards, WEIGHTS)
    assert_close(
        seen,
        expected,
        atol=1e-6,
        what="rewards with NaN entries skipped",
        causes={
            "a NaN entry makes the whole row NaN (use nansum)": (
                rewards * torch.tensor(WEIGHTS)
            ).sum(1),
        },
    )


@check("rewards", "combine_rewards")
def all_nan_row_stays_nan(ctx: Context) -> None:
    """A row whose every reward is NaN is NaN (unscorable), not 0, so it drops out of group statistics."""
    ctx.skip_unless(
        "nan_rewards", "excluded", why=NAN_REWARDS_MEAN.get(ctx.config["nan_rewards"], "")
    )
    rewards = torch.tensor([[NAN, NAN, NAN], [1.0, 0.0, NAN]])
    seen = _combine(ctx, rewards, WEIGHTS)
    if not math.isnan(float(seen[0])):
        raise CheckFailure(
            "NaN for an all-NaN row",
            fmt(seen[0]),
            "an unscorable row becomes a real reward (nansum gives 0) and biases its group mean",
        )


@check("rewards", "combine_rewards")
def rows_are_independent(ctx: Context) -> None:
    """Permuting the completions permutes their rewards: row i's reward depends on row i only."""
    rewards = ctx.randn(8, 2)
    order = torch.randperm(8, generator=ctx.gen)
    first = _combine(ctx, rewards, [1.0, 0.5])
    second = _combine(ctx, rewards[order], [1.0, 0.5])
    assert_close(
        second,
        first[order],
        atol=1e-6,
        what="permuted rewards",
        fallback_cause="a row's reward depends on other rows (shifted or batch-wide)",
    )
