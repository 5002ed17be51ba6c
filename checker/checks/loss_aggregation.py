"""Stage `loss_aggregation`: how `compute_loss` reduces the masked per-token loss to a scalar.

Rule (TRL 1.16 gt:L3153-3183 with one process and GA = 1):
grpo and sapo: mean over rows of each row's masked token mean (count clamped to >= 1); bnpo:
masked sum / max(mask sum, 1); dr_grpo: masked sum / (B * max_completion_length, None -> T);
dapo and cispo: masked sum / max(num_items_in_batch, 1), None -> the mask sum.
Probed on policy with negative advantages, where every clipped-family token loss is exactly -A
(ratio and clipping bugs vanish in the value), against formulas written out here. Declared
conventions change the formula: a verl `loss_agg_mode`, `empty_rows: excluded` (verl's row means
leave fully masked rows out of the row count), `empty_rows: never` (a trainer that never builds a
fully masked row is probed without one), and `policy_loss: reinforce` (-A * logp: its value
differs from the surrogate's, so the GRADIENT is compared).

Gradient accumulation (gt:L3153-3172), for a `compute_loss` that takes `gradient_accumulation_steps`
(TRL's own does from 0.23): each micro-step's loss is scaled so that the GA micro-steps' summed
gradient equals one batch's. grpo, bnpo and dr_grpo divide by GA; dapo and cispo divide by
num_items_in_batch, the tokens of the whole generation batch of S micro-batches, times GA / S
(TRL 1.10+, PR #6024), which is the tokens of one accumulation window.
"""

from __future__ import annotations

import inspect

import torch

from checker import conventions
from checker.checks import CheckFailure, Skip, check
from checker.checks._loss import NEGATIVE_ADVANTAGES, batch, loss_and_grad
from checker.checks.context import Context, assert_close, fmt
from checker.fixtures import random_logps, unequal_mask
from reference_impl.protocol import CLIPPED_LOSS_TYPES, LOSS_TYPES

LENGTHS = [6, 3, 0, 5, 2]  # unequal, with one fully masked row
NON_EMPTY_LENGTHS = [6, 3, 4, 5, 2]  # the same without it, under empty_rows: never
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


def aggregate(token_loss, mask, rule: str, max_len=None, num_items=None, empty_rows="counted"):
    """The hand formulas (checker.conventions, written independently of reference_impl)."""
    return conventions.aggregate(
        token_loss, mask, rule, max_len=max_len, num_items=num_items, empty_rows=empty_rows
    )


