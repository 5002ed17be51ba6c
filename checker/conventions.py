"""Expected values under a candidate's declared conventions, and the epsilon fit used to word causes.

`reference_impl` stays TRL-exact; everything that a legitimate convention changes (the std
estimator and the advantage epsilon, verl's `loss_agg_mode`s and its row count, the KL estimator)
is written out here from its own source, so a check compares a candidate with a reference
configured the same way. The vocabulary and the TRL defaults live in `reference_impl.protocol`.
"""

from __future__ import annotations

import math

import torch

from checker.report import short  # noqa: F401 - checks word epsilons with it
from reference_impl.protocol import DEFAULTS

# verl's `loss_agg_mode` -> the aggregation rule of the same formula (see LOSS_AGG_MODES).
AGG_MODE_RULES = {
    "token-mean": "bnpo",
    "token-sum": "sum",
    "seq-mean-token-sum": "seq-sum",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum-norm": "dr_grpo",
}
# The loss types whose per-token form is not PPO's clipped surrogate.
FORM_LOSS_TYPES = ("cispo", "sapo")
# The rules that average over rows, where the empty-row convention changes the divisor.
ROW_MEAN_RULES = ("grpo", "sapo", "dr_grpo", "seq-sum")
# Largest advantage epsilon that is a convention rather than a bug (catalog: TRL 1e-4, verl 1e-6,
# small loops 1e-8, a project's own 1e-2; 1e4 is a known bug). Above it the epsilon is as large as
# the rewards' spread: a group of 8 binary rewards with one success has a population std of 0.33,
# and std + 0.1 already shrinks its advantages by more than a fifth.
MAX_CONVENTIONAL_EPSILON = 0.1
DAMPED = "damps every advantage (by over a fifth where one of 8 binary rewards succeeds)"


def group_std(grouped: torch.Tensor, estimator: str, dim: int | None = 1) -> torch.Tensor:
    """NaN-aware std over `dim`: Bessel (n - 1) or population (n)."""
    correction = 1 if estimator == "bessel" else 0
    mean = torch.nanmean(grouped, dim=dim, keepdim=True)
    count = (~torch.isnan(grouped)).sum(dim=dim, keepdim=True)
    squares = torch.nansum((grouped - mean) ** 2, dim=dim, keepdim=True)
    return torch.sqrt(squares / (count - correction))


