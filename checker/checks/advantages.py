"""Stage `advantages`: `compute_advantages(rewards [N], num_generations, scale_rewards) -> [N]`.

Rule (TRL 1.16 gt:L2777-2810): A = (r - nanmean(group)) / (nanstd(group) + 1e-4)
with the Bessel (n - 1) std over non-NaN values, groups = contiguous blocks of G rows; "batch" uses
the std of all N rewards, "none" skips the division; NaN results become 0. A candidate that
declares another epsilon (value, or placement inside the square root), the population std, or no
NaN rewards is compared with that formula instead (checker.conventions).
"""

from __future__ import annotations

import math

import torch

from checker import conventions
from checker.checks import CheckFailure, Skip, check
from checker.checks.context import Context, assert_close, fmt
from checker.checks.rewards import NAN_REWARDS_MEAN
from reference_impl.protocol import DEFAULTS, SCALE_REWARDS

NAN = math.nan
# fp32 means of non-dyadic constant groups leave a residue: TRL 1.16 gives |A| up to 6e-4 for a
# constant group of 0.95, so "zero" means below 1e-3 here.
CONSTANT_GROUP_TOLERANCE = 1e-3


def _advantages(ctx: Context, rewards: torch.Tensor, G: int, mode: str | None = None):
    kwargs = {} if mode is None else {"scale_rewards": mode}
    out = ctx.call("compute_advantages", rewards, G, shape=rewards.shape, **kwargs)
    return out.detach().float()


def wrong_advantages(
    rewards: torch.Tensor, G: int, mode: str, config: dict
) -> dict[str, torch.Tensor]:
    """What common wrong implementations return (batch-wide statistics, the other std, epsilon
    misplaced, ...), for naming the cause; relative to the candidate's declared conventions."""
    estimator = config["std_estimator"]
    other = "population" if estimator == "bessel" else "bessel"
    names = {"bessel": "Bessel (n - 1)", "population": "population (n)"}
    grouped = rewards.view(-1, G)
    centred = (grouped - torch.nanmean(grouped, 1, keepdim=True)).view(-1)
    scope = grouped if mode == "group" else rewards.view(1, -1)
    std = conventions.group_std(scope, estimator)
    std = std.expand_as(grouped).reshape(-1) if mode == "group" else std.view(())
    other_std = conventions.group_std(scope, other)
    other_std = other_std.expand_as(grouped).reshape(-1) if mode == "group" else other_std.view(())
    epsilon = float(config["advantage_epsilon"])
    batch_mean = rewards - torch.nanmean(rewards)
    interleaved = rewards.view(G, -1).T.reshape(-1)
    inter_adv = conventions.advantages(interleaved, G, config, "group")
    inter_back = inter_adv.reshape(-1, G).T.reshape(-1)  # undo the interleaving
    variants = {
        f"the std is the {names[other]} std, not the {names[estimator]} one"
        + (" that TRL uses" if estimator == "bessel" else " declared"): centred
        / (other_std + epsilon),
        "the baseline is the batch-wide mean, not the per-group mean": batch_mean / (std + epsilon),
        "the rewards are not divided by the std (scale_rewards looks like 'none')": centred,
        "groups look interleaved ([p1, p2, p1, p2]), not contiguous blocks of G rows": inter_back,
    }
    if mode == "group":
        batch_std = conventions.group_std(rewards.view(1, -1), estimator).view(())
        variants["the std is over the whole batch: scale_rewards looks like 'batch'"] = centred / (
            batch_std + epsilon
        )
    if mode == "none":
        variants = {k: v for k, v in variants.items() if "not divided" not in k}
        group_scaled = conventions.advantages(rewards, G, config, "group")
        variants["the rewards are divided by the group std: scale_rewards looks like 'group'"] = (
            group_scaled
        )
    return {k: torch.nan_to_num(v, nan=0.0) for k, v in variants.items()}


