"""A from-scratch GRPO with three bugs that real trainers shipped: batch-wide
advantage statistics, log-probs scored at temperature 1, and a KL term with the wrong sign.

It runs, its loss is finite and its parameters change: a smoke test passes. `grpo-check demo`
shows grpo-check finding each bug in its own stage. Do not copy this file: it is wrong on purpose.
"""

import torch


def combine_rewards(rewards_per_func, reward_weights):
    weights = torch.as_tensor(reward_weights, dtype=rewards_per_func.dtype)
    total = torch.nansum(rewards_per_func * weights, dim=1)
    return torch.where(torch.isnan(rewards_per_func).all(1), torch.nan, total)


def compute_advantages(rewards, num_generations, scale_rewards="group"):
    grouped = rewards.view(-1, num_generations)
    baseline = rewards.mean()  # BUG: one baseline for the whole batch, not per group
    std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1)
    return (rewards - baseline) / (std + 1e-4)


def selective_log_softmax(logits, index, temperature=1.0):
    # BUG: the sampler divides by the temperature, the scorer forgets to
    logps = torch.log_softmax(logits.float(), dim=-1)
    return logps.gather(-1, index.unsqueeze(-1)).squeeze(-1)


def completion_mask(completion_ids, eos_token_ids, mask_truncated_completions=False):
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_token_ids)))
    seen_before = torch.cumsum(is_eos.int(), dim=1) - is_eos.int()
    mask = (seen_before == 0).int()
    if mask_truncated_completions:
        mask = mask * is_eos.any(dim=1, keepdim=True).int()
    return mask


def per_token_kl(per_token_logps, ref_per_token_logps):
    d = ref_per_token_logps - per_token_logps
    return torch.exp(d) - d - 1


def compute_loss(
    per_token_logps,
    advantages,
    completion_mask,
    *,
    old_per_token_logps=None,
    ref_per_token_logps=None,
    beta=0.0,
    epsilon_low=0.2,
    epsilon_high=None,
    importance_sampling_level="token",
    num_items_in_batch=None,
):
    mask = completion_mask.float()
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    log_ratio = per_token_logps - old
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(1) / mask.sum(1).clamp(min=1)).unsqueeze(1)
    ratio = torch.exp(log_ratio)
    high = epsilon_low if epsilon_high is None else epsilon_high
    a = advantages.unsqueeze(1)
    loss = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + high) * a)
    if beta != 0.0:
        kl = per_token_kl(per_token_logps, ref_per_token_logps) * ratio
        loss = loss - beta * kl  # BUG: the penalty is subtracted, so KL is maximised
    items = mask.sum() if num_items_in_batch is None else torch.tensor(float(num_items_in_batch))
    return (loss * mask).sum() / items.clamp(min=1)
