"""Stage `rewards`: combine the outputs of several reward functions into one scalar per completion."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reference_impl.errors import GRPOInputError


def combine_rewards(
    rewards_per_func: torch.Tensor, reward_weights: Sequence[float] | torch.Tensor | None = None
) -> torch.Tensor:
    """Weighted sum over reward functions; `[N, K] -> [N]`.

    A NaN entry (a reward function that returned None) adds nothing; a row whose K entries are all
    NaN is NaN, so that it drops out of the group statistics (TRL 1.16 gt:L2759-2764).
    """
    if rewards_per_func.dim() != 2:
        raise GRPOInputError(
            f"rewards_per_func must be [N, K], got shape {tuple(rewards_per_func.shape)}"
        )
    num_funcs = rewards_per_func.size(1)
    if reward_weights is None:
        weights = torch.ones(num_funcs, dtype=rewards_per_func.dtype)
    else:
        weights = torch.as_tensor(reward_weights, dtype=rewards_per_func.dtype)
    if weights.shape != (num_funcs,):
        raise GRPOInputError(
            f"reward_weights has {weights.numel()} entries for {num_funcs} reward functions"
        )
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    # r_i = nansum_k w_k R_ik  (TRL gt:L2763)
    rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    rewards[unscorable] = torch.nan  # TRL gt:L2764
    return rewards
