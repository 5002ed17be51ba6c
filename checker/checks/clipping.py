"""Stage `clipping`: which tokens the clipped surrogate (and its variants) stops, inside `compute_loss`.

Rules (TRL 1.16 gt:L3108-3124): -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
gives zero gradient exactly where A > 0 and r > 1 + eps_high, or A < 0 and r < 1 - eps_low; `delta`
caps the unclipped r (zero gradient where A < 0 and r > delta); cispo weights the policy gradient by
sg(min(r, eps_high)); sapo by the soft gate 4 sigma'(tau (r - 1)) r with tau by the sign of A, the
slope of sigmoid(tau (r - 1)) * 4 / tau (gt:L3123), whose 4 / tau keeps it at 1 for r = 1 whatever tau.
These checks look only at WHICH tokens get zero gradient, or at gradient ratios, so the loss
normaliser cancels; they rely on the ratio being right (depends_on ratio). A candidate declaring
`clipping: symmetric` is probed at its own epsilon; `policy_loss: reinforce` or `on_policy` (no old
log-probs) has no ratio to clip.
"""

from __future__ import annotations

import math

import torch

from checker.checks import CheckFailure, Skip, check
from checker.checks._loss import gradient_ratio, loss_and_grad, skip_without_ratio
from checker.checks.context import Context, assert_close
from checker.fixtures import random_logps

RATIOS = [0.5, 0.75, 0.9, 1.1, 1.25, 1.4]
EPS_LOW, EPS_HIGH = 0.2, 0.28
# A trainer whose clip is one epsilon by design declares it (YAML `config:`); `epsilon` alone
# does not say so, since TRL's own epsilon_high defaults to epsilon and is still honoured when set.
DECLARE_SYMMETRIC = (
    "if one epsilon for both sides is your convention, declare `clipping: symmetric`"
)


def _off_policy(ctx: Context, ratios: list[float], advantages: list[float]):
    """Log-probs and old log-probs whose token ratios are `ratios` on every row."""
    rows, width = len(advantages), len(ratios)
    logps = random_logps(ctx.gen, rows, width)
    old = logps - torch.tensor(ratios).log().expand(rows, -1)
    mask = torch.ones(rows, width, dtype=torch.int)
    return logps, old, mask, torch.tensor(advantages)


def _zero_pattern_failure(seen: torch.Tensor, expected: torch.Tensor, causes: dict) -> None:
    if torch.equal(seen, expected):
        return
    cause = next((c for c, pattern in causes.items() if torch.equal(seen, pattern)), "")
    raise CheckFailure(
        f"zero gradient on {int(expected.sum())} tokens {_where(expected)}",
        f"zero gradient on {int(seen.sum())} tokens {_where(seen)}",
        cause,
    )


def _where(pattern: torch.Tensor) -> str:
    cells = [f"(A{'+' if a == 0 else '-'},r={RATIOS[t]})" for a, t in pattern.nonzero().tolist()]
    return "[" + " ".join(cells[:8]) + (" ..." if len(cells) > 8 else "") + "]"


def _band(ctx: Context) -> tuple[float, float, dict]:
    """The clip band to probe: (0.2, 0.28), or the candidate's own symmetric epsilon when it
    declares `clipping: symmetric` (most from-scratch trainers take one epsilon only)."""
    if ctx.config["clipping"] == "symmetric":
        eps = float(ctx.config["epsilon_low"])
        return eps, eps, {}
    return EPS_LOW, EPS_HIGH, {"epsilon_low": EPS_LOW, "epsilon_high": EPS_HIGH}


