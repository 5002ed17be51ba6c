"""Stage `ratio`: the importance ratio pi_theta / pi_old inside `compute_loss`.

Rule (TRL 1.16 gt:L3084-3095, GSPO arXiv:2507.18071): token level r_t = exp(logp_t - old_t);
sequence level r = exp(masked mean_t(logp_t - old_t)); on policy (old=None) old = logp.detach(),
so r is exactly 1 in value and its gradient still flows. Probed through ratios of gradients
(off-policy / on-policy) inside the clip band with A < 0, where the normaliser cancels.
"""

from __future__ import annotations

import torch

from checker.checks import CheckFailure, Skip, check
from checker.checks._loss import (
    NEGATIVE_ADVANTAGES,
    batch,
    gradient_ratio,
    loss_and_grad,
    raw_loss_and_grad,
    skip_without_ratio,
)
from checker.checks.context import Context, assert_close, fmt
from checker.fixtures import random_logps, unequal_mask

IN_BAND = 0.12  # |logp - old| < 0.12 keeps r in (0.89, 1.13): inside the default band [0.8, 1.2]
# A long chain of thought, the responses GSPO was made for (arXiv:2507.18071), drifting 0.02 nats
# per token: the summed log-ratio of a full row is about +-164, past float32's exp range (inf above
# 88.7, 0 below -103.9), while the row's mean keeps r = exp(mean) near 0.98 or 1.02.
LONG_ROW = 8192
DRIFT = 0.02


@check("ratio", "compute_loss")
def on_policy_ratio_is_one(ctx: Context) -> None:
    """old=None equals old=logp.detach() (ratio 1 in value), in loss value and gradient."""
    logps, mask = batch(ctx)
    kind = {"loss_type": ctx.clipped_loss_type(), "importance_sampling_level": "token"}
    value_none, grad_none = loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, **kind)
    value_old, grad_old = loss_and_grad(
        ctx, logps, NEGATIVE_ADVANTAGES, mask, old_per_token_logps=logps.detach().clone(), **kind
    )
    assert_close(
        torch.stack([value_none]),
        torch.stack([value_old]),
        atol=1e-6,
        rtol=1e-6,
        what="the on-policy loss (old=None) equal to old=logp.detach()",
        fallback_cause="with old=None the ratio is not exp(logp - logp.detach()) = 1",
    )
    assert_close(
        grad_none,
        grad_old,
        atol=1e-7,
        rtol=1e-5,
        what="the same gradient for old=None and old=logp.detach()",
        fallback_cause="the on-policy ratio does not carry the policy gradient like exp(logp - sg(logp))",
    )


@check("ratio", "compute_loss")
def on_policy_gradient_flows(ctx: Context) -> None:
    """On policy the ratio is 1 in value but its gradient flows: dL/dlogp != 0 on every unmasked token."""
    logps, mask = batch(ctx)
    kind = {"loss_type": ctx.clipped_loss_type(), "importance_sampling_level": "token"}
    _, grad = loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, **kind)
    dead = (grad == 0) & mask.bool()
    if dead.any():
        raise CheckFailure(
            "a nonzero gradient on every unmasked token",
            f"zero gradient on {int(dead.sum())} of {int(mask.sum())} tokens",
            "the ratio is detached (or a constant 1): exp(logp - logp.detach()) keeps the gradient",
        )


def _token_ratio_probe(ctx: Context, level: str):
    logps, mask = batch(ctx)
    shift = (ctx.rand(*logps.shape) * 2 - 1) * IN_BAND
    old = logps - shift
    kind = {"loss_type": ctx.clipped_loss_type(), "importance_sampling_level": level}
    _, grad_on = loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, **kind)
    _, grad_off = loss_and_grad(
        ctx, logps, NEGATIVE_ADVANTAGES, mask, old_per_token_logps=old, **kind
    )
    ratio, keep = gradient_ratio(grad_off, grad_on, mask)
    return ratio, keep, shift.double(), mask.double()


