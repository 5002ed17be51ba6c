"""Rewards -> advantages: the group-relative one GRPO uses, and the other estimators a run may
select (RunConfig.advantage_estimator). Rows without a reward (NaN: no reward function scored
them) are left out of every statistic and get advantage 0."""

from __future__ import annotations

import math

import torch


def _centred(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each reward minus its group's mean (over the group's scored rows; 0 where unscored), laid
    out as [P, G], a group being `group_size` consecutive rows; and which rows were scored."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    count = scored.sum(dim=1, keepdim=True).clamp(min=1)
    mean = torch.where(scored, grouped, 0.0).sum(dim=1, keepdim=True) / count
    return torch.where(scored, grouped - mean, 0.0), scored


def _normalised(centred: torch.Tensor, std: torch.Tensor, eps: float) -> torch.Tensor:
    """centred / (std + eps), one advantage per row ([P, G] back to [P * G])."""
    return (centred / (std + eps)).reshape(-1)


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean_g) / (std_g + eps) over each group of `group_size` consecutive rows.

    std_g is the population std (divide by n, as `numpy.std` does): the group is all the samples
    of that prompt there are, not a sample of a larger population. Rows without a reward (NaN)
    are left out of their group's statistics and get advantage 0."""
    centred, scored = _centred(rewards, group_size)
    count = scored.sum(dim=1, keepdim=True).clamp(min=1)
    std = (centred.pow(2).sum(dim=1, keepdim=True) / count).sqrt()
    return _normalised(centred, std, eps)


def batch_scaled_advantages(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """The centred rewards (`_centred`: the group's mean is the baseline) normalised
    (`_normalised`) by std_B, the population std of every scored reward of the rollout (the
    batch-wide scale of TRL's scale_rewards="batch", whose std divides by n - 1), so a group whose
    rewards barely differ keeps small advantages."""
    centred, _ = _centred(rewards, group_size)
    values = rewards[~torch.isnan(rewards)]
    std = (values - values.mean()).pow(2).mean().sqrt() if values.numel() else torch.tensor(0.0)
    return _normalised(centred, std, eps)


def mean_only_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The centred rewards (`_centred`), not divided by any std (Dr. GRPO, arXiv:2503.20783: the
    std division favours prompts whose rewards barely vary)."""
    centred, _ = _centred(rewards, group_size)
    return centred.reshape(-1)


def leave_one_out_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each reward against the mean of the other scored rewards of its group (RLOO,
    arXiv:2402.14740): the centred reward (`_centred`) times n / (n - 1) for a group of n scored
    rows. A group with one scored row has no baseline: 0."""
    centred, scored = _centred(rewards, group_size)
    count = scored.sum(dim=1, keepdim=True)
    scale = torch.where(count > 1, count / (count - 1).clamp(min=1), 0.0)
    return (centred * scale).reshape(-1)


def estimate_advantages(
    rewards: torch.Tensor, group_size: int, estimator: str, eps: float
) -> torch.Tensor:
    """Advantages of one rollout by `estimator` (RunConfig.advantage_estimator)."""
    if estimator == "group":
        return group_advantages(rewards, group_size, eps)
    if estimator == "batch":
        return batch_scaled_advantages(rewards, group_size, eps)
    if estimator == "mean_only":
        return mean_only_advantages(rewards, group_size)
    if estimator == "rloo":
        return leave_one_out_advantages(rewards, group_size)
    raise ValueError(f"unknown advantage estimator {estimator!r}")


def group_reward_spread(rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """What a user logs about the groups: the mean population std of a group's scored rewards,
    and the share of groups whose scored rewards are all equal (they teach nothing)."""
    centred, scored = _centred(rewards, group_size)
    count = scored.sum(dim=1).clamp(min=1)
    std = (centred.pow(2).sum(dim=1) / count).sqrt()
    return {
        "reward_std": float(std.mean()),
        "frac_zero_std": float((std == 0).float().mean()),
    }


def uniform_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """True for each row of a group whose scored rewards are all equal (or that has none), [N]."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    high = torch.where(scored, grouped, -math.inf).max(dim=1).values
    low = torch.where(scored, grouped, math.inf).min(dim=1).values
    uniform = ~(high > low)
    return uniform.repeat_interleave(group_size)