@check("clipping", "compute_loss", depends_on=("ratio",))
def zero_gradient_outside_band(ctx: Context) -> None:
    """Token level, eps_low 0.2, eps_high 0.28 (or the declared symmetric epsilon): zero gradient iff (A > 0, r > 1 + eps_high) or (A < 0, r < 1 - eps_low)."""
    skip_without_ratio(ctx, " to clip")
    eps_low, eps_high, band = _band(ctx)
    logps, old, mask, advantages = _off_policy(ctx, RATIOS, [1.0, -1.0])
    _, grad = loss_and_grad(
        ctx,
        logps,
        advantages,
        mask,
        old_per_token_logps=old,
        loss_type=ctx.clipped_loss_type(),
        importance_sampling_level="token",
        delta=None,
        **band,
    )
    r = torch.tensor(RATIOS).expand(2, -1)
    positive = torch.tensor([True, False]).unsqueeze(1).expand_as(r)
    negative = ~positive

    def pattern(high_pos, low_neg):
        return (positive & (r > high_pos)) | (negative & (r < low_neg))

    expected = pattern(1 + eps_high, 1 - eps_low)
    causes = {
        "no clipping at all: the unclipped term is used everywhere": torch.zeros_like(expected),
        "max instead of min in -min(r A, clip(r) A) (in the form max(-r A, -clip(r) A): min"
        " instead of max)": (positive & (r < 1 - eps_low)) | (negative & (r > 1 + eps_high)),
        "the clip bounds are swapped (clamp(r, 1 + eps_high, 1 - eps_low))": (
            positive & (r > 1 - eps_low)
        )
        | (negative & (r < 1 - eps_low)),
        "clipping applies to both signs of A (|r - 1| > eps zeroes every token)": (r > 1 + eps_high)
        | (r < 1 - eps_low),
    }
    if eps_high != eps_low:
        causes = {
            f"epsilon_high is ignored: the upper bound is 1 + epsilon_low ({DECLARE_SYMMETRIC})": (
                pattern(1 + eps_low, 1 - eps_low)
            ),
            "the clip bounds use the wrong sides (1 - eps_high, 1 + eps_low)": pattern(
                1 + eps_low, 1 - eps_high
            ),
        } | causes
    _zero_pattern_failure(grad == 0, expected, causes)


@check("clipping", "compute_loss", depends_on=("ratio",))
def delta_caps_unclipped_ratio(ctx: Context) -> None:
    """With delta = 1.6 (two-sided clipping), A < 0 tokens with r > delta get zero gradient, those with 1.2 < r < delta do not."""
    skip_without_ratio(ctx, " to clip")
    ratios = [0.5, 0.9, 1.3, 1.5, 2.0, 3.0]
    logps, old, mask, advantages = _off_policy(ctx, ratios, [1.0, -1.0])
    _, grad = loss_and_grad(
        ctx,
        logps,
        advantages,
        mask,
        old_per_token_logps=old,
        loss_type=ctx.clipped_loss_type(),
        importance_sampling_level="token",
        epsilon_low=0.2,
        epsilon_high=0.2,
        delta=1.6,
    )
    r = torch.tensor(ratios).expand(2, -1)
    positive = torch.tensor([True, False]).unsqueeze(1).expand_as(r)
    expected = (positive & (r > 1.2)) | (~positive & ((r < 0.8) | (r > 1.6)))
    seen = grad == 0
    if not torch.equal(seen, expected):
        cause = ""
        if torch.equal(seen, (positive & (r > 1.2)) | (~positive & (r < 0.8))):
            cause = "delta is ignored, or applied to the clipped term instead of the unclipped r"
        raise CheckFailure(
            f"zero gradient at (A, r) {_pairs(expected, ratios)}",
            f"zero gradient at {_pairs(seen, ratios)}",
            cause,
        )


def _pairs(pattern: torch.Tensor, ratios: list[float]) -> str:
    return (
        "["
        + " ".join(
            f"(A{'+' if a == 0 else '-'},r={ratios[t]})" for a, t in pattern.nonzero().tolist()
        )
        + "]"
    )