def _token_loss(form: str, logps: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Per-token loss on policy (r = 1): -A * r for the clipped family (r = exp(logp - sg(logp))),
    -min(1, eps_high) A logp for cispo and the REINFORCE form; differentiable in `logps`."""
    a = advantages.double().unsqueeze(1).expand_as(logps)
    if form in ("cispo", "reinforce"):
        return -a * logps  # eps_high = 5 below, so min(1, eps_high) = 1
    return -a * torch.exp(logps - logps.detach())


def _lengths(ctx: Context) -> list[int]:
    """The probe's completion lengths: one fully masked row, unless the candidate declares that
    it never builds one."""
    return NON_EMPTY_LENGTHS if ctx.config["empty_rows"] == "never" else LENGTHS


def _check_formula(ctx: Context, loss_type: str, own: bool) -> None:
    lengths = _lengths(ctx)
    logps = random_logps(ctx.gen, len(lengths), WIDTH)
    mask = unequal_mask(lengths, WIDTH)
    extra = {"epsilon_high": 5.0} if loss_type == "cispo" else {}
    rule = conventions.aggregation_rule(ctx.config, None if own else loss_type)
    empty_rows = ctx.config["empty_rows"]
    cases = [{}]
    if rule == "dr_grpo":
        cases.append({"max_completion_length": MAX_COMPLETION_LENGTH})
    if rule in ("dapo", "cispo"):
        cases.append({"num_items_in_batch": NUM_ITEMS})
    reinforce = ctx.config["policy_loss"] == "reinforce" and loss_type != "cispo"
    form = "reinforce" if reinforce else loss_type
    for index, case in enumerate(cases):
        kwargs = dict(case, **extra)
        if not own:
            kwargs["loss_type"] = loss_type
        try:
            value, grad = loss_and_grad(
                ctx, logps, ADVANTAGES, mask, importance_sampling_level="token", beta=0.0, **kwargs
            )
        except Skip:
            if index == 0:  # the normaliser options are optional; the loss type itself is not
                raise
            continue
        max_len = case.get("max_completion_length", _own_scale(ctx, own))
        num_items = case.get("num_items_in_batch")

        def formula(rule, max_len=max_len, num_items=num_items, empty_rows=empty_rows):
            """The value (or, for the REINFORCE form, dL/dlogp) of an aggregation rule."""
            leaf = logps.detach().double().requires_grad_(True)
            total = aggregate(
                _token_loss(form, leaf, ADVANTAGES), mask, rule, max_len, num_items, empty_rows
            )
            if not reinforce:
                return total.detach().reshape(1)
            return torch.autograd.grad(total, leaf)[0]

        expected = formula(rule)
        causes = {}
        own_rule = conventions.aggregation_rule(ctx.config)
        trl_form = ctx.config["form_aggregation"] == "loss_type"
        if not own and loss_type in conventions.FORM_LOSS_TYPES and trl_form and own_rule != rule:
            # first: the one cause no loss_type's TRL rule explains
            named = NAMES.get(own_rule, own_rule)
            causes[
                f"{loss_type} is aggregated the way your own loss is, {named}, not as TRL"
                f" aggregates {loss_type}: if your trainer gives cispo and sapo its own loss's"
                " aggregation (verl's actor, slime, AReaL do), declare form_aggregation: own"
            ] = formula(own_rule)
        same_rule = {"cispo": "dapo", "sapo": "grpo"}.get(rule, rule)
        for other in CLIPPED_LOSS_TYPES:
            if other != same_rule and not (
                rule == "bnpo" and other == "dapo" and num_items is None
            ):
                cause = f"the loss equals the {NAMES[other]} value: loss_type looks like {other}, not {loss_type}"
                if other == loss_type:  # the declared loss_agg_mode is what is not applied
                    mode = ctx.config["loss_agg_mode"]
                    cause = f"the loss is {loss_type}'s own {NAMES[other]}, not the declared loss_agg_mode {mode}"
                causes[cause] = formula(other)
        if rule == "dr_grpo":  # verl before 0.7 and ROLL: seq-mean-token-sum-norm without the / B
            rows = max(
                int((mask.sum(1) > 0).sum()) if empty_rows == "excluded" else mask.size(0), 1
            )
            causes[
                "the sum over rows divided by T, not by B * T: seq-mean-token-sum-norm as verl"
                " before 0.7 (and ROLL) compute it, B times TRL's dr_grpo"
            ] = formula(rule) * rows
        for other in ("seq-sum", "sum", "unmasked-mean"):
            if other != rule:
                causes[f"the loss is the {NAMES[other]}"] = formula(other, None, None)
        if num_items is not None:
            causes["num_items_in_batch is ignored: the normaliser is the local mask sum"] = formula(
                "bnpo"
            )
        if case.get("max_completion_length") is not None:
            causes["max_completion_length is ignored: the normaliser uses T"] = formula(
                "dr_grpo", None
            )
        if rule in conventions.ROW_MEAN_RULES and 0 in lengths:
            flipped = "counted" if empty_rows == "excluded" else "excluded"
            causes[_EMPTY_ROW_CAUSE[flipped]] = formula(rule, empty_rows=flipped)
        if (
            not reinforce
            and rule in ("bnpo", "dapo", "cispo")
            and num_items is None
            and 0 in lengths
        ):
            # the token count summed from per-row counts each clamped to >= 1
            counts = mask.double().sum(1).clamp(min=1).sum()
            token = _token_loss(form, logps.double(), ADVANTAGES).detach()
            phantom = (token * mask.double()).sum() / counts
            causes[
                "each fully masked row adds a token to the count: the per-row token counts are"
                " clamped to >= 1 before they are summed (clamp the sum instead)"
            ] = phantom.reshape(1)
        if not reinforce and rule in ("grpo", "sapo") and 0 in lengths:
            # the row's token mean with its count unclamped: 0 / 0 on the empty row, so NaN
            grpo_unclamped = (-ADVANTAGES.double().unsqueeze(1) * mask).sum(1) / mask.sum(1)
            causes[_UNCLAMPED_ROW_CAUSE] = grpo_unclamped.mean().reshape(1)
        label = ", ".join(f"{k}={v}" for k, v in case.items())
        name = ctx.config["loss_agg_mode"] if own and ctx.config["loss_agg_mode"] else loss_type
        what = f"{name} {'gradient (REINFORCE form)' if reinforce else 'loss'}"
        assert_close(
            grad if reinforce else value.reshape(1),
            expected,
            atol=1e-7 if not reinforce else 1e-8,
            rtol=1e-5,
            what=f"{what}{' (' + label + ')' if label else ''}",
            causes=causes,
        )


_EMPTY_ROW_CAUSE = {
    "excluded": "the row mean leaves the fully masked row out of the row count (verl's agg_loss"
    " does; declare empty_rows: excluded if intended)",
    "counted": "the row mean counts the fully masked row (TRL does), not excluding it as declared",
}
# The cause of a NaN loss on the probe's fully masked row: a bug where rows can be empty
# (truncation masking, rejected rows), a convention where they cannot.
_UNCLAMPED_ROW_CAUSE = (
    "a fully masked row divides by 0 (clamp the token count to >= 1; if your trainer never builds"
    " one, every completion counting at least its EOS and none masked out whole, declare"
    " empty_rows: never)"
)


def _own_scale(ctx: Context, own: bool) -> int | None:
    """seq-mean-token-sum-norm's declared divisor (loss_scale_factor), for the own rule only."""
    return ctx.config["loss_scale_factor"] if own else None


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
    """Every other loss_type (grpo, bnpo, dr_grpo, dapo, cispo) the candidate takes equals its formula; every failing type is reported."""
    ran, failures = 0, []
    for loss_type in (*CLIPPED_LOSS_TYPES, "cispo"):
        if loss_type == ctx.config["loss_type"] and not ctx.config["loss_agg_mode"]:
            continue
        try:
            _check_formula(ctx, loss_type, own=False)
        except Skip:
            continue
        except CheckFailure as failure:
            failures.append(failure)
        ran += 1
    if failures:
        if len(failures) == 1:
            raise failures[0]
        raise CheckFailure(
            f"{len(failures)} loss types to match their formulas",
            "; ".join(f.line() for f in failures),
        )
    if not ran:
        raise Skip("compute_loss takes no other loss_type")


# sapo's gate scale 4 / tau is clipping's (clipping.sapo_gate_scale isolates it): a gate without it
# fails here too, by the factor tau / 4, and is diagnosed there.
@check("loss_aggregation", "compute_loss", depends_on=("ratio", "clipping"))
def sapo_gradient_matches_formula(ctx: Context) -> None:
    """sapo on policy: dL/dlogp = -A / (row token count) / B, the seq-mean-token-mean weights (sapo's gate slope is 1/4 * 4 at r = 1; B counts non-empty rows under empty_rows: excluded; under form_aggregation: own, the weights of the candidate's own loss's aggregation)."""
    lengths = _lengths(ctx)
    logps = random_logps(ctx.gen, len(lengths), WIDTH)
    mask = unequal_mask(lengths, WIDTH)
    _, grad = loss_and_grad(
        ctx, logps, ADVANTAGES, mask, loss_type="sapo", importance_sampling_level="token"
    )
    rule = conventions.aggregation_rule(ctx.config, "sapo")

    def weights(rule: str) -> torch.Tensor:
        """dL/dlogp of -A * logp aggregated by `rule`: sapo's on-policy gradient."""
        leaf = logps.detach().double().requires_grad_(True)
        total = aggregate(
            -ADVANTAGES.double().unsqueeze(1) * leaf,
            mask,
            rule,
            max_len=ctx.config["max_completion_length"],
            empty_rows=ctx.config["empty_rows"],
        )
        return torch.autograd.grad(total, leaf)[0]

    expected = weights(rule)
    causes = {}
    own_rule = conventions.aggregation_rule(ctx.config)
    if ctx.config["form_aggregation"] == "loss_type" and own_rule != rule:
        causes[
            f"sapo is aggregated the way your own loss is, {NAMES.get(own_rule, own_rule)}, not"
            " seq-mean-token-mean as TRL aggregates sapo: if your trainer gives cispo and sapo"
            " its own loss's aggregation (verl's actor, slime, AReaL do), declare"
            " form_aggregation: own"
        ] = weights(own_rule)
    if rule != "bnpo":
        causes[f"sapo is aggregated as a token mean, not {NAMES.get(rule, rule)}"] = weights("bnpo")
    # A < 0 on every row: the gate's slope at r = 1 is tau_neg / 4 without its 4 / tau
    causes["the sapo gate lacks its 4 / tau factor (see clipping.sapo_gate_scale)"] = (
        expected * ctx.config["sapo_temperature_neg"] / 4
    )
    assert_close(grad, expected, atol=1e-8, rtol=1e-5, what="sapo gradients", causes=causes)


def _loss_with_old_and_ref(ctx: Context, logps, old, ref, mask):
    """The loss and gradient with old and reference log-probs (beta 0.1), or with as many of
    them as the loss takes: one with no KL term takes no reference, and a REINFORCE-form loss
    no old log-probs either (it is then called on policy)."""
    level = {"importance_sampling_level": "token"}
    for kwargs in (
        {"old_per_token_logps": old, "ref_per_token_logps": ref, "beta": 0.1, **level},
        {"old_per_token_logps": old, **level},
    ):
        try:
            return loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, **kwargs)
        except Skip:
            continue
    return loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask)


