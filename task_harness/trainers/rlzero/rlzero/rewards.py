"""Reward functions' outputs -> one reward per completion."""

from __future__ import annotations

import math

import torch


def score_table(reward_fns, prompts, texts, token_ids, columns) -> torch.Tensor:
    """Call every reward function on the batch (TRL's signature: keyword arguments `prompts`,
    `completions`, `completion_ids` and the dataset's other columns); [N, K] scores, a None (the
    function does not apply to that completion) as NaN."""
    table = []
    for fn in reward_fns:
        values = fn(prompts=prompts, completions=texts, completion_ids=token_ids, **columns)
        if len(values) != len(texts):
            name = getattr(fn, "__name__", repr(fn))
            raise ValueError(f"reward function {name} gave {len(values)} scores for {len(texts)}")
        table.append([math.nan if v is None else float(v) for v in values])
    return torch.tensor(table, dtype=torch.float32).T.reshape(len(texts), len(reward_fns))


def score_completions(reward_fns, weights, prompts, texts, token_ids, columns) -> torch.Tensor:
    """Call every reward function on the batch; a None (the function does not apply to that
    completion) becomes NaN; returns the combined reward of each completion, [N]."""
    return mix_rewards(score_table(reward_fns, prompts, texts, token_ids, columns), weights)


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


def reward_means(per_fn: torch.Tensor, reward_fns) -> dict[str, float]:
    """Each function's mean score over the completions it scored, unweighted, logged as
    `reward_<function name>` (NaN for a function that scored none)."""
    means = {}
    for k, fn in enumerate(reward_fns):
        name = getattr(fn, "__name__", f"fn{k}").removesuffix("_reward")
        means[f"reward_{name}"] = float(torch.nanmean(per_fn[:, k]))
    return means
