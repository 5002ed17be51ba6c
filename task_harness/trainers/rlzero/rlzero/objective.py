"""The clipped surrogate with a KL penalty, as one scalar."""

from __future__ import annotations

import torch


def surrogate_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    max_new_tokens: int,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss to minimise and its statistics.

    Per token (PPO, arXiv:1707.06347; GRPO, arXiv:2402.03300):
        r = exp(logp - old_logp)
        l = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A) + kl_coef * k3
        k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1   (unbiased, >= 0; Schulman 2020)
    Aggregation (Dr. GRPO, arXiv:2503.20783): the sum over counted tokens divided by
    rows * max_new_tokens, a constant, so a completion's weight does not depend on its length.
    """
    mask = mask.float()
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.min(unclipped, clipped)
    kl = None
    if ref_logp is not None and kl_coef != 0.0:
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + kl_coef * kl
    loss = (per_token * mask).sum() / (mask.size(0) * max_new_tokens)
    stats = {"ratio_max": float((ratio.detach() * mask).max())}
    if kl is not None:
        stats["kl"] = float((kl.detach() * mask).sum() / mask.sum().clamp(min=1))
    return loss, stats