@check("loss_aggregation", "compute_loss")
def masked_entries_are_ignored(ctx: Context) -> None:
    """Setting masked log-probs, old and reference log-probs to other finite values changes neither loss nor gradient (old and reference log-probs only where the loss takes them)."""
    logps, mask = batch(ctx, [6, 3, 5, 2])
    old = logps - (ctx.rand(*logps.shape) - 0.5) * 0.2
    ref = logps + (ctx.rand(*logps.shape) - 0.5)
    masked = ~mask.bool()
    value, grad = _loss_with_old_and_ref(ctx, logps, old, ref, mask)
    value2, grad2 = _loss_with_old_and_ref(
        ctx,
        logps.where(~masked, torch.tensor(-7.5)),
        old.where(~masked, torch.tensor(-0.05)),
        ref.where(~masked, torch.tensor(-3.0)),
        mask,
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


# Loss types whose denominator a declared convention leaves unclamped on an all-masked batch: the
# token count of dapo, cispo and bnpo (TRL before 1.9.2 for dapo/cispo, verl's token-mean) and
# the non-empty row count of the row means under `empty_rows: excluded` (verl's agg_loss).
_TOKEN_COUNT_TYPES = ("bnpo", "dapo", "cispo")


def _empty_batch_skip(ctx: Context, loss_type: str) -> str | None:
    """Why a declared convention makes `loss_type`'s denominator 0 on an all-masked batch, or
    makes such a batch one the candidate never builds."""
    if ctx.config["empty_rows"] == "never":
        return "declared empty_rows: never (no row is ever fully masked, so no batch is)"
    if loss_type in _TOKEN_COUNT_TYPES and ctx.config["empty_batch_normaliser"] == "unclamped":
        return f"{loss_type}: declared unclamped token-count normaliser (0 / 0 on an empty batch)"
    if loss_type in conventions.ROW_MEAN_RULES and ctx.config["empty_rows"] == "excluded":
        return f"{loss_type}: declared empty_rows: excluded (no non-empty row to count)"
    return None


@check("loss_aggregation", "compute_loss")
def fully_masked_batch_is_zero(ctx: Context) -> None:
    """For every loss_type the candidate takes, an all-masked batch gives loss 0 and a zero gradient, not NaN: grpo's and sapo's row token counts, bnpo's token count and dapo's and cispo's num_items_in_batch are clamped to >= 1."""
    logps, mask = batch(ctx)
    mask = torch.zeros_like(mask)
    own = ctx.config["loss_type"]
    ran, failures, skipped = 0, [], []
    for loss_type in (own, *(t for t in LOSS_TYPES if t != own)):
        reason = _empty_batch_skip(ctx, loss_type)
        if reason:
            skipped.append(reason)
            continue
        try:
            value, grad = loss_and_grad(ctx, logps, NEGATIVE_ADVANTAGES, mask, loss_type=loss_type)
        except Skip as skip:
            skipped.append(str(skip))
            continue
        ran += 1
        if (
            not torch.isfinite(value)
            or value.abs() > 1e-9
            or not torch.isfinite(grad).all()
            or grad.abs().max() > 0
        ):
            failures.append(
                CheckFailure(
                    f"{loss_type}: loss 0 with zero gradient",
                    f"loss {fmt(value)}, max |grad| {fmt(float(grad.abs().max()))}",
                    f"{_EMPTY_BATCH_CAUSES.get(loss_type, 'a count of 0 is divided by')}:"
                    " clamp the normaliser to >= 1",
                )
            )
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise CheckFailure(
            f"{len(failures)} loss types to give loss 0 on an all-masked batch",
            "; ".join(f.line() for f in failures),
        )
    if not ran:
        more = f" (+{len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise Skip(f"{skipped[0]}{more}")


_EMPTY_BATCH_CAUSES = {
    "grpo": "a row's token count of 0 is divided by",
    "sapo": "a row's token count of 0 is divided by",
    "bnpo": "the batch's token count (mask sum) of 0 is divided by",
    "dapo": "num_items_in_batch of 0 is divided by",
    "cispo": "num_items_in_batch of 0 is divided by",
}


# ---------------------------------------------------------------------------------------------
# gradient accumulation: GA micro-steps against one batch of the same rows

# Four micro-batches of three rows with unequal lengths but 11 tokens each, so that one batch of
# any GA of them is what the accumulated micro-steps must add up to for every loss type (bnpo's
# mean of micro-batch token means equals the batch's token mean only at equal token counts).
MICRO_LENGTHS = ([6, 3, 2], [2, 5, 4], [4, 4, 3], [1, 6, 4])
# (GA, S): S = GA, TRL's default, then S = 2 GA, where dapo's GA / S rescale is not 1.
ACCUMULATION = ((2, 2), (2, 4))


def _takes(fn, name: str) -> bool:
    """`fn` names parameter `name` itself (not through **kwargs, which may silently drop it)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _window_gradient(ctx, micro, loss_type: str, ga: int, s: int, num_items: int) -> torch.Tensor:
    """dL/dlogp of the first `ga` micro-batches, each backward on its own loss (gradients summed
    as HF's accumulation does), stacked as one batch."""
    grads = []
    for logps, mask, advantages in micro[:ga]:
        kwargs = {"loss_type": loss_type, "gradient_accumulation_steps": ga}
        if s != ga:
            kwargs["steps_per_generation"] = s
        if loss_type == "dapo":
            kwargs["num_items_in_batch"] = num_items
        _, grad = loss_and_grad(
            ctx, logps, advantages, mask, importance_sampling_level="token", beta=0.0, **kwargs
        )
        grads.append(grad)
    return torch.cat(grads)


def _one_batch_gradient(ctx, micro, loss_type: str, ga: int) -> torch.Tensor:
    """The hand formula's dL/dlogp for the first `ga` micro-batches as one batch (GA = 1)."""
    logps = torch.cat([m[0] for m in micro[:ga]])
    mask = torch.cat([m[1] for m in micro[:ga]])
    advantages = torch.cat([m[2] for m in micro[:ga]])
    form = "reinforce" if ctx.config["policy_loss"] == "reinforce" else loss_type
    leaf = logps.double().requires_grad_(True)
    total = aggregate(
        _token_loss(form, leaf, advantages),
        mask,
        conventions.aggregation_rule(ctx.config, loss_type),
        max_len=ctx.config["max_completion_length"],
        empty_rows=ctx.config["empty_rows"],
    )
    return torch.autograd.grad(total, leaf)[0]


@check("loss_aggregation", "compute_loss", depends_on=("ratio",))
def accumulated_gradient_matches_one_batch(ctx: Context) -> None:
    """GA = 2 micro-steps (S = 2, then S = 4 micro-batches per generation) sum to the gradient of one batch of their rows, for grpo, bnpo, dr_grpo and dapo (num_items_in_batch = the generation batch's tokens, rescaled by GA / S)."""
    fn = ctx.candidate.functions["compute_loss"]
    if not _takes(fn, "gradient_accumulation_steps"):
        raise Skip("compute_loss takes no gradient_accumulation_steps (one micro-batch per step)")
    micro = [
        (
            random_logps(ctx.gen, len(lengths), WIDTH),
            unequal_mask(lengths, WIDTH),
            -0.2 - ctx.rand(3),
        )
        for lengths in MICRO_LENGTHS
    ]
    ran, failures, skipped = 0, [], []
    for ga, s in ACCUMULATION:
        if s != ga and not _takes(fn, "steps_per_generation"):
            skipped.append("compute_loss takes no steps_per_generation")
            continue
        num_items = int(sum(int(m[1].sum()) for m in micro[:s]))
        for loss_type in CLIPPED_LOSS_TYPES:
            try:
                seen = _window_gradient(ctx, micro, loss_type, ga, s, num_items)
            except Skip as skip:
                skipped.append(f"GA={ga}, S={s}: {skip}")
                continue
            ran += 1
            expected = _one_batch_gradient(ctx, micro, loss_type, ga)
            try:
                assert_close(
                    seen,
                    expected,
                    atol=1e-8,
                    rtol=1e-5,
                    what=f"accumulated {loss_type} gradient (GA={ga}, S={s}) = one batch's",
                    causes=_accumulation_causes(loss_type, expected, ga, s),
                )
            except CheckFailure as failure:
                failures.append(failure)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise CheckFailure(
            f"{len(failures)} accumulated gradients to equal one batch's",
            "; ".join(f.line() for f in failures),
        )
    if not ran:
        more = f" (+{len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise Skip(f"{skipped[0]}{more}")


def _accumulation_causes(loss_type: str, expected: torch.Tensor, ga: int, s: int) -> dict:
    """Wrong accumulation scalings and the gradient each gives."""
    if loss_type != "dapo":
        return {
            f"the {loss_type} loss is not divided by gradient_accumulation_steps: the window's"
            f" summed gradient is {ga} times one batch's": expected * ga
        }
    causes = {}
    if s != ga:
        causes[
            "dapo's normaliser num_items_in_batch counts the whole generation batch"
            f" ({s} micro-batches) and lacks the GA / S = {ga}/{s} rescale to one accumulation"
            " window (TRL 1.10, PR #6024)"
        ] = expected * ga / s
    causes[
        "dapo is also divided by gradient_accumulation_steps (num_items_in_batch already"
        " spans the accumulated batch)"
    ] = expected / ga
    return causes