def group_statistics(
    rewards: torch.Tensor, num_generations: int, baseline: str, estimator: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per member, in float64: its reward minus the baseline, and the std it is divided by.

    The baseline is the group mean or the mean of the G - 1 others (leave-one-out); the std is
    the group's (Bessel or population) or the Bessel std of the others (leave-one-out), computed
    from deviations, never as sqrt(E[r^2] - E[r]^2), so a member whose others are all equal gets
    exactly 0. NaN rewards count in neither.
    """
    grouped = rewards.double().view(-1, num_generations)
    valid = ~torch.isnan(grouped)
    values = grouped.nan_to_num(0.0)
    count = valid.sum(1, keepdim=True)
    others = count - valid.long()
    others_mean = (values.sum(1, keepdim=True) - values) / others.clamp(min=1)
    group_mean = torch.nanmean(grouped, dim=1, keepdim=True)
    centred = grouped - (others_mean if baseline == "leave_one_out" else group_mean)
    if estimator != "leave_one_out":
        std = group_std(grouped, estimator).expand_as(grouped)
        return centred, std
    # [rows, member i, other j]: squared deviations of the others from member i's baseline
    deviations = (values.unsqueeze(1) - others_mean.unsqueeze(2)) ** 2
    keep = valid.unsqueeze(1) & ~torch.eye(num_generations, dtype=torch.bool)
    squares = (deviations * keep).sum(2)
    std = torch.where(others > 1, torch.sqrt(squares / (others - 1).clamp(min=1)), 0.0)
    return centred, std


def advantage_parts(
    rewards: torch.Tensor, num_generations: int, config: dict, scale_rewards: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per member, in float64: the centred reward and what it is divided by (1 when undivided)."""
    mode = scale_rewards or config["scale_rewards"]
    epsilon = float(config["advantage_epsilon"])
    estimator = config["std_estimator"]
    if mode == "batch" and estimator == "leave_one_out":
        estimator = "bessel"  # a batch-wide std has no member to leave out
    centred, std = group_statistics(rewards, num_generations, config["baseline"], estimator)
    if mode == "none":
        return centred.reshape(-1), torch.ones_like(centred).reshape(-1)
    if mode == "batch":
        std = group_std(rewards.double().view(1, -1), estimator).expand_as(centred)
    if config["advantage_epsilon_placement"] == "sqrt":
        divisor = torch.sqrt(std**2 + epsilon)
    else:
        divisor = std + epsilon
    if estimator == "leave_one_out":  # no variation among the others: left undivided
        divisor = torch.where(std > 0, divisor, torch.ones_like(divisor))
    return centred.reshape(-1), divisor.reshape(-1)


def advantages(
    rewards: torch.Tensor, num_generations: int, config: dict, scale_rewards: str | None = None
) -> torch.Tensor:
    """TRL's advantages (gt:L2777-2810) with the candidate's baseline, std estimator, epsilon and
    placement, and zero for a group whose rewards span less than `min_reward_span`; computed in
    float64 from the float32 rewards, returned in the rewards' dtype."""
    centred, divisor = advantage_parts(rewards, num_generations, config, scale_rewards)
    values = torch.nan_to_num(centred / divisor, nan=0.0)
    dropped = reward_spans(rewards, num_generations) < float(config["min_reward_span"])
    values = values.masked_fill(dropped.repeat_interleave(num_generations), 0.0)
    return whitened(values, config).to(rewards.dtype)


def whitened(values: torch.Tensor, config: dict) -> torch.Tensor:
    """The group step's advantages after the declared `advantage_whitening`: unchanged, or
    (A - batch mean) / (batch std + epsilon) with the std estimator and epsilon of the group step
    (AReaL's adv_norm; Bessel where the group step leaves one out)."""
    if config["advantage_whitening"] == "none":
        return values
    flat = values.double().view(1, -1)
    estimator = "population" if config["std_estimator"] == "population" else "bessel"
    std = group_std(flat, estimator).reshape(())
    return (values.double() - flat.mean()) / (std + float(config["advantage_epsilon"]))


def reward_spans(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Each group's max - min reward over the members that scored (NaN left out), in float64."""
    grouped = rewards.double().view(-1, num_generations)
    highest = grouped.nan_to_num(nan=-math.inf).max(1).values
    lowest = grouped.nan_to_num(nan=math.inf).min(1).values
    return (highest - lowest).nan_to_num(nan=0.0, neginf=0.0, posinf=0.0)


def is_trl_advantage(config: dict) -> bool:
    """True when the candidate's advantage conventions are TRL's, so reference_impl serves."""
    keys = (
        "advantage_epsilon",
        "advantage_epsilon_placement",
        "baseline",
        "std_estimator",
        "min_reward_span",
        "advantage_whitening",
    )
    return all(config[k] == DEFAULTS[k] for k in keys)


def fit_epsilon(
    rewards: torch.Tensor,
    num_generations: int,
    seen: torch.Tensor,
    estimator: str,
    baseline: str = "mean",
) -> tuple[str, float] | None:
    """The (placement, epsilon) that reproduces `seen` from group-scaled `rewards`, if one does.

    From A = c / (std + eps): eps = c / A - std, the same on every row with |A| well above 0; from
    A = c / sqrt(var + eps): eps = (c / A)^2 - var. Fitted in float64 from the float32 output, so
    only epsilons above ~1e-7 of the std are resolved; smaller ones read as 0.
    """
    centred, std = group_statistics(rewards, num_generations, baseline, estimator)
    centred, std = centred.reshape(-1), std.reshape(-1)
    seen = seen.double().reshape(-1)
    keep = (seen.abs() > 1e-3 * seen.abs().max()) & (centred.abs() > 1e-3 * centred.abs().max())
    keep &= std > 0  # a zero leave-one-out std leaves the member undivided: nothing to fit
    if not keep.any():
        return None
    for placement, values in (
        ("std", centred[keep] / seen[keep] - std[keep]),
        ("sqrt", (centred[keep] / seen[keep]) ** 2 - std[keep] ** 2),
    ):
        epsilon = float(values.median())
        scale = float(std[keep].median()) if placement == "std" else float(std[keep].median()) ** 2
        tolerance = max(1e-3 * abs(epsilon), 1e-6 * scale)
        if float((values - epsilon).abs().max()) <= tolerance and epsilon > -tolerance:
            return placement, max(epsilon, 0.0)
    return None


def snapped_epsilon(epsilon: float) -> float:
    """A fitted epsilon as code writes it: the power of ten within 15% of it (a fit of 1e-8 from
    float32 advantages reads 9.1e-9), else two significant digits."""
    if epsilon <= 0:
        return 0.0
    decade = 10.0 ** round(math.log10(epsilon))
    return decade if abs(epsilon - decade) <= 0.15 * decade else float(f"{epsilon:.2g}")


def epsilon_words(placement: str, epsilon: float) -> str:
    """'1e-6 added to the std' or '1e-4 inside the square root'."""
    where = "added to the std" if placement == "std" else "inside the square root"
    return f"{short(epsilon)} {where}"


def aggregation_rule(config: dict, loss_type: str | None = None) -> str:
    """The aggregation formula `loss_type` (None: the candidate's own) is taken with: the declared
    verl `loss_agg_mode` for the own loss, else the loss type's own rule (TRL); under
    `form_aggregation: own`, cispo and sapo take the own loss's rule."""
    own = loss_type is None or loss_type == config["loss_type"]
    if own and config["loss_agg_mode"]:
        return AGG_MODE_RULES[config["loss_agg_mode"]]
    if not own and loss_type in FORM_LOSS_TYPES and config["form_aggregation"] == "own":
        return aggregation_rule(config)
    return loss_type or config["loss_type"]


def aggregate(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    rule: str,
    *,
    max_len: int | None = None,
    num_items: int | None = None,
    empty_rows: str = "counted",
) -> torch.Tensor:
    """The hand formulas of every aggregation (written independently of reference_impl).

    grpo/sapo: mean over rows of each row's token mean; bnpo: masked sum / mask sum; dr_grpo:
    masked sum / (rows * max_len, None -> T); dapo/cispo: masked sum / num_items (None -> mask sum);
    seq-sum: mean over rows of each row's token sum; sum: masked sum; unmasked-mean: mean of every
    token. With empty_rows="excluded" the row means divide by the non-empty rows only (verl).
    """
    m = mask.double()
    masked = token_loss * m
    rows, width = m.shape
    if empty_rows == "excluded" and rule in ROW_MEAN_RULES:
        rows = int((m.sum(1) > 0).sum())
    if rule in ("grpo", "sapo"):
        return (masked.sum(1) / m.sum(1).clamp(min=1)).sum() / max(rows, 1)
    if rule == "bnpo":
        return masked.sum() / m.sum().clamp(min=1)
    if rule == "dr_grpo":
        return masked.sum() / (max(rows, 1) * (max_len or width))
    if rule in ("dapo", "cispo"):
        items = m.sum() if num_items is None else torch.tensor(float(num_items))
        return masked.sum() / items.clamp(min=1)
    if rule == "seq-sum":
        return masked.sum(1).sum() / max(rows, 1)
    if rule == "sum":
        return masked.sum()
    if rule == "unmasked-mean":
        return token_loss.mean()
    raise ValueError(rule)


def aggregation_weights(mask: torch.Tensor, rule: str, **options) -> torch.Tensor:
    """Each token's weight in `aggregate(token_loss, mask, rule, **options)`, which is linear in
    the per-token losses: its gradient with respect to them, in float64."""
    token_loss = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
    (weights,) = torch.autograd.grad(aggregate(token_loss, mask, rule, **options), token_loss)
    return weights


def kl_value(d: torch.Tensor | float, estimator: str) -> torch.Tensor:
    """The per-token KL estimate at d = ref - logp (verl core_algos.kl_penalty_forward)."""
    d = torch.as_tensor(d, dtype=torch.float64)
    if estimator == "k1":
        return -d
    if estimator in ("k2", "mse"):
        return d**2 / 2
    if estimator == "abs":
        return d.abs()
    if estimator == "low_var_kl":
        d = d.clamp(-20, 20)
        return (d.exp() - d - 1).clamp(-10, 10)
    return d.exp() - d - 1


def kl_gradient(d: torch.Tensor | float, estimator: str) -> torch.Tensor:
    """d(estimate)/d(logp) at d = ref - logp (inside low_var_kl's clamps it is k3's)."""
    d = torch.as_tensor(d, dtype=torch.float64)
    if estimator == "k1":
        return torch.ones_like(d)
    if estimator in ("k2", "mse"):
        return -d
    if estimator == "abs":
        return -torch.sign(d)
    return 1 - d.exp()
