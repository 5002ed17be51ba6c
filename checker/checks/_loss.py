"""Probing `compute_loss`: its value and its gradient with respect to the per-token log-probs.

The loss stages share one function, so each probe is chosen to see one stage only (so that a
failure is localised): aggregation from on-policy VALUES with negative advantages (the ratio is 1 in
value, and min(rA, clip(r)A) = rA for A < 0 inside the band, so ratio and clipping bugs mostly
vanish); the ratio from RATIOS of off-policy to on-policy gradients (the normaliser cancels); the
clipping from WHICH tokens get zero gradient; the KL with A = 0 (the policy term vanishes).
"""

from __future__ import annotations

import torch

from checker.checks import CandidateError, Skip
from checker.checks.context import Context
from checker.fixtures import random_logps, unequal_mask

LENGTHS = [6, 3, 5, 2]  # unequal: the loss types differ only when completion lengths differ
WIDTH = 6
NEGATIVE_ADVANTAGES = torch.tensor([-0.5, -1.25, -0.8, -2.0])
# The declared policy-loss forms without an importance ratio, as a skip reason names them:
# REINFORCE (-A * logp) has none, and a loss that ignores `old_per_token_logps` has only
# exp(logp - sg(logp)), 1 in value, whatever the old log-probs are.
NO_RATIO = {
    "reinforce": "the REINFORCE form has no ratio",
    "on_policy": "no old log-probs: the loss ignores old_per_token_logps, so it has no ratio",
}


def skip_without_ratio(ctx: Context, use: str = "") -> None:
    """Skip a check that needs the importance ratio (`use`: what for, e.g. " to clip") when the
    declared `policy_loss` has none."""
    form = ctx.config["policy_loss"]
    if form in NO_RATIO:
        raise Skip(f"policy_loss: {form} ({NO_RATIO[form]}{use})")


def loss_and_grad(
    ctx: Context, logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """The candidate's loss (detached scalar) and dL/dlogp (zeros if no gradient reaches logp).

    Under a declared `drift_penalty`, off policy, the penalty's share is taken out: the loss at
    A = 0 and beta = 0 for the same log-probs, which is the penalty alone (the policy term is 0
    there, the KL off). Each check then sees the stage it probes; `ratio.drift_penalty_matches_
    declared` checks the penalty itself."""
    value, grad = raw_loss_and_grad(ctx, logps, advantages, mask, **kwargs)
    if ctx.config["drift_penalty"] and kwargs.get("old_per_token_logps") is not None:
        penalty = {**kwargs, "beta": 0.0}
        zero = torch.zeros_like(advantages)
        value_pen, grad_pen = raw_loss_and_grad(ctx, logps, zero, mask, **penalty)
        value, grad = value - value_pen, grad - grad_pen
    return value, grad


def raw_loss_and_grad(
    ctx: Context, logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """`loss_and_grad` with nothing taken out."""
    leaf = logps.detach().clone().requires_grad_(True)
    loss = ctx.call("compute_loss", leaf, advantages, mask, shape=(), **kwargs)
    if not loss.is_floating_point():
        raise CandidateError(f"compute_loss returned a {loss.dtype} tensor", "compute_loss")
    if loss.requires_grad:
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
        grad = torch.zeros_like(leaf) if grad is None else grad
    else:
        grad = torch.zeros_like(leaf)
    return loss.detach().double(), grad.detach().double()


def batch(ctx: Context, lengths: list[int] = LENGTHS, width: int = WIDTH):
    """Random log-probs and an unequal-length mask."""
    mask = unequal_mask(lengths, width)
    return random_logps(ctx.gen, len(lengths), width), mask


def gradient_ratio(
    seen: torch.Tensor, base: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """seen / base on unmasked tokens (NaN where base is 0), and the boolean selection."""
    keep = mask.bool()
    base_kept = base[keep]
    ratio = torch.where(
        base_kept != 0, seen[keep] / base_kept.where(base_kept != 0, 1.0), torch.nan
    )
    return ratio, keep
