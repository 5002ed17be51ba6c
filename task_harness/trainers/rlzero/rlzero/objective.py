"""The clipped surrogate with a KL penalty, as one scalar, and the statistics a run logs of it."""

from __future__ import annotations

import torch


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the log-probs of the sampled tokens
    (Schulman 2020, "Approximating KL divergence"), with log_ratio = logp - ref_logp:
        k1 = log_ratio                              (unbiased, can be negative)
        k2 = log_ratio^2 / 2                        (biased, >= 0)
        k3 = exp(-log_ratio) + log_ratio - 1       (unbiased, >= 0)"""
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k2":
        return (logp - ref_logp).pow(2) / 2
    if estimator == "k3":
        delta = ref_logp - logp
        return torch.exp(delta) - delta - 1
    raise ValueError(f"unknown KL estimator {estimator!r}")


def importance_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str = "token"
) -> torch.Tensor:
    """log of the importance ratio policy / old policy: per token ("token", [N, T]), or one per
    completion, the mean over its counted tokens of the per-token log ratios ("sequence", [N, 1];
    GSPO, arXiv:2507.18071, TRL's importance_sampling_level)."""
    log_ratio = logp - old_logp
    if level == "token":
        return log_ratio
    if level == "sequence":
        return ((log_ratio * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).unsqueeze(1)
    raise ValueError(f"unknown importance level {level!r}")


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    max_new_tokens: int,
    rows: int | None = None,
    tokens: float | None = None,
) -> torch.Tensor:
    """Per-token losses [n, T] of a micro-batch -> its share of the optimizer step's loss.

    `rows` and `tokens` are the rows and counted tokens of the whole optimizer step (default: this
    micro-batch's), so the shares of a step's micro-batches add up to the loss of the step taken
    whole, for every type but bnpo:
        grpo     sum over rows of (the row's token sum / its token count), / rows
        bnpo     token sum / this micro-batch's token count, / (rows / n) micro-batches
        dapo     token sum / the step's token count (DAPO, arXiv:2503.14476)
        dr_grpo  token sum / (rows * max_new_tokens), a constant (Dr. GRPO, arXiv:2503.20783)
    """
    rows = mask.size(0) if rows is None else rows
    if loss_type == "grpo":
        per_row = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return per_row.sum() / rows
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1) * (mask.size(0) / rows)
    if loss_type == "dapo":
        tokens = mask.sum().clamp(min=1) if tokens is None else max(tokens, 1.0)
        return (per_token * mask).sum() / tokens
    if loss_type == "dr_grpo":
        return (per_token * mask).sum() / (rows * max_new_tokens)
    raise ValueError(f"unknown loss type {loss_type!r}")


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
    kl_estimator: str = "k3",
    dual_clip: float | None = None,
    loss_type: str = "dr_grpo",
    importance_level: str = "token",
    rows: int | None = None,
    tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss to minimise and its statistics.

    Per token (PPO, arXiv:1707.06347; GRPO, arXiv:2402.03300):
        r = exp(logp - old_logp)   (with importance_level "sequence": `importance_log_ratio`)
        l = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A) + kl_coef * k3
    with k3 (or the estimator `kl_estimator` names) from `kl_estimate`. With `dual_clip` c, a token
    whose advantage is negative loses at most -c * A. Aggregation: `aggregate` by `loss_type`;
    `rows` and `tokens` are those of the optimizer step this micro-batch belongs to.

    Statistics: `ratio_max` the largest ratio of a counted token; `clip_ratio` the share of
    counted tokens whose ratio left the trust region on the side their advantage pushes it
    (where the clip cuts the gradient); `kl` the mean estimate over counted tokens.
    """
    mask = mask.float()
    ratio = torch.exp(importance_log_ratio(logp, old_logp, mask, importance_level))
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.min(unclipped, clipped)
    if dual_clip is not None:
        per_token = torch.where(adv < 0, torch.min(per_token, -dual_clip * adv), per_token)
    kl = None
    if ref_logp is not None and kl_coef != 0.0:
        kl = kl_estimate(logp, ref_logp, kl_estimator)
        per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, loss_type, max_new_tokens, rows, tokens)
    stats = {
        "ratio_max": float((ratio.detach() * mask).max()),
        "clip_ratio": clip_fraction(ratio.detach(), adv, mask, clip_low, clip_high),
    }
    if kl is not None:
        stats["kl"] = float((kl.detach() * mask).sum() / mask.sum().clamp(min=1))
    return loss, stats


def clip_fraction(
    ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip_low: float, clip_high: float
) -> float:
    """Share of counted tokens whose clipped term is the one taken and has no gradient: the
    ratio above 1 + clip_high with a positive advantage, or below 1 - clip_low with a negative
    one (TRL's clip_ratio/region_mean)."""
    high = (ratio > 1 + clip_high) & (adv > 0)
    low = (ratio < 1 - clip_low) & (adv < 0)
    return float(((high | low).float() * mask).sum() / mask.sum().clamp(min=1))