@check("ratio", "compute_loss")
def token_ratio_is_exp_log_ratio(ctx: Context) -> None:
    """Token level, inside the band: (off-policy gradient) / (on-policy gradient) = exp(logp - old) per token."""
    skip_without_ratio(ctx)
    ratio, keep, shift, _ = _token_ratio_probe(ctx, "token")
    expected = shift.exp()[keep]
    assert_close(
        ratio,
        expected,
        atol=1e-6,
        rtol=1e-4,
        what="per-token ratios",
        causes={
            "the ratio looks inverted: exp(old - logp), not exp(logp - old)": (-shift).exp()[keep],
            "the ratio ignores old_per_token_logps (it is always 1)": torch.ones_like(expected),
            "the ratio is logp - old without the exp": 1 + shift[keep],
        },
    )


@check("ratio", "compute_loss")
def drift_penalty_matches_declared(ctx: Context) -> None:
    """A declared drift_penalty tau adds tau * (logp - old)^2 per token inside the policy term's
    aggregation (prime-rl's kl_tau): at A = 0 and beta = 0 its gradient is 2 tau (logp - old)
    per token with the policy term's token weight, so (that gradient) / (the on-policy
    gradient at A < 0) = 2 tau (logp - old) / -A."""
    tau = float(ctx.config["drift_penalty"])
    if not tau:
        raise Skip("no drift penalty declared (drift_penalty: 0, as in TRL)")
    logps, mask = batch(ctx)
    shift = (ctx.rand(*logps.shape) * 2 - 1) * IN_BAND
    kind = {"loss_type": ctx.clipped_loss_type(), "importance_sampling_level": "token"}
    _, grad_on = raw_loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, **kind)
    zero = torch.zeros_like(NEGATIVE_ADVANTAGES)
    _, grad_pen = raw_loss_and_grad(
        ctx, logps, zero, mask, old_per_token_logps=logps - shift, beta=0.0, **kind
    )
    ratio, keep = gradient_ratio(grad_pen, grad_on, mask)
    per_unit = (shift.double() / -NEGATIVE_ADVANTAGES.double().unsqueeze(1))[keep]
    assert_close(
        ratio,
        2 * tau * per_unit,
        atol=1e-9,
        rtol=1e-4,
        what=f"drift penalty gradients (declared drift_penalty: {tau:g})",
        causes={
            "half the declared gradient: the penalty is tau * (logp - old)^2 / 2 (k2's form),"
            " or its coefficient is half the declared drift_penalty": tau * per_unit,
            "there is no penalty towards old_per_token_logps": torch.zeros_like(per_unit),
        },
        fallback_cause="the penalty is not tau * (logp - old)^2 weighted like the policy term",
    )


@check("ratio", "compute_loss")
def sequence_ratio_is_geometric_mean(ctx: Context) -> None:
    """Sequence level (GSPO): every token of a row gets r = exp(masked mean of logp - old) over the row."""
    skip_without_ratio(ctx)
    ratio, keep, shift, mask = _token_ratio_probe(ctx, "sequence")
    count = mask.sum(1, keepdim=True).clamp(min=1)
    row_mean = ((shift * mask).sum(1, keepdim=True) / count).expand_as(shift)
    expected = row_mean.exp()[keep]
    row_sum = (shift * mask).sum(1, keepdim=True).expand_as(shift)
    all_mean = ((shift * mask).sum(1, keepdim=True) / shift.size(1)).expand_as(shift)
    raw_mean = shift.mean(1, keepdim=True).expand_as(shift)
    assert_close(
        ratio,
        expected,
        atol=1e-6,
        rtol=1e-4,
        what="per-row ratios",
        causes={
            "the sequence log-ratio is a sum, not a mean over the row's tokens": row_sum.exp()[
                keep
            ],
            "the sequence log-ratio is divided by T, not by the row's token count": all_mean.exp()[
                keep
            ],
            "the sequence log-ratio averages masked tokens too": raw_mean.exp()[keep],
            "the ratio is per token: importance_sampling_level='sequence' is ignored": shift.exp()[
                keep
            ],
        },
    )


