"""Stage `loss_aggregation`: how `compute_loss` reduces the masked per-token loss to a scalar.

Rule (TRL 1.16 gt:L3153-3183 with one process and GA = 1):
grpo and sapo: mean over rows of each row's masked token mean (count clamped to >= 1); bnpo:
masked sum / max(mask sum, 1); dr_grpo: masked sum / (B * max_completion_length, None -> T);
dapo and cispo: masked sum / max(num_items_in_batch, 1), None -> the mask sum.
Probed on policy with negative advantages, where every clipped-family token loss is exactly -A
(ratio and clipping bugs vanish in the value), against formulas written out here.
"""

from __future__ import annotations

import torch

from checker.checks import CheckFailure, Skip, check
from checker.checks._loss import NEGATIVE_ADVANTAGES, batch, loss_and_grad
from checker.checks.context import Context, assert_close, fmt
from checker.fixtures import random_logps, unequal_mask
from reference_impl.protocol import CLIPPED_LOSS_TYPES

LENGTHS = [6, 3, 0, 5, 2]  # unequal, with one fully masked row
ADVANTAGES = torch.tensor([-0.5, -1.25, -0.9, -0.8, -2.0])
WIDTH, MAX_COMPLETION_LENGTH, NUM_ITEMS = 6, 8, 40
NAMES = {
    "grpo": "seq-mean-token-mean (grpo)",
    "bnpo": "token-mean over the micro-batch (bnpo)",
    "dr_grpo": "sum / (B * max_completion_length) (dr_grpo)",
    "dapo": "sum / num_items_in_batch (dapo)",
    "seq-sum": "seq-mean-token-sum (no per-row division)",
    "sum": "plain masked sum (no normaliser)",
    "unmasked-mean": "mean over every token, masked ones included",
}


def aggregate(token_loss, mask, rule: str, max_len=None, num_items=None) -> torch.Tensor:
    """The hand formulas (written independently of reference_impl)."""
    m = mask.double()
    masked = token_loss * m
    rows, width = m.shape
    if rule in ("grpo", "sapo"):
        return (masked.sum(1) / m.sum(1).clamp(min=1)).mean()
    if rule == "bnpo":
        return masked.sum() / m.sum().clamp(min=1)
    if rule == "dr_grpo":
        return masked.sum() / (rows * (max_len or width))
    if rule in ("dapo", "cispo"):
        items = m.sum() if num_items is None else torch.tensor(float(num_items))
        return masked.sum() / items.clamp(min=1)
    if rule == "seq-sum":
        return masked.sum(1).mean()
    if rule == "sum":
        return masked.sum()
    if rule == "unmasked-mean":
        return token_loss.mean()
    raise ValueError(rule)


