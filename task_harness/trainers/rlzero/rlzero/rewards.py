"""Reward functions' outputs -> one reward per completion."""

from __future__ import annotations

import math

import torch


def score_completions(reward_fns, weights, prompts, texts, token_ids, columns) -> torch.Tensor:
    """Call every reward function on the batch; a None (the function does not apply to that
    completion) becomes NaN; returns the combined reward of each completion, [N]."""
    table = []
    for fn in reward_fns:
        values = fn(prompts=prompts, completions=texts, completion_ids=token_ids, **columns)
        table.append([math.nan if v is None else float(v) for v in values])
    return mix_rewards(torch.tensor(table, dtype=torch.float32).T, weights)


def mix_rewards(per_fn: torch.Tensor, weights) -> torch.Tensor:
    """[N, K] scores -> [N]: the weighted sum over the functions that scored the completion.

    A completion no function scored stays NaN: it has no reward, so it must not move its group's
    mean or std (advantages.py gives it advantage 0)."""
    w = (
        torch.ones(per_fn.shape[1])
        if weights is None
        else torch.tensor(weights, dtype=torch.float32)
    )
    weighted = per_fn * w
    total = torch.nansum(weighted, dim=1)
    scored = (~torch.isnan(per_fn)).any(dim=1)
    return torch.where(scored, total, torch.full_like(total, math.nan))
