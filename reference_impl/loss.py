"""Stages `ratio`, `clipping`, `kl` and `loss_aggregation`: the GRPO objective for one micro-batch.

Mirrors TRL 1.16 `GRPOTrainer._compute_loss` (gt:L3020-3183) with one process, no gradient
accumulation and one step per generation (P = GA = S = 1), as the stage protocol fixes.
"""

from __future__ import annotations

import torch

from reference_impl.errors import GRPOInputError
from reference_impl.kl import per_token_kl
from reference_impl.protocol import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES


def importance_ratio(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    completion_mask: torch.Tensor,
    importance_sampling_level: str = "token",
) -> torch.Tensor:
    """pi_theta / pi_old: `[B, T]` per token, or `[B, 1]` per sequence (GSPO).

    token:    r_t = exp(logp_t - old_t)                                        (TRL gt:L3083-3095)
    sequence: r   = exp(sum_t m_t (logp_t - old_t) / max(sum_t m_t, 1))        (GSPO, arXiv:2507.18071)
    """
    log_ratio = per_token_logps - old_per_token_logps
    if importance_sampling_level == "sequence":
        mask = completion_mask.to(log_ratio.dtype)
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    return torch.exp(log_ratio)


def _policy_term(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    per_token_logps: torch.Tensor,
    loss_type: str,
    epsilon_low: float,
    epsilon_high: float,
    delta: float | None,
    sapo_temperature_pos: float,
    sapo_temperature_neg: float,
) -> torch.Tensor:
    """Per-token policy loss before the KL term and aggregation."""
    if loss_type == "cispo":
        # -sg(min(r, eps_high)) * A * logp: the IS weight is capped at eps_high itself (MiniMax-M1; gt:L3110)
        capped_weight = torch.clamp(ratio, max=epsilon_high).detach()
        return -capped_weight * advantages * per_token_logps
    if loss_type == "sapo":
        # -sigmoid(tau (r - 1)) * 4 / tau * A, tau by the sign of A (SAPO; gt:L3121-3124)
        tau = torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)
        return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * advantages
    # PPO's clipped surrogate: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)  (DeepSeekMath eq. 3)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        # Two-sided clipping caps the unclipped ratio too (INTELLECT-2; gt:L3115-3116)
        ratio = torch.clamp(ratio, max=delta)
    return -torch.min(ratio * advantages, clipped_ratio * advantages)


def _aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_completion_length: int | None,
    num_items_in_batch: int | float | torch.Tensor | None,
) -> torch.Tensor:
    """Reduce the masked per-token loss to a scalar (TRL gt:L3153-3183 with GA = P = S = 1)."""
    masked = per_token_loss * mask
    if loss_type in ("grpo", "sapo"):
        # mean over rows of each row's token mean (DeepSeekMath's 1/|o_i|)
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        # token mean over the micro-batch
        return masked.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        # a constant normaliser B * L_max removes the length bias (Dr. GRPO, arXiv:2503.20783)
        # T from the mask: with sequence-level ratios and beta = 0 the per-token loss is [B, 1]
        length = mask.size(-1) if max_completion_length is None else max_completion_length
        return masked.sum() / (mask.size(0) * length)
    # dapo, cispo: token mean over the whole generation batch (DAPO, arXiv:2503.14476)
    num_items = mask.sum() if num_items_in_batch is None else num_items_in_batch
    return masked.sum() / torch.as_tensor(num_items, dtype=masked.dtype).clamp(min=1.0)


def compute_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    old_per_token_logps: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    loss_type: str = "dapo",
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: str = "token",
    use_bias_correction_kl: bool = True,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
) -> torch.Tensor:
    """Scalar GRPO loss of a micro-batch; its gradient flows to `per_token_logps`.

    `advantages` is `[B]` or `[B, T]`. `old_per_token_logps=None` means on policy: the ratio is
    exp(logp - sg(logp)), 1 in value, and its gradient is the plain policy gradient A * grad logp.
    """
    if loss_type not in LOSS_TYPES:
        raise GRPOInputError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise GRPOInputError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {importance_sampling_level!r}"
        )
    if per_token_logps.dim() != 2 or completion_mask.shape != per_token_logps.shape:
        raise GRPOInputError(
            f"per_token_logps and completion_mask must both be [B, T]; got {tuple(per_token_logps.shape)} and {tuple(completion_mask.shape)}"
        )
    if advantages.shape not in (per_token_logps.shape[:1], per_token_logps.shape):
        raise GRPOInputError(
            f"advantages must be [B] or [B, T] for B, T = {tuple(per_token_logps.shape)}; got {tuple(advantages.shape)}"
        )
    if beta != 0.0 and ref_per_token_logps is None:
        raise GRPOInputError("beta != 0 needs ref_per_token_logps from the frozen reference model")
    epsilon_high = epsilon_low if epsilon_high is None else epsilon_high
    mask = completion_mask.to(per_token_logps.dtype)
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    if old_per_token_logps is None:
        old_per_token_logps = per_token_logps.detach()

    ratio = importance_ratio(per_token_logps, old_per_token_logps, mask, importance_sampling_level)
    per_token_loss = _policy_term(
        ratio,
        advantages,
        per_token_logps,
        loss_type,
        epsilon_low,
        epsilon_high,
        delta,
        sapo_temperature_pos,
        sapo_temperature_neg,
    )
    if beta != 0.0:
        kl = per_token_kl(per_token_logps, ref_per_token_logps)
        if use_bias_correction_kl:
            # samples come from pi_old, so weight the KL by the unclipped ratio (DeepSeek-V3.2; gt:L3104-3105)
            kl = kl * ratio
        per_token_loss = per_token_loss + beta * kl
    return _aggregate(per_token_loss, mask, loss_type, max_completion_length, num_items_in_batch)
