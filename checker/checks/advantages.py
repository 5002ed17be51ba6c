"""Stage `advantages`: `compute_advantages(rewards [N], num_generations, scale_rewards) -> [N]`.

Rule (TRL 1.16 gt:L2777-2810): A = (r - nanmean(group)) / (nanstd(group) + 1e-4)
with the Bessel (n - 1) std over non-NaN values, groups = contiguous blocks of G rows; "batch" uses
the std of all N rewards, "none" skips the division; NaN results become 0. A candidate that
declares another epsilon (value, or placement inside the square root), the population std, the
leave-one-out baseline or std (RLOO; NeMo-RL), or no NaN rewards is compared with that formula
instead (checker.conventions), computed in float64 from the float32 rewards.
"""

from __future__ import annotations

import math

import torch

from checker import conventions
from checker.checks import CheckFailure, Skip, check
from checker.checks.context import Context, assert_close, explain, fmt
from checker.checks.rewards import NAN_REWARDS_MEAN
from reference_impl.protocol import SCALE_REWARDS

NAN = math.nan
# fp32 means of non-dyadic constant groups leave a residue: TRL 1.16 gives |A| up to 6e-4 for a
# constant group of 0.95, so "zero" means below 1e-3 here, or below the residue over the divisor
# of a candidate that declares a smaller epsilon (constant_group_allowance).
CONSTANT_GROUP_TOLERANCE = 1e-3
# Whatever epsilon is declared, a group with no signal may not get an advantage this large: an
# epsilon far below fp32's resolution (OpenRLHF's 1e-9) turns the mean's rounding residue into
# |A| ~30 on a group of 0.35s, as large as any real advantage.
CONSTANT_GROUP_CAP = 1.0
FP32_EPS = torch.finfo(torch.float32).eps


def _advantages(ctx: Context, rewards: torch.Tensor, G: int, mode: str | None = None):
    kwargs = {} if mode is None else {"scale_rewards": mode}
    out = ctx.call("compute_advantages", rewards, G, shape=rewards.shape, **kwargs)
    return out.detach().float()


STD_NAMES = {
    "bessel": "Bessel (n - 1)",
    "population": "population (n)",
    "leave_one_out": "leave-one-out (the Bessel std of the other G - 1 members)",
}
BASELINE_NAMES = {
    "mean": "the group mean",
    "leave_one_out": "the leave-one-out mean of the other G - 1 members (RLOO)",
}


def wrong_advantages(
    rewards: torch.Tensor, G: int, mode: str, config: dict
) -> dict[str, torch.Tensor]:
    """What common wrong implementations return (batch-wide statistics, another std or baseline,
    epsilon misplaced, ...), for naming the cause; relative to the candidate's declared conventions."""

    def variant(mode: str = mode, **changes) -> torch.Tensor:
        return conventions.advantages(rewards, G, config | changes, mode)

    estimator, baseline = config["std_estimator"], config["baseline"]
    variants = {}
    if mode != "none":
        for other in STD_NAMES:
            if other != estimator:
                whose = " that TRL uses" if estimator == "bessel" else " declared"
                cause = f"the std is the {STD_NAMES[other]} std, not the {STD_NAMES[estimator]} one{whose}"
                variants[f"{cause}; declare std_estimator: {other} if intended"] = variant(
                    std_estimator=other
                )
    other_baseline = "leave_one_out" if baseline == "mean" else "mean"
    variants[
        f"the baseline is {BASELINE_NAMES[other_baseline]}, not {BASELINE_NAMES[baseline]};"
        f" declare baseline: {other_baseline} if intended"
    ] = variant(baseline=other_baseline)
    if mode != "none" and "leave_one_out" not in (baseline, estimator):
        variants[
            "the baseline and the std are both leave-one-out (NeMo-RL's default); declare"
            " baseline: leave_one_out and std_estimator: leave_one_out if intended"
        ] = variant(baseline="leave_one_out", std_estimator="leave_one_out")
    # A group dropped for a small spread (simple_GRPO's span < 1e-4): each small span seen,
    # taken as the threshold that drops it and every smaller one.
    spans = conventions.reward_spans(rewards, G)
    for span in sorted({float(v) for v in spans if 0 < v < 0.1}):
        if span >= float(config["min_reward_span"]):
            variants[
                f"groups whose rewards span {conventions.short(span)} or less get zero advantage,"
                " as if dropped (simple_GRPO drops a group below 1e-4); if intended, declare"
                " min_reward_span: <your threshold>"
            ] = variant(min_reward_span=span * (1 + 1e-9))
    own_centred = variant("none")
    _, divisor = conventions.advantage_parts(rewards, G, config, mode)
    batch_mean = rewards.double() - torch.nanmean(rewards.double())
    variants["the baseline is the batch-wide mean, not the per-group mean"] = batch_mean / divisor
    if mode != "none":
        variants["the rewards are not divided by the std (scale_rewards looks like 'none')"] = (
            own_centred
        )
    interleaved = rewards.view(G, -1).T.reshape(-1)
    inter_adv = conventions.advantages(interleaved, G, config, mode)
    variants["groups look interleaved ([p1, p2, p1, p2]), not contiguous blocks of G rows"] = (
        inter_adv.reshape(-1, G).T.reshape(-1)  # undo the interleaving
    )
    if mode == "group":
        variants["the std is over the whole batch: scale_rewards looks like 'batch'"] = variant(
            "batch"
        )
    if mode == "none":
        variants["the rewards are divided by the group std: scale_rewards looks like 'group'"] = (
            variant("group")
        )
    return {k: torch.nan_to_num(v, nan=0.0) for k, v in variants.items()}


