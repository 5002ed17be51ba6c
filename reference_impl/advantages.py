"""Stage `advantages`: the group-relative baseline that replaces PPO's critic."""

from __future__ import annotations

import torch

from reference_impl.errors import GRPOInputError
from reference_impl.protocol import SCALE_REWARDS

# Added to the std, not inside the square root (TRL 1.16 gt:L2787; 1e-4 in every version since v0.14).
ADVANTAGE_EPSILON = 1e-4


def nanstd(values: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """Bessel-corrected (n - 1) std over the non-NaN entries; NaN when fewer than 2 are valid.

    Written with the same operations as TRL's `trainer/utils.py:nanstd` so that results agree bitwise.
    """
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(values), dim=dim, keepdim=True)
    correction = torch.where(count > 1, count / (count - 1), torch.full_like(mean, float("nan")))
    std = torch.sqrt(variance * correction)
    return std if keepdim else std.squeeze(dim) if dim is not None else std.reshape(())


def compute_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    """Group-relative advantages; `[N] -> [N]`, N = num_prompts x G in contiguous blocks of G.

    A_i = (r_i - nanmean(group)) / (nanstd(group) + 1e-4)   for "group"    (DeepSeekMath eq. 4)
    A_i = (r_i - nanmean(group)) / (nanstd(all N) + 1e-4)   for "batch"    (TRL gt:L2777)
    A_i =  r_i - nanmean(group)                             for "none"     (Dr. GRPO, arXiv:2503.20783)
    NaN results (unscorable rows, groups with < 2 valid rewards) become 0 (TRL gt:L2810).
    """
    if scale_rewards not in SCALE_REWARDS:
        raise GRPOInputError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    if num_generations < 2:
        raise GRPOInputError(
            f"num_generations must be at least 2 for a group baseline, got {num_generations}"
        )
    if rewards.dim() != 1:
        raise GRPOInputError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if rewards.numel() % num_generations != 0:
        raise GRPOInputError(
            f"{rewards.numel()} rewards do not split into groups of num_generations={num_generations}"
        )
    grouped = rewards.view(-1, num_generations)
    group_mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    advantages = rewards - group_mean
    if scale_rewards == "group":
        group_std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
        advantages = advantages / (group_std + ADVANTAGE_EPSILON)
    elif scale_rewards == "batch":
        batch_std = nanstd(rewards).expand_as(rewards)
        advantages = advantages / (batch_std + ADVANTAGE_EPSILON)
    return torch.nan_to_num(advantages, nan=0.0)
