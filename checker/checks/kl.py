"""Stage `kl`: the k3 penalty towards the reference policy, alone and inside `compute_loss`.

Rule (TRL 1.16 gt:L3101-3105): with d = ref - logp, k3 = exp(d) - d - 1 >= 0,
0 with zero gradient when logp = ref (the reverse KL(pi_theta || pi_ref)); in the loss
`+ beta * k3` per token before aggregation, times the UNCLIPPED ratio r when
`use_bias_correction_kl` (or by exp(logp - sg(logp)), 1 in value, under `kl_weight: on_policy`,
NeMo-RL's default). Inside the loss it is probed with A = 0 (the policy term vanishes) and a
constant d on every token, divided by the loss of A = -1 (the normaliser cancels). A candidate
declaring another `kl_estimator` (k1, k2/mse, low_var_kl, abs: verl's `kl_penalty`) is compared with
that estimator's value and gradient; `kl_placement: reward` has no KL term in the loss to check.
A candidate declaring `kl_aggregation` (a verl `loss_agg_mode`: its KL aggregated apart from the
policy term, as OpenRLHF's `kl_loss` is a token mean) is compared with that rule's token weights.
"""

from __future__ import annotations

import math

import torch

from checker import conventions
from checker.checks import CheckFailure, Skip, check
from checker.checks._loss import batch, loss_and_grad, skip_without_ratio
from checker.checks.context import Context, assert_close, fmt
from reference_impl.protocol import KL_AGGREGATIONS, KL_ESTIMATORS

BETA = 0.1


def _k3(d: torch.Tensor | float) -> torch.Tensor:
    return conventions.kl_value(d, "k3")


def _estimate(ctx: Context, d: torch.Tensor | float) -> torch.Tensor:
    """The declared estimator's value at d = ref - logp."""
    return conventions.kl_value(d, ctx.config["kl_estimator"])


def _skip_unless_in_loss(ctx: Context) -> None:
    ctx.skip_unless("kl_placement", "loss", why="the KL penalty is on the reward, not in the loss")