def epsilon_cause(rewards: torch.Tensor, G: int, seen: torch.Tensor, config: dict) -> str:
    """Name the conventions that reproduce `seen` when they are not the declared ones: the
    epsilon ('1e-6 added to the std'), and the baseline and std estimator when another pair fits."""
    own = (config["baseline"], config["std_estimator"])
    pairs = [own] + [(b, e) for b in BASELINE_NAMES for e in STD_NAMES if (b, e) != own]
    declared = (config["advantage_epsilon_placement"], float(config["advantage_epsilon"]))
    for baseline, estimator in pairs:
        fitted = conventions.fit_epsilon(rewards, G, seen, estimator, baseline)
        if fitted is None:
            continue
        placement, epsilon = fitted
        epsilon = conventions.snapped_epsilon(epsilon)
        # float32 advantages resolve an epsilon down to ~1e-7 of the std (fit_epsilon); below, noise
        _, std = conventions.group_statistics(rewards, G, baseline, estimator)
        floor = 1e-7 * float(std[std > 0].median()) if (std > 0).any() else 0.0
        if epsilon < floor and declared[1] < floor:
            epsilon = declared[1]  # as declared, as far as this probe can tell
        same = placement == declared[0] and abs(epsilon - declared[1]) <= 0.05 * declared[1] + 1e-7
        if (baseline, estimator) == own:
            if same:
                return ""
            seen_words = conventions.epsilon_words(placement, epsilon)
            value = conventions.short(epsilon)
            if epsilon < floor:  # too small to read here: name the bound, not the noise
                seen_words = f"under {conventions.short(floor)} (too small to read here)"
                value = "the one your code adds"
            cause = (
                f"the advantage epsilon is {seen_words}, not {conventions.epsilon_words(*declared)}"
            )
            if epsilon > conventions.MAX_CONVENTIONAL_EPSILON:
                return f"{cause}: a bug (it {conventions.DAMPED})"
            return (
                f"{cause}; if intended, declare advantage_epsilon: {value}"
                f" and advantage_epsilon_placement: {placement}"
            )
        fits = {"baseline": baseline, "std_estimator": estimator}
        if not same:
            fits |= {"advantage_epsilon": epsilon, "advantage_epsilon_placement": placement}
        changed = {k: v for k, v in fits.items() if config[k] != v}
        declarations = {
            k: conventions.short(v) if isinstance(v, float) else v for k, v in changed.items()
        }
        plus = conventions.short(epsilon)
        if epsilon < floor:  # too small to read here: name the bound, not the noise
            plus = f"an epsilon under {conventions.short(floor)} (too small to read here)"
            declarations["advantage_epsilon"] = "the one your code adds"
        return (
            f"the advantages fit a baseline of {BASELINE_NAMES[baseline]} and the"
            f" {STD_NAMES[estimator]} std + {plus}; if intended, declare "
            + ", ".join(f"{k}: {v}" for k, v in declarations.items())
        )
    return ""