def _token_loss(loss_type: str, logps: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Per-token loss on policy (r = 1): -A for the clipped family, -min(1, eps_high) A logp for cispo."""
    a = advantages.double().unsqueeze(1).expand_as(logps)
    if loss_type == "cispo":
        return -a * logps.double()  # eps_high = 5 below, so min(1, eps_high) = 1
    return -a


def _check_formula(ctx: Context, loss_type: str, own: bool) -> None:
    logps = random_logps(ctx.gen, len(LENGTHS), WIDTH)
    mask = unequal_mask(LENGTHS, WIDTH)
    extra = {"epsilon_high": 5.0} if loss_type == "cispo" else {}
    cases = [{}]
    if loss_type == "dr_grpo":
        cases.append({"max_completion_length": MAX_COMPLETION_LENGTH})
    if loss_type in ("dapo", "cispo"):
        cases.append({"num_items_in_batch": NUM_ITEMS})
    token_loss = _token_loss(loss_type, logps, ADVANTAGES)
    for case in cases:
        kwargs = dict(case, **extra)
        if not own:
            kwargs["loss_type"] = loss_type
        value, _ = loss_and_grad(
            ctx, logps, ADVANTAGES, mask, importance_sampling_level="token", beta=0.0, **kwargs
        )
        max_len, num_items = case.get("max_completion_length"), case.get("num_items_in_batch")
        expected = aggregate(token_loss, mask, loss_type, max_len, num_items)
        causes = {}
        same_rule = {"cispo": "dapo", "sapo": "grpo"}.get(loss_type, loss_type)
        for rule in CLIPPED_LOSS_TYPES:
            if rule != same_rule:
                cause = f"the loss equals the {NAMES[rule]} value: loss_type looks like {rule}, not {loss_type}"
                causes[cause] = aggregate(token_loss, mask, rule, max_len, num_items)
        for rule in ("seq-sum", "sum", "unmasked-mean"):
            causes[f"the loss is the {NAMES[rule]}"] = aggregate(token_loss, mask, rule)
        if num_items is not None:
            causes["num_items_in_batch is ignored: the normaliser is the local mask sum"] = (
                aggregate(token_loss, mask, "bnpo")
            )
        if max_len is not None:
            causes["max_completion_length is ignored: the normaliser uses T"] = aggregate(
                token_loss, mask, "dr_grpo"
            )
        grpo_unclamped = (token_loss * mask).sum(1) / mask.sum(1)
        causes["a fully masked row divides by 0 (clamp the token count to >= 1)"] = (
            grpo_unclamped.nanmean()
        )
        label = ", ".join(f"{k}={v}" for k, v in case.items())
        assert_close(
            value.reshape(1),
            expected.reshape(1),
            atol=1e-7,
            rtol=1e-5,
            what=f"{loss_type} loss{' (' + label + ')' if label else ''}",
            causes={k: v.reshape(1) for k, v in causes.items()},
        )


@check("loss_aggregation", "compute_loss")
def own_loss_type_matches_formula(ctx: Context) -> None:
    """On policy, A < 0, unequal lengths and a fully masked row: the loss at the candidate's own loss_type equals its formula."""
    own = ctx.config["loss_type"]
    if own == "sapo":
        raise Skip(
            "sapo's aggregation is checked through its gradient (sapo_gradient_matches_formula)"
        )
    _check_formula(ctx, own, own=True)


@check("loss_aggregation", "compute_loss")
def other_loss_types_match_formula(ctx: Context) -> None:
    """Every other loss_type (grpo, bnpo, dr_grpo, dapo, cispo) the candidate takes equals its formula."""
    ran = 0
    for loss_type in (*CLIPPED_LOSS_TYPES, "cispo"):
        if loss_type == ctx.config["loss_type"]:
            continue
        try:
            _check_formula(ctx, loss_type, own=False)
            ran += 1
        except Skip:
            continue
    if not ran:
        raise Skip("compute_loss takes no other loss_type")


@check("loss_aggregation", "compute_loss", depends_on=("ratio",))
def sapo_gradient_matches_formula(ctx: Context) -> None:
    """sapo on policy: dL/dlogp = -A / (row token count) / B, the seq-mean-token-mean weights (sapo's gate slope is 1/4 * 4 at r = 1)."""
    logps = random_logps(ctx.gen, len(LENGTHS), WIDTH)
    mask = unequal_mask(LENGTHS, WIDTH)
    _, grad = loss_and_grad(
        ctx, logps, ADVANTAGES, mask, loss_type="sapo", importance_sampling_level="token"
    )
    m = mask.double()
    expected = (
        -ADVANTAGES.double().unsqueeze(1) * m / m.sum(1, keepdim=True).clamp(min=1) / m.size(0)
    )
    other = -ADVANTAGES.double().unsqueeze(1) * m / m.sum().clamp(min=1)
    assert_close(
        grad,
        expected,
        atol=1e-8,
        rtol=1e-5,
        what="sapo gradients",
        causes={"sapo is aggregated as a token mean, not seq-mean-token-mean like grpo": other},
    )


@check("loss_aggregation", "compute_loss")
def masked_entries_are_ignored(ctx: Context) -> None:
    """Setting masked log-probs, old and reference log-probs to other finite values changes neither loss nor gradient."""
    logps, mask = batch(ctx, [6, 3, 5, 2])
    old = logps - (ctx.rand(*logps.shape) - 0.5) * 0.2
    ref = logps + (ctx.rand(*logps.shape) - 0.5)
    masked = ~mask.bool()
    options = {"importance_sampling_level": "token", "beta": 0.1}
    value, grad = loss_and_grad(
        ctx,
        logps,
        NEGATIVE_ADVANTAGES,
        mask,
        old_per_token_logps=old,
        ref_per_token_logps=ref,
        **options,
    )
    noisy = logps.where(~masked, torch.tensor(-7.5))
    noisy_old = old.where(~masked, torch.tensor(-0.05))
    noisy_ref = ref.where(~masked, torch.tensor(-3.0))
    value2, grad2 = loss_and_grad(
        ctx,
        noisy,
        NEGATIVE_ADVANTAGES,
        mask,
        old_per_token_logps=noisy_old,
        ref_per_token_logps=noisy_ref,
        **options,
    )
    cause = "masked tokens leak into the loss: multiply by the mask before summing"
    assert_close(
        value2.reshape(1),
        value.reshape(1),
        atol=1e-7,
        rtol=1e-6,
        what="the same loss",
        fallback_cause=cause,
    )
    assert_close(grad2, grad, atol=1e-8, rtol=1e-6, what="the same gradient", fallback_cause=cause)


@check("loss_aggregation", "compute_loss")
def fully_masked_batch_is_zero(ctx: Context) -> None:
    """A batch whose every token is masked gives loss 0 and a finite (zero) gradient, not NaN."""
    if ctx.config.get("empty_batch_normaliser", "clamped") != "clamped" and ctx.config[
        "loss_type"
    ] in ("dapo", "cispo"):
        raise Skip("declared unclamped dapo/cispo normaliser: 0 / 0 on an empty batch")
    logps, mask = batch(ctx)
    mask = torch.zeros_like(mask)
    value, grad = loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask)
    if (
        not torch.isfinite(value)
        or value.abs() > 1e-9
        or not torch.isfinite(grad).all()
        or grad.abs().max() > 0
    ):
        raise CheckFailure(
            "loss 0 with zero gradient",
            f"loss {fmt(value)}, max |grad| {fmt(float(grad.abs().max()))}",
            "a token count of 0 is divided by: clamp the normaliser to >= 1",
        )