@check("clipping", "compute_loss", depends_on=("ratio",))
def sequence_level_clips_whole_rows(ctx: Context) -> None:
    """Sequence level: a row with r = 1.5 and A > 0, or r = 0.6 and A < 0, gets zero gradient on all its tokens; the opposite signs do not."""
    skip_without_ratio(ctx, " to clip")
    rows = [(1.5, 1.0), (1.5, -1.0), (0.6, -1.0), (0.6, 1.0)]
    logps = random_logps(ctx.gen, 4, 5)
    old = logps - torch.tensor([math.log(r) for r, _ in rows]).unsqueeze(1)
    mask = torch.ones(4, 5, dtype=torch.int)
    advantages = torch.tensor([a for _, a in rows])
    _, grad = loss_and_grad(
        ctx,
        logps,
        advantages,
        mask,
        old_per_token_logps=old,
        loss_type=ctx.clipped_loss_type(),
        importance_sampling_level="sequence",
        epsilon_low=0.2,
        epsilon_high=0.2,
        delta=None,
    )
    zero_rows = (grad == 0).all(1)
    expected = torch.tensor([True, False, True, False])
    if not torch.equal(zero_rows, expected):
        raise CheckFailure(
            "rows (r, A) (1.5, +) and (0.6, -) fully clipped, (1.5, -) and (0.6, +) not",
            f"fully clipped rows {zero_rows.tolist()}",
            "the sequence ratio is not the one clipped, or the clip ignores the sign of A",
        )


@check("clipping", "compute_loss", depends_on=("ratio",))
def cispo_caps_weight_at_epsilon_high(ctx: Context) -> None:
    """cispo with epsilon_high = 5: the gradient is weighted by sg(min(r, 5)) (TRL: the cap is eps_high itself; sg(min(r, 6)) under cispo_cap: one_plus_epsilon_high, sg(clip(r, 1 - eps_low, 6)) under cispo_cap: band)."""
    skip_without_ratio(ctx, " to clip")
    if ctx.config["clipping"] == "symmetric":
        raise Skip("clipping: symmetric (one epsilon: no epsilon_high to cap cispo's weight with)")
    ratios = [0.5, 1.5, 4.0, 5.5, 8.0]
    logps, old, mask, advantages = _off_policy(ctx, ratios, [1.0, -1.0])
    options = {"loss_type": "cispo", "epsilon_high": 5.0, "importance_sampling_level": "token"}
    _, grad_on = loss_and_grad(ctx, logps, advantages, mask, **options)
    _, grad_off = loss_and_grad(ctx, logps, advantages, mask, old_per_token_logps=old, **options)
    ratio, keep = gradient_ratio(grad_off, grad_on, mask)
    r = torch.tensor(ratios, dtype=torch.float64).expand(2, -1)[keep]
    floor = 1 - float(ctx.config["epsilon_low"])
    forms = {  # cispo_cap -> (the weights it gives, how a failure names it)
        "epsilon_high": (
            r.clamp(max=5.0),
            "the cispo cap is epsilon_high itself (TRL, gt:L3110), not as declared",
        ),
        "one_plus_epsilon_high": (
            r.clamp(max=6.0),
            "the cispo cap is 1 + epsilon_high (verl's and open-instruct's form), not epsilon_high"
            " itself as TRL caps it (gt:L3110): if intended, declare cispo_cap:"
            " one_plus_epsilon_high",
        ),
        "band": (
            r.clamp(min=floor, max=6.0),
            "the cispo weight is clipped to the band on both sides, clip(r, 1 - epsilon_low,"
            " 1 + epsilon_high) (MiniMax-M1's formula, NeMo-RL's code): if intended, declare"
            " cispo_cap: band",
        ),
    }
    expected, _ = forms[ctx.config["cispo_cap"]]
    assert_close(
        ratio,
        expected,
        atol=1e-6,
        rtol=1e-4,
        what=f"cispo weights under cispo_cap: {ctx.config['cispo_cap']}",
        causes={
            **{
                why: weights
                for form, (weights, why) in forms.items()
                if form != ctx.config["cispo_cap"]
            },
            "the cispo weight is not capped": r,
            "the cispo cap is 1 + epsilon_low": r.clamp(max=1.2),
        },
    )


def _sigmoid_slope(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 - s)