def _matches_reference(ctx: Context, mode: str, pass_mode: bool) -> None:
    G = 4
    rewards = torch.cat([ctx.rand(8) * 2, torch.tensor([0.0, 1.0, 1.0, 1.0])])
    seen = _advantages(ctx, rewards, G, mode if pass_mode else None)
    expected = ctx.ref_advantages(rewards, G, scale_rewards=mode)
    causes = wrong_advantages(rewards, G, mode, ctx.config)
    # Conventions fitted to what was seen (another std estimator and epsilon together) come
    # before the generic "off by a constant factor", which would hide them.
    fitted = epsilon_cause(rewards, G, seen, ctx.config) if mode != "none" else ""
    assert_close(
        seen,
        expected,
        atol=1e-5,
        rtol=1e-5,
        what=f"advantages (scale_rewards={mode!r})",
        causes=causes | ({fitted: seen.double()} if fitted else {}),
    )


@check("advantages", "compute_advantages")
def matches_reference(ctx: Context) -> None:
    """Advantages equal (r - baseline) / (std + epsilon) at the candidate's own scale_rewards, baseline, std estimator and epsilon."""
    _matches_reference(ctx, ctx.config["scale_rewards"], pass_mode=False)


@check("advantages", "compute_advantages")
def matches_reference_other_scalings(ctx: Context) -> None:
    """Every other scale_rewards value ("group", "batch", "none") the candidate takes matches its formula too."""
    ran = []
    for mode in SCALE_REWARDS:
        if mode != ctx.config["scale_rewards"]:
            try:
                _matches_reference(ctx, mode, pass_mode=True)
            except Skip:
                continue
            ran.append(mode)
    if not ran:
        raise Skip("compute_advantages takes no other scale_rewards")


@check("advantages", "compute_advantages")
def two_completions_use_bessel_std(ctx: Context) -> None:
    """With G = 2, rewards [0, 1] give +-0.7071 (Bessel std; +-1 population), and low-variance pairs keep their sign and size."""
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.00001, 2.0, 2.00001])
    seen = _advantages(ctx, rewards, 2)
    expected = ctx.ref_advantages(rewards, 2)
    assert_close(
        seen,
        expected,
        atol=1e-5,
        rtol=1e-5,
        what="advantages for G = 2",
        causes=wrong_advantages(rewards, 2, ctx.config["scale_rewards"], ctx.config),
        fallback_cause=epsilon_cause(rewards[:2], 2, seen[:2], ctx.config),
    )


@check("advantages", "compute_advantages")
def groups_are_centred(ctx: Context) -> None:
    """Within every group of G contiguous rows the advantages sum to 0 (the group mean, or the leave-one-out mean, is the baseline)."""
    if ctx.config["std_estimator"] == "leave_one_out" and ctx.config["scale_rewards"] != "none":
        raise Skip(
            "std_estimator: leave_one_out (each member has its own std, so a group's advantages"
            " need not sum to 0; matches_reference checks them)"
        )
    G = 4
    rewards = ctx.rand(16) * 3
    seen = _advantages(ctx, rewards, G)
    sums = seen.view(-1, G).sum(1)
    if not torch.all(sums.abs() <= 1e-4 * (1 + seen.abs().max())):
        variants = wrong_advantages(rewards, G, ctx.config["scale_rewards"], ctx.config)
        cause = (
            explain(seen.double(), variants, 1e-5, 1e-4)
            or epsilon_cause(rewards, G, seen, ctx.config)
            or "the group mean is not subtracted"
        )
        raise CheckFailure("per-group sums 0", f"{fmt(sums)}", cause)


