"""Rewards -> group-relative advantages."""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean_g) / (std_g + eps) over each group of `group_size` consecutive rows.

    std_g is the population std (divide by n, as `numpy.std` does): the group is all the samples
    of that prompt there are, not a sample of a larger population. Rows without a reward (NaN)
    are left out of their group's statistics and get advantage 0."""
    grouped = rewards.view(-1, group_size)
    scored = ~torch.isnan(grouped)
    count = scored.sum(dim=1, keepdim=True).clamp(min=1)
    mean = torch.where(scored, grouped, 0.0).sum(dim=1, keepdim=True) / count
    centred = torch.where(scored, grouped - mean, 0.0)
    std = (centred.pow(2).sum(dim=1, keepdim=True) / count).sqrt()
    return (centred / (std + eps)).reshape(-1)
