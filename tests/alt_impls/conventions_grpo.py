"""A correct GRPO with non-default conventions and no convention keywords at all.

It implements loss_type "grpo" (seq-mean-token-mean), no KL bias correction and no std scaling
(Dr. GRPO style advantages), as declared in conventions_grpo.yaml; grpo-check must compare it
with the reference configured the same way and skip what needs other conventions.
"""

import torch


def compute_advantages(rewards, num_generations):
    g = rewards.view(-1, num_generations)
    return torch.nan_to_num((g - torch.nanmean(g, 1, keepdim=True)).view(-1), nan=0.0)


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
):
    m = completion_mask.float()
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    log_ratio = per_token_logps - old
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * m).sum(1) / m.sum(1).clamp(min=1)).unsqueeze(1)
    ratio = torch.exp(log_ratio)
    a = advantages.unsqueeze(1)
    high = epsilon_low if epsilon_high is None else epsilon_high
    loss = -torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon_low, 1 + high) * a)
    if beta != 0.0:
        d = ref_per_token_logps - per_token_logps
        loss = loss + beta * (torch.exp(d) - d - 1)
    return ((loss * m).sum(1) / m.sum(1).clamp(min=1)).mean()