@check("clipping", "compute_loss", depends_on=("ratio",))
def sapo_soft_gate(ctx: Context) -> None:
    """sapo: (off-policy / on-policy gradient) = 4 sigma'(tau (r - 1)) r, tau = 1.0 where A > 0 and 1.05 where A < 0."""
    skip_without_ratio(ctx, " to clip")
    ratios = [0.6, 0.9, 1.2, 1.6, 2.5]
    logps, old, mask, advantages = _off_policy(ctx, ratios, [1.0, -1.0])
    options = {
        "loss_type": "sapo",
        "importance_sampling_level": "token",
        "sapo_temperature_pos": 1.0,
        "sapo_temperature_neg": 1.05,
    }
    _, grad_on = loss_and_grad(ctx, logps, advantages, mask, **options)
    _, grad_off = loss_and_grad(ctx, logps, advantages, mask, old_per_token_logps=old, **options)
    ratio, keep = gradient_ratio(grad_off, grad_on, mask)
    r = torch.tensor(ratios, dtype=torch.float64).expand(2, -1)

    def gate(tau_pos, tau_neg):
        tau = torch.tensor([tau_pos, tau_neg], dtype=torch.float64).unsqueeze(1)
        return (4 * _sigmoid_slope(tau * (r - 1)) * r)[keep]

    assert_close(
        ratio,
        gate(1.0, 1.05),
        atol=1e-6,
        rtol=1e-4,
        what="sapo gates",
        causes={
            "the sapo temperatures are swapped (tau_neg used where A > 0)": gate(1.05, 1.0),
            "one sapo temperature is used for both signs of A": gate(1.0, 1.0),
        },
    )


# Two pairs of sapo temperatures (tau where A > 0, tau where A < 0): the defaults, then others.
SAPO_TAUS = ((1.0, 1.05), (2.0, 3.0))


@check("clipping", "compute_loss", depends_on=("ratio",))
def sapo_gate_scale(ctx: Context) -> None:
    """sapo at fixed ratios (r = 1 among them), tau changed from (1, 1.05) to (2, 3): only the gate moves, and its 4 / tau factor keeps its slope 4 sigma'(tau (r - 1)) at 1 for r = 1, so grad(tau') / grad(tau) = sigma'(tau' (r - 1)) / sigma'(tau (r - 1))."""
    skip_without_ratio(ctx, " to clip")
    ratios = [0.6, 1.0, 1.3, 2.0]
    logps, old, mask, advantages = _off_policy(ctx, ratios, [1.0, -1.0])
    grads = []
    for tau_pos, tau_neg in SAPO_TAUS:
        _, grad = loss_and_grad(
            ctx,
            logps,
            advantages,
            mask,
            old_per_token_logps=old,
            loss_type="sapo",
            importance_sampling_level="token",
            sapo_temperature_pos=tau_pos,
            sapo_temperature_neg=tau_neg,
        )
        grads.append(grad)
    ratio, keep = gradient_ratio(grads[1], grads[0], mask)
    r = torch.tensor(ratios, dtype=torch.float64).expand(2, -1)
    (pos_a, neg_a), (pos_b, neg_b) = SAPO_TAUS
    tau_a = torch.tensor([pos_a, neg_a], dtype=torch.float64).unsqueeze(1)
    tau_b = torch.tensor([pos_b, neg_b], dtype=torch.float64).unsqueeze(1)
    expected = _sigmoid_slope(tau_b * (r - 1)) / _sigmoid_slope(tau_a * (r - 1))
    assert_close(
        ratio,
        expected[keep],
        atol=1e-6,
        rtol=1e-4,
        what=f"sapo gradient ratios tau {SAPO_TAUS[1]} / tau {SAPO_TAUS[0]}",
        causes={
            "the sapo gate lacks its 4 / tau factor (sigmoid(tau (r - 1)) * 4 / tau, gt:L3123):"
            " its slope at r = 1 is tau / 4 (or tau with 4 alone), not 1": (
                expected * tau_b / tau_a
            )[keep],
            "the sapo temperatures are ignored: the gate does not change with tau": torch.ones_like(
                ratio
            ),
        },
    )