@check("ratio", "compute_loss")
def sequence_ratio_of_long_rows_is_finite(ctx: Context) -> None:
    """Sequence level on rows of 6,000 to 8,192 tokens drifting 0.02 nats per token: r = exp(masked
    mean of logp - old) is finite and near 1 however long the row; a ratio formed as exp(sum) **
    (1 / n), GSPO's (pi / pi_old) ** (1 / |y|) taken literally, is inf or 0 in float32."""
    skip_without_ratio(ctx)
    lengths = [LONG_ROW, LONG_ROW, 6000, 7000]
    mask = unequal_mask(lengths, LONG_ROW)
    logps = random_logps(ctx.gen, len(lengths), LONG_ROW)
    direction = torch.tensor([1.0, -1.0, -1.0, 1.0]).unsqueeze(1)
    shift = direction * DRIFT + (ctx.rand(*logps.shape) * 2 - 1) * 0.01
    kind = {"loss_type": ctx.clipped_loss_type(), "importance_sampling_level": "sequence"}
    _, grad_on = loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, **kind)
    value_off, grad_off = loss_and_grad(
        ctx, logps, NEGATIVE_ADVANTAGES, mask, old_per_token_logps=logps - shift, **kind
    )
    counted = mask.bool()
    bad_rows = [i for i in range(len(lengths)) if not torch.isfinite(grad_off[i][counted[i]]).all()]
    if not torch.isfinite(value_off) or bad_rows:
        raise CheckFailure(
            "a finite loss and gradient for rows whose summed log-ratio is about +-164",
            f"loss {fmt(value_off)}, non-finite gradient in rows {bad_rows} (mean log-ratio"
            f" {fmt(direction.flatten() * DRIFT)})",
            "the sequence ratio is exponentiated before the mean: exp(sum of log-ratios) overflows"
            " (inf) or underflows (0) in float32 past |sum| of about 88; take the masked mean of"
            " the log-ratios first, then exp",
        )
    ratio, keep = gradient_ratio(grad_off, grad_on, mask)
    shift, mask = shift.double(), mask.double()
    row_mean = (shift * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
    assert_close(
        ratio,
        row_mean.exp().expand_as(shift)[keep],
        atol=1e-6,
        rtol=1e-4,
        what="per-row ratios of long rows",
        fallback_cause="the sequence ratio loses precision on long rows: form it in log space",
    )


@check("ratio", "compute_loss", depends_on=("clipping", "loss_aggregation"))
def sgd_step_follows_advantage_sign(ctx: Context) -> None:
    """One small SGD step on the loss raises log-probs of A > 0 tokens and lowers those of A < 0."""
    logps, mask = batch(ctx)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    _, grad = loss_and_grad(ctx, logps, advantages, mask, importance_sampling_level="token")
    step = -grad  # the SGD direction
    expected = torch.sign(advantages).unsqueeze(1).expand_as(step).double()
    keep = mask.bool()
    wrong = (torch.sign(step) != expected) & keep
    if wrong.any():
        positive = bool((wrong & (expected > 0)).any())
        negative = bool((wrong & (expected < 0)).any())
        cause = (
            "the whole objective has the wrong sign (the loss should be minus the surrogate)"
            if positive and negative
            else "A > 0 tokens get no push up: the clip lets nothing through at r = 1"
            if positive
            else "A < 0 tokens get no push down"
        )
        raise CheckFailure(
            "the SGD step to follow sign(A) on every unmasked token",
            f"it goes the wrong way (or nowhere) on {int(wrong.sum())} tokens, e.g. step {fmt(step[wrong])}",
            cause,
        )