@check("advantages", "compute_advantages")
def other_groups_do_not_matter(ctx: Context) -> None:
    """A group's advantages do not change when the other groups' rewards change (scale_rewards group/none)."""
    ctx.skip_unless(
        "advantage_whitening", "none", why="the declared batch statistics use the other groups"
    )
    mode = "group" if ctx.config["scale_rewards"] == "batch" else None
    G = 4
    rewards = torch.cat([torch.tensor([0.0, 1.0, 0.5, 1.0]), ctx.rand(8)])
    changed = torch.cat([rewards[:4], ctx.rand(8) * 10 + 5])
    first = _advantages(ctx, rewards, G, mode)[:4]
    second = _advantages(ctx, changed, G, mode)[:4]
    assert_close(
        second,
        first,
        atol=1e-5,
        what="the first group's advantages unchanged",
        fallback_cause="advantages use batch-wide statistics",
    )


@check("advantages", "compute_advantages")
def constant_group_is_zero(ctx: Context) -> None:
    """A group whose rewards are all equal (0.35, 0.95, 0, 1) gets advantages 0: within 1e-3, or within its fp32 residue over the declared divisor where that is larger, but never above 1 (CONSTANT_GROUP_CAP)."""
    G = 8
    rewards = torch.tensor([0.35] * G + [0.95] * G + [0.0] * G + [1.0] * G)
    whitening = ctx.config["advantage_whitening"] != "none"
    if whitening:  # one spread group (exact in fp32), so the batch std is not fp32 residue
        rewards = torch.cat([rewards, torch.tensor([0.0, 1.0] * (G // 2))])
    seen = _advantages(ctx, rewards, G).double()
    allowed = constant_group_allowance(rewards, G, ctx.config)
    if whitening:  # (a - batch mean) / batch std: each residue plus the mean's, over the std
        spread = conventions.advantages(rewards, G, ctx.config | {"advantage_whitening": "none"})
        batch_std = float(spread.double().std())
        allowed = (allowed + allowed[:-G].max()) / batch_std
        seen, allowed, rewards = seen[:-G], allowed[:-G], rewards[:-G]
    capped = allowed.clamp(max=CONSTANT_GROUP_CAP)
    excess = (seen.abs() / capped).nan_to_num(math.inf)
    if not (excess > 1).any():
        return
    i = int(excess.argmax())
    cause = "zero-variance groups are not centred (baseline not the group mean) or NaN from 0/0"
    residue_only = bool((seen.abs() <= allowed * (1 + 1e-6)).all())
    if residue_only:  # the declared formula as fp32 computes it, but past the cap
        declared = conventions.short(float(ctx.config["advantage_epsilon"]))
        cause = (
            f"the declared advantage_epsilon ({declared}) is too small for fp32: the group mean's"
            " rounding residue over it gives a group with no signal a full-size advantage (use"
            " >= 1e-6, or compute the group statistics in float64)"
        )
    for epsilon in () if residue_only else (1e-5, 1e-6, 1e-8):
        smaller = constant_group_allowance(rewards, G, ctx.config | {"advantage_epsilon": epsilon})
        if bool((seen.abs() <= smaller).all()):
            cause = (
                f"fp32's residue of the group mean divided by an epsilon of {epsilon:g} or less:"
                " the baseline is the group mean, and if your epsilon is that small, declare"
                " advantage_epsilon"
            )
            break
    raise CheckFailure(
        f"|A| <= {fmt(float(capped[i]))} for a constant group of {float(rewards[i]):g}",
        f"|A| {fmt(float(seen[i]))}",
        cause,
    )


def constant_group_allowance(rewards: torch.Tensor, G: int, config: dict) -> torch.Tensor:
    """Per member of a constant group: the |A| its fp32 arithmetic may leave. A group mean of
    values fp32 sums exactly (0, 1) is exact, so its A is 0; for others (0.35) the mean carries a
    residue of up to G roundings, which the formula divides by std + epsilon with a std of ~0. TRL's
    epsilon of 1e-4 keeps that below 6e-4; a declared 1e-6 (verl) lets it reach ~0.06 or more,
    which is the formula the candidate declared, computed as fp32 computes it."""
    _, divisor = conventions.advantage_parts(rewards, G, config)
    exact = (rewards.double() * 256).frac() == 0
    residue = torch.where(exact, 0.0, fp32_noise(rewards, G))
    return (residue / divisor).clamp(min=CONSTANT_GROUP_TOLERANCE)


# Groups of G = 8 whose statistics fp32 cannot compute exactly: values it cannot represent, a lone
# differing member (its others are equal, so its leave-one-out std is exactly 0), near-constant
# groups far from 0 (where sqrt(E[r^2] - E[r]^2) is all rounding residue).
HARD_GROUPS = (
    [0.3] * 7 + [1.0],
    [0.35, 0.95, 0.35, 0.35, 0.95, 0.35, 0.35, 0.95],
    [10.001, 10.0, 10.002, 10.0, 10.001, 10.0, 10.0, 10.001],
    [10.0] * 7 + [10.001],
)


def fp32_noise(rewards: torch.Tensor, G: int) -> torch.Tensor:
    """What float32 arithmetic may leave on a member's centred reward or std: G roundings of its
    group's largest |r| (a sum of G terms, then the deviations from it)."""
    grouped = rewards.double().view(-1, G)
    return (G * FP32_EPS * grouped.abs().amax(1, keepdim=True)).expand_as(grouped).reshape(-1)


@check("advantages", "compute_advantages")
def lone_member_and_unrepresentable_rewards(ctx: Context) -> None:
    """Groups fp32 does not flatter (0.3 x 7 with one 1.0, 0.35/0.95, near-constant 10.001/10.0) give the formula's advantages within fp32 noise; a lone differing member is not amplified."""
    ctx.skip_unless(
        "advantage_whitening",
        "none",
        why="the batch step spreads these groups' fp32 noise over every member;"
        " matches_reference checks the values",
    )
    G = 8
    rewards = torch.tensor([r for group in HARD_GROUPS for r in group])
    seen = _advantages(ctx, rewards, G).double()
    centred, divisor = conventions.advantage_parts(rewards, G, ctx.config)
    expected = (centred / divisor).nan_to_num(0.0)
    dropped = conventions.reward_spans(rewards, G) < float(ctx.config["min_reward_span"])
    expected = expected.masked_fill(dropped.repeat_interleave(G), 0.0)
    tolerance = fp32_noise(rewards, G) / divisor * (1 + expected.abs()) + 1e-6
    excess = ((seen - expected).abs() / tolerance).nan_to_num(math.inf)
    if not (excess > 1).any():
        return
    i = int(excess.argmax())
    variants = wrong_advantages(rewards, G, ctx.config["scale_rewards"], ctx.config)
    cause = next(
        (c for c, v in variants.items() if bool(((seen - v.double()).abs() <= tolerance).all())),
        "",
    )
    cause = (
        cause
        or _residue_cause(ctx, rewards, G, seen, i)
        or epsilon_cause(rewards, G, seen.float(), ctx.config)
        or _usual_epsilon_cause(ctx, rewards, G, seen)
    )
    group = rewards.view(-1, G)[i // G]
    raise CheckFailure(
        f"A[{i}] = {fmt(float(expected[i]))} +- {tolerance[i]:.1g} (group {fmt(group)})",
        f"{fmt(float(seen[i]))} ({int((excess > 1).sum())} of {len(seen)} outside fp32 noise)",
        cause,
    )


def _usual_epsilon_cause(ctx: Context, rewards: torch.Tensor, G: int, seen: torch.Tensor) -> str:
    """The cause when `seen` is these groups' formula with another of the usual epsilons (verl's
    1e-6, AReaL's 1e-5, small loops' 1e-8), which fp32 noise keeps fit_epsilon from reading."""
    declared = float(ctx.config["advantage_epsilon"])
    for epsilon in (1e-5, 1e-6, 1e-8):
        if epsilon == declared:
            continue
        config = ctx.config | {"advantage_epsilon": epsilon}
        centred, divisor = conventions.advantage_parts(rewards, G, config)
        expected = (centred / divisor).nan_to_num(0.0)
        tolerance = fp32_noise(rewards, G) / divisor * (1 + expected.abs()) + 1e-6
        if bool(((seen - expected).abs() <= tolerance).all()):
            words = conventions.epsilon_words(ctx.config["advantage_epsilon_placement"], epsilon)
            return (
                f"the values are these groups' formula with {words}, not"
                f" {conventions.short(declared)}; if intended, declare advantage_epsilon:"
                f" {conventions.short(epsilon)}"
            )
    return ""


def _residue_cause(ctx: Context, rewards: torch.Tensor, G: int, seen: torch.Tensor, i: int) -> str:
    """The cause when member `i` is divided by a std at the level of fp32 residue: computed as
    sqrt(E[r^2] - E[r]^2) in float32, whose rounding is ~sqrt(G * eps32) * |r|."""
    centred, divisor = conventions.advantage_parts(rewards, G, ctx.config)
    if not (seen[i].abs() > 2 * (centred[i] / divisor[i]).abs() and centred[i] != 0):
        return ""
    epsilon = float(ctx.config["advantage_epsilon"])
    implied = float(centred[i] / seen[i]) - epsilon
    scale = float(rewards.view(-1, G)[i // G].abs().max())
    floor = math.sqrt(G * FP32_EPS) * scale
    if not -1e-3 * epsilon <= implied <= floor:  # a residue clamped to 0 leaves epsilon alone
        return ""
    implied = max(implied, 0.0)
    exact = 0.0 if float(divisor[i]) == 1.0 else float(divisor[i]) - epsilon
    name = STD_NAMES[ctx.config["std_estimator"]]
    return (
        f"member {i} is divided by a std of {implied:.2g} where the exact {name} std is"
        f" {exact:.2g}: float32 rounding residue, not variation (computed in float32, a std of"
        f" rewards near {scale:g} is noise up to ~{floor:.1g}, as sqrt(E[r^2] - E[r]^2) gives);"
        " compute it from deviations in float64, and leave a member whose others are all equal"
        " undivided"
    )


@check("advantages", "compute_advantages")
def nan_rewards_are_excluded(ctx: Context) -> None:
    """A NaN reward is left out of its group's mean and std and gets advantage 0; all-NaN groups give 0."""
    ctx.skip_unless(
        "nan_rewards", "excluded", why=NAN_REWARDS_MEAN.get(ctx.config["nan_rewards"], "")
    )
    rewards = torch.tensor([NAN, 0.0, 1.0, 1.0, NAN, NAN, NAN, NAN, 0.5, NAN, 0.0, 1.0])
    seen = _advantages(ctx, rewards, 4)
    expected = ctx.ref_advantages(rewards, 4)
    if torch.isnan(seen).any():
        raise CheckFailure(
            f"finite advantages {fmt(expected)}",
            fmt(seen),
            "NaN rewards poison their group: use nanmean/nanstd, then nan_to_num(A, 0)",
        )
    zeroed = rewards.nan_to_num(0.0)
    assert_close(
        seen,
        expected,
        atol=1e-5,
        rtol=1e-5,
        what="advantages with NaN rewards",
        causes={
            "NaN rewards are counted as 0 in the group statistics": torch.nan_to_num(
                ctx.ref_advantages(zeroed, 4), nan=0.0
            )
        },
    )


@check("advantages", "compute_advantages")
def bounded_by_sqrt_group_size(ctx: Context) -> None:
    """Group-scaled advantages are bounded: |A| <= (G - 1) / sqrt(G) < sqrt(G) (one outlier in a group; sqrt(G - 1) with the population std)."""
    if ctx.config["std_estimator"] == "leave_one_out":
        raise Skip(
            "std_estimator: leave_one_out (a member whose others nearly agree gets a tiny std:"
            " no such bound; lone_member_and_unrepresentable_rewards checks the values)"
        )
    ctx.skip_unless(
        "advantage_whitening", "none", why="rescaled over the batch: no per-group bound"
    )
    mode = "group" if ctx.config["scale_rewards"] != "group" else None
    G = 8
    rewards = torch.tensor([1.0] + [0.0] * 7 + [5.0] * 7 + [-3.0])
    seen = _advantages(ctx, rewards, G, mode)
    bound = (G - 1) / math.sqrt(G)
    if ctx.config["std_estimator"] == "population":
        bound = math.sqrt(G - 1)
    worst = float(seen.abs().max())
    if not worst <= bound + 1e-4:
        raise CheckFailure(
            f"max |A| <= {bound:.4f}",
            fmt(worst),
            epsilon_cause(rewards, G, seen, ctx.config)
            or "the std is too small: population std on a subset, or a wrong group split",
        )