def epsilon_cause(rewards: torch.Tensor, G: int, seen: torch.Tensor, config: dict) -> str:
    """Name the epsilon the candidate uses when it is not the declared one: '1e-6 added to the std'."""
    fitted = conventions.fit_epsilon(rewards, G, seen, config["std_estimator"])
    if fitted is None:
        return ""
    placement, epsilon = fitted
    declared = (config["advantage_epsilon_placement"], float(config["advantage_epsilon"]))
    if placement == declared[0] and abs(epsilon - declared[1]) <= 0.05 * declared[1] + 1e-7:
        return ""
    seen_words = conventions.epsilon_words(placement, epsilon)
    cause = f"the advantage epsilon is {seen_words}, not {conventions.epsilon_words(*declared)}"
    if epsilon > conventions.MAX_CONVENTIONAL_EPSILON:
        return f"{cause}: a bug (it flattens every advantage)"
    return (
        f"{cause}; if intended, declare advantage_epsilon: {conventions.short(epsilon)}"
        f" and advantage_epsilon_placement: {placement}"
    )


def _matches_reference(ctx: Context, mode: str, pass_mode: bool) -> None:
    G = 4
    rewards = torch.cat([ctx.rand(8) * 2, torch.tensor([0.0, 1.0, 1.0, 1.0])])
    seen = _advantages(ctx, rewards, G, mode if pass_mode else None)
    expected = ctx.ref_advantages(rewards, G, scale_rewards=mode)
    assert_close(
        seen,
        expected,
        atol=1e-5,
        rtol=1e-5,
        what=f"advantages (scale_rewards={mode!r})",
        causes=wrong_advantages(rewards, G, mode, ctx.config),
        fallback_cause=epsilon_cause(rewards, G, seen, ctx.config) if mode != "none" else "",
    )


@check("advantages", "compute_advantages")
def matches_reference(ctx: Context) -> None:
    """Advantages equal (r - group mean) / (group std + epsilon) at the candidate's own scale_rewards, std estimator and epsilon."""
    _matches_reference(ctx, ctx.config["scale_rewards"], pass_mode=False)


@check("advantages", "compute_advantages")
def matches_reference_other_scalings(ctx: Context) -> None:
    """Every other scale_rewards value ("group", "batch", "none") matches its formula too."""
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
    """Within every group of G contiguous rows the advantages sum to 0 (the group mean is the baseline)."""
    G = 4
    rewards = ctx.rand(16) * 3
    seen = _advantages(ctx, rewards, G)
    sums = seen.view(-1, G).sum(1)
    if not torch.all(sums.abs() <= 1e-4 * (1 + seen.abs().max())):
        rewards_batch = rewards - rewards.mean()
        cause = (
            "the baseline looks batch-wide, not per group"
            if rewards_batch.view(-1, G).sum(1).abs().max() > 1e-3
            else "the group mean is not subtracted"
        )
        raise CheckFailure("per-group sums 0", f"{fmt(sums)}", cause)


@check("advantages", "compute_advantages")
def other_groups_do_not_matter(ctx: Context) -> None:
    """A group's advantages do not change when the other groups' rewards change (scale_rewards group/none)."""
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
    """A group whose rewards are all equal (0.35, 0.95, 0, 1) gets advantages ~0 (|A| < 1e-3: fp32 residue)."""
    rewards = torch.tensor([0.35] * 8 + [0.95] * 8 + [0.0] * 8 + [1.0] * 8)
    seen = _advantages(ctx, rewards, 8)
    worst = float(seen.abs().max()) if not torch.isnan(seen).any() else math.nan
    if not worst <= CONSTANT_GROUP_TOLERANCE:
        cause = "zero-variance groups are not centred (baseline not the group mean) or NaN from 0/0"
        epsilon = float(ctx.config["advantage_epsilon"])
        if math.isfinite(worst) and epsilon < DEFAULTS["advantage_epsilon"]:
            cause = (
                f"fp32 rounding noise in a constant group's mean is divided by std + "
                f"{conventions.short(epsilon)}: the small epsilon turns it into large advantages"
                f" (TRL's 1e-4 keeps them below {CONSTANT_GROUP_TOLERANCE}); a real finding"
            )
        raise CheckFailure(
            f"|A| <= {CONSTANT_GROUP_TOLERANCE} for constant groups", f"max |A| {fmt(worst)}", cause
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
            "the std is too small: population std on a subset, or a wrong group split",
        )