def _kl(ctx: Context, logps: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return ctx.call("per_token_kl", logps, ref, shape=logps.shape)


@check("kl", "per_token_kl")
def per_token_kl_matches_reference(ctx: Context) -> None:
    """per_token_kl is Schulman's k3 of KL(pi_theta || pi_ref): exp(ref - logp) - (ref - logp) - 1 (or the declared estimator).

    Where a trainer has no per-token KL of its own to call (a GRPOTrainer subclass's own
    `_compute_loss`), the `trl` kind measures it by value, one counted token at a time: the loss
    at beta = 1 minus the loss at beta = 0, on policy with A = 0, over that token's policy weight
    (the gradient at A = -1); exact when the KL enters the loss as weight * beta * KL per token
    (trl_adapter._kl_by_value), and skipped with its cause where the loss cannot be separated so.
    """
    logps = -ctx.rand(4, 6) * 3
    ref = -ctx.rand(4, 6) * 3
    seen = _kl(ctx, logps, ref).detach().double()
    d = (ref - logps).double()
    own = ctx.config["kl_estimator"]
    causes = {
        "the KL direction is swapped: d = logp - ref, not ref - logp": _estimate(ctx, -d),
        "the KL sign is flipped (KL would be maximised)": -_estimate(ctx, d),
    }
    for other, formula in (("k1", "logp - ref"), ("k2", "(logp - ref)^2 / 2"), ("k3", "k3")):
        if other != own and {other, own} != {"k2", "mse"} and {other, own} != {"k3", "low_var_kl"}:
            causes[f"this is the {other} estimator {formula}, not {own}"] = conventions.kl_value(
                d, other
            )
    assert_close(seen, _estimate(ctx, d), atol=1e-6, rtol=1e-5, what=f"{own} values", causes=causes)


@check("kl", "per_token_kl")
def other_estimators_match_formulas(ctx: Context) -> None:
    """Every other kl_estimator the candidate takes (verl's k1, k2/mse, k3/low_var_kl, abs) equals its formula."""
    logps = -ctx.rand(4, 6) * 3
    ref = -ctx.rand(4, 6) * 3
    d = (ref - logps).double()
    ran = 0
    for estimator in KL_ESTIMATORS:
        if estimator == ctx.config["kl_estimator"]:
            continue
        try:
            seen = ctx.call("per_token_kl", logps, ref, shape=logps.shape, kl_estimator=estimator)
        except Skip:
            continue
        expected = conventions.kl_value(d, estimator)
        assert_close(
            seen.detach().double(),
            expected,
            atol=1e-6,
            rtol=1e-5,
            what=f"{estimator} values",
            causes={
                "the KL direction is swapped: d = logp - ref": conventions.kl_value(-d, estimator)
            },
        )
        ran += 1
    if not ran:
        raise Skip("per_token_kl takes no kl_estimator")


@check("kl", "per_token_kl")
def per_token_kl_zero_at_reference(ctx: Context) -> None:
    """KL(p, p) = 0 with zero gradient, and k3 >= 0 everywhere (k1 is signed and has gradient 1)."""
    signed = ctx.config["kl_estimator"] == "k1"
    logps = (-ctx.rand(3, 5) * 3).requires_grad_(True)
    same = _kl(ctx, logps, logps.detach().clone())
    grad = (
        torch.autograd.grad(same.sum(), logps, allow_unused=True)[0] if same.requires_grad else None
    )
    if signed:
        grad = None  # d(logp - ref)/dlogp = 1 at pi = pi_ref: k1's gradient never vanishes
    if same.detach().abs().max() > 1e-6 or (grad is not None and grad.abs().max() > 1e-6):
        raise CheckFailure(
            "k3(p, p) = 0 with zero gradient",
            f"values {fmt(same)}, gradient {fmt(grad) if grad is not None else 'none'}",
            f"this is not the {ctx.config['kl_estimator']} estimator (it and its gradient vanish at pi = pi_ref)",
        )
    other = _kl(ctx, logps.detach(), -ctx.rand(3, 5) * 3).detach()
    if not signed and (other < -1e-7).any():
        raise CheckFailure("k3 >= 0", f"min {fmt(float(other.min()))}", "the KL sign is flipped")


def _aggregation_weights(ctx: Context, mask: torch.Tensor, mode: str | None) -> torch.Tensor | None:
    """Each token's weight in a KL aggregated apart from the policy term by verl's `mode`, or None
    for a KL that joins the policy term's aggregation token by token (TRL gt:L3101-3110)."""
    if mode is None:
        return None
    rule = conventions.AGG_MODE_RULES[mode]
    options = {"max_len": ctx.config["loss_scale_factor"], "empty_rows": ctx.config["empty_rows"]}
    return conventions.aggregation_weights(mask, rule, **options)


def _kl_share(ctx: Context, mask: torch.Tensor, norm: torch.Tensor, mode: str | None) -> float:
    """The KL term's total weight over the policy term's (`norm`): 1 when the KL joins the
    policy term's aggregation, sum(KL weights) / norm when `mode` aggregates it apart."""
    weights = _aggregation_weights(ctx, mask, mode)
    return 1.0 if weights is None else float(weights.sum() / norm)


def _aggregation_cause(mode: str | None) -> str:
    """Why the KL's weights would be `mode`'s rather than the declared aggregation's."""
    if mode is None:
        return (
            "the KL joins the policy term's aggregation token by token (as TRL adds it), not"
            " the declared kl_aggregation"
        )
    return (
        f"the KL is aggregated apart from the policy term, as verl's {mode} (OpenRLHF adds its"
        f" kl_loss as a token mean this way); if intended, declare kl_aggregation: {mode}"
    )


def _aggregation_causes(ctx: Context, expected: torch.Tensor, relative) -> dict:
    """A cause per KL aggregation other than the declared one, each valued at `expected` times
    `relative(mode)` (that aggregation's KL weights over the declared one's), where they differ."""
    own = ctx.config["kl_aggregation"]
    causes = {}
    for mode in KL_AGGREGATIONS:
        value = expected * relative(mode)
        if mode != own and not torch.allclose(value, expected, rtol=1e-6, atol=0.0):
            causes[_aggregation_cause(mode)] = value
    return causes


def _normaliser(ctx: Context, logps, mask, loss_type) -> torch.Tensor:
    """The sum of the aggregation weights: the loss of A = -1 on policy with beta = 0, or, for the
    REINFORCE form (whose value is A-weighted log-probs), the sum of that loss's gradient."""
    value, grad = loss_and_grad(
        ctx, logps, -torch.ones(mask.size(0)), mask, loss_type=loss_type, beta=0.0
    )
    if ctx.config["policy_loss"] == "reinforce":
        value = (grad * mask).sum()
    if value.abs() < 1e-12:
        raise CheckFailure(
            "a nonzero loss for A = -1",
            fmt(value),
            "the policy term vanishes, so the KL term cannot be measured against it",
        )
    return value


@check("kl", "compute_loss", depends_on=("loss_aggregation",))
def loss_adds_beta_times_k3(ctx: Context) -> None:
    """With A = 0 and ref - logp = d on every token, loss / (loss of A = -1) = beta * k3(d) (or the declared estimator; times the KL's total weight over the policy term's under a declared kl_aggregation), for d = +-0.4."""
    _skip_unless_in_loss(ctx)
    logps, mask = batch(ctx)
    loss_type = ctx.clipped_loss_type()
    norm = _normaliser(ctx, logps, mask, loss_type)
    own = ctx.config["kl_aggregation"]
    share = _kl_share(ctx, mask, norm, own)
    for d in (0.4, -0.4):
        value, _ = loss_and_grad(
            ctx,
            logps,
            torch.zeros(mask.size(0)),
            mask,
            ref_per_token_logps=logps + d,
            loss_type=loss_type,
            beta=BETA,
        )
        seen = (value / norm).reshape(1)
        expected = BETA * _estimate(ctx, d).reshape(1) * share
        assert_close(
            seen,
            expected,
            atol=1e-7,
            rtol=1e-4,
            what=f"loss per unit weight at d = {d}",
            causes={
                "the KL direction is swapped: d = logp - ref, not ref - logp": BETA
                * _estimate(ctx, -d).reshape(1)
                * share,
                "the KL term is subtracted: the loss maximises KL": -expected,
                "the KL term is not multiplied by beta": expected / BETA,
                "the KL term is missing from the loss": torch.zeros(1, dtype=torch.float64),
                **_aggregation_causes(
                    ctx, expected, lambda mode: _kl_share(ctx, mask, norm, mode) / share
                ),
            },
        )


@check("kl", "compute_loss", depends_on=("ratio",))
def loss_kl_gradient(ctx: Context) -> None:
    """On policy, A = 0, constant d: dL/dlogp / (dL/dlogp of A = -1) = beta (1 - e^d + k3(d) [bias correction]) (the declared estimator's derivative; times each token's KL weight over its policy weight under a declared kl_aggregation)."""
    _skip_unless_in_loss(ctx)
    logps, mask = batch(ctx)
    loss_type = ctx.clipped_loss_type()
    _, weights = loss_and_grad(ctx, logps, -torch.ones(mask.size(0)), mask, loss_type=loss_type)
    keep = mask.bool() & (weights != 0)
    if not keep.any():
        raise CheckFailure(
            "a policy gradient for A = -1", "zero gradient", "no gradient reaches logp"
        )
    own = ctx.config["kl_aggregation"]

    def relative(mode: str | None) -> torch.Tensor:
        """A KL token's weight under `mode` over its policy weight (1 when it joins the policy
        term's aggregation)."""
        kl_weights = _aggregation_weights(ctx, mask, mode)
        return (
            torch.ones_like(weights[keep])
            if kl_weights is None
            else kl_weights[keep] / weights[keep]
        )

    settings = [ctx.config["use_bias_correction_kl"], not ctx.config["use_bias_correction_kl"]]
    for index, correction in enumerate(settings):
        d = 0.4
        try:
            _, grad = loss_and_grad(
                ctx,
                logps,
                torch.zeros(mask.size(0)),
                mask,
                ref_per_token_logps=logps + d,
                loss_type=loss_type,
                beta=BETA,
                use_bias_correction_kl=correction,
            )
        except Skip:
            if index == 0:
                raise
            continue
        seen = grad[keep] / weights[keep]
        estimator = ctx.config["kl_estimator"]
        plain = BETA * float(conventions.kl_gradient(d, estimator))
        corrected = plain + BETA * float(_estimate(ctx, d))
        expected = torch.full_like(seen, corrected if correction else plain) * relative(own)
        other = torch.full_like(seen, plain if correction else corrected) * relative(own)
        flag = "True" if correction else "False"
        causes = {}
        if estimator == "k3":  # KL(ref || policy)'s k3: exp(logp - ref) - (logp - ref) - 1
            swapped = BETA * (math.exp(-d) - 1) + (
                BETA * (math.exp(-d) + d - 1) if correction else 0
            )
            causes[
                "the k3 estimator's direction is swapped: exp(logp - ref) - (logp - ref) - 1, not"
                " exp(ref - logp) - (ref - logp) - 1"
            ] = torch.full_like(seen, swapped) * relative(own)
        assert_close(
            seen,
            expected,
            atol=1e-7,
            rtol=1e-4,
            what=f"KL gradient per unit weight (use_bias_correction_kl={flag})",
            causes={
                **causes,
                _unhonoured_correction(correction): other,
                "the KL term has no gradient (computed under no_grad or detached)": torch.zeros_like(
                    seen
                ),
                "the KL gradient has the wrong sign (KL maximised)": -expected,
                **_aggregation_causes(ctx, expected, lambda mode: relative(mode) / relative(own)),
            },
        )


def _unhonoured_correction(correction: bool) -> str:
    """The cause when the KL gradient is the other setting's. A loss that ignores the flag is as
    likely a trainer that weights its KL its own way on purpose as a bug, so say how to declare it."""
    if correction:
        return (
            "use_bias_correction_kl=True (the GRPOConfig default) is not honoured: the KL is not"
            " multiplied by the ratio; if the plain k3 is intended, declare it (config:"
            " use_bias_correction_kl: false, supported: use_bias_correction_kl: [false];"
            " grpo-check profile --write writes both)"
        )
    return "use_bias_correction_kl=False is not honoured: the KL is multiplied by the ratio"


@check("kl", "compute_loss", depends_on=("ratio",))
def bias_correction_uses_unclipped_ratio(ctx: Context) -> None:
    """With use_bias_correction_kl and r = 1.5 or 0.6 (outside the band), the KL term is beta * k3 * r with the UNCLIPPED r (beta * k3 under kl_weight: on_policy, whose weight is 1 in value)."""
    _skip_unless_in_loss(ctx)
    skip_without_ratio(ctx, " to weight the KL with")
    logps, mask = batch(ctx)
    loss_type = ctx.clipped_loss_type()
    norm = _normaliser(ctx, logps, mask, loss_type)
    share = _kl_share(ctx, mask, norm, ctx.config["kl_aggregation"])
    on_policy_weight = ctx.config["kl_weight"] == "on_policy"
    for r in (1.5, 0.6):
        value, _ = loss_and_grad(
            ctx,
            logps,
            torch.zeros(mask.size(0)),
            mask,
            old_per_token_logps=logps - math.log(r),
            ref_per_token_logps=logps + 0.4,
            loss_type=loss_type,
            beta=BETA,
            use_bias_correction_kl=True,
            importance_sampling_level="token",
            epsilon_low=0.2,
            epsilon_high=0.2,
            delta=None,
        )
        k3 = float(_estimate(ctx, 0.4)) * share  # per unit of the policy term's weight
        seen = (value / norm).reshape(1)
        clipped = min(max(r, 0.8), 1.2)
        causes = {
            "the bias correction uses the clipped ratio; TRL multiplies by the unclipped r (gt:L3104)": BETA
            * k3
            * clipped,
            "the KL is multiplied by the ratio exp(logp - old); declared kl_weight: on_policy"
            if on_policy_weight
            else "the KL value is not multiplied by the ratio: bias correction off, or weighted by"
            " exp(logp - sg(logp)) (declare kl_weight: on_policy if intended)": BETA
            * k3
            * (r if on_policy_weight else 1.0),
        }
        assert_close(
            seen,
            torch.tensor([BETA * k3 * (1.0 if on_policy_weight else r)], dtype=torch.float64),
            atol=1e-7,
            rtol=1e-4,
            what=f"KL per unit weight at r = {r}",
            causes={c: torch.tensor([v], dtype=torch.float64) for c, v in causes.items()},
        )


@check("kl", "compute_loss", depends_on=("ratio",))
def sgd_step_reduces_kl(ctx: Context) -> None:
    """With A = 0 and beta > 0, one small SGD step on the loss moves every unmasked log-prob towards the reference."""
    _skip_unless_in_loss(ctx)
    if ctx.config["kl_estimator"] == "k1":
        raise Skip(
            "kl_estimator: k1 (its gradient is 1 on every token: it lowers every log-prob rather"
            " than pulling towards the reference, arXiv:2506.09477)"
        )
    logps, mask = batch(ctx)
    ref = logps + (ctx.rand(*logps.shape) - 0.5)
    _, grad = loss_and_grad(
        ctx,
        logps,
        torch.zeros(mask.size(0)),
        mask,
        ref_per_token_logps=ref,
        loss_type=ctx.clipped_loss_type(),
        beta=0.5,
    )
    keep = mask.bool()
    scale = float(grad[keep].abs().max()) if keep.any() else 0.0
    if scale == 0.0:
        raise CheckFailure(
            "a gradient pulling logp towards ref",
            "zero gradient",
            "the KL term has no gradient (computed under no_grad or detached)",
        )
    stepped = logps.double() - 0.01 * grad / scale
    before = _estimate(ctx, ref.double() - logps.double())[keep]
    after = _estimate(ctx, ref.double() - stepped)[keep]
    worse = after > before
    if worse.any():
        raise CheckFailure(
            "KL to decrease on every token after one SGD step",
            f"it grew on {int(worse.sum())} of {int(keep.sum())} tokens",
            "the KL term pushes away from the reference: its sign or direction is wrong",
        )
