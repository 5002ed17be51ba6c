"""`grpo-check profile TARGET`: measure a candidate's conventions by calling its functions on probes.

Each probe is one small function that calls the candidate (in a child process, like the checks)
and returns the conventions it measured plus findings: values that are known bugs, which are
reported and never written as conventions. `--write PATH` writes the measured conventions as the
stage protocol's YAML, for the user to review, commit and pass to `grpo-check PATH`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from checker.candidate import CONVENTION_ALIASES
from reference_impl.protocol import DEFAULTS

PROFILE_TIMEOUT = 180.0


@dataclass
class Profile:
    conventions: dict[str, object] = field(default_factory=dict)  # key -> measured value
    evidence: dict[str, str] = field(default_factory=dict)  # key -> how it was measured
    findings: list[str] = field(default_factory=list)  # known bugs, never written
    # keyword -> the only values it takes effect at (`supported:` in the YAML), for options the
    # candidate's loss accepts and ignores; the checks that need other values are skipped.
    supported: dict[str, list] = field(default_factory=dict)
    # The conventions a trainer's GRPOConfig sets (its user chose them): a measured value that
    # differs is left for the checks to report, never written. One left at the release's
    # default that the trainer's own code does not follow is the team's convention, written.
    config_set: list[str] = field(default_factory=list)
    # The candidate's own value of each measured convention (its release's and config's for a
    # trainer, TRL's defaults overlaid with `config:` otherwise): what a measurement differs from.
    own: dict[str, object] = field(default_factory=dict)

    def set(self, key: str, value, how: str) -> None:
        self.conventions[key] = value
        self.evidence[key] = how

    def restrict(self, key: str, values: list, how: str) -> None:
        self.supported[key] = values
        self.evidence[f"supported {key}"] = how


# ---------------------------------------------------------------------------------------------
# Probes (child side). Each takes the loaded candidate and the profile it fills.


def probe_rewards(candidate, profile: Profile) -> None:
    """nan_rewards from a row whose every reward function returned None (NaN): it stays NaN
    (excluded from its group's statistics, TRL from 1.6) or becomes 0 (TRL before, nan_to_num)."""
    import math

    import torch

    fn = candidate.functions.get("combine_rewards")
    if fn is None:
        return
    rewards = torch.tensor([[1.0, math.nan], [math.nan, math.nan]])
    unscored = float(fn(rewards, torch.tensor([1.0, 0.5]))[1])  # TRL's weights: a tensor
    if math.isnan(unscored):
        profile.set("nan_rewards", "excluded", "a row of NaN rewards stays NaN")
    elif unscored == 0.0:
        profile.set("nan_rewards", "zero", "a row of NaN rewards combines to 0")


def probe_advantages(candidate, profile: Profile) -> None:
    """Fit scale_rewards, the baseline, the std estimator and the epsilon from one call."""
    import torch

    from checker import conventions

    fn = candidate.functions.get("compute_advantages")
    if fn is None:
        return
    # Small spreads near 0: fp32 then resolves epsilons down to ~1e-9 of a 1e-3 std.
    rewards = torch.tensor([0, 1e-3, 3e-3, 2.5e-3, 0, 2e-3, 1e-3, 4e-3, 5e-4, 1e-3, 0, 2e-3])
    threshold = _reward_span_threshold(fn)
    if threshold is not None:
        how = f"groups spanning under {threshold:g} get zero advantages"
        profile.set("min_reward_span", threshold, how)
        rewards = rewards * (10 * threshold / 2e-3)  # every group spans 10x the threshold
    seen = fn(rewards.clone(), 4).detach().double()
    for baseline in ("mean", "leave_one_out"):
        config = {**DEFAULTS, "baseline": baseline}
        if torch.allclose(
            seen, conventions.advantages(rewards, 4, config, "none").double(), rtol=1e-4, atol=1e-9
        ):
            profile.set("scale_rewards", "none", "A equals r - baseline")
            _set_baseline(profile, baseline)
            _fit_group_scaling(fn, rewards, seen, profile)
            break
    else:
        _fit_scaled_advantages(rewards, seen, profile)
    _probe_ignored_scaling(fn, candidate, profile, rewards, seen)
    nan_in = torch.tensor([float("nan"), 0.0, 1.0, 1.0])
    nan_out = fn(nan_in, 4).detach()
    rewards_never_nan = profile.conventions.get("nan_rewards") == "zero"
    if not rewards_never_nan and (torch.isnan(nan_out).any() or not torch.isfinite(nan_out).all()):
        # (a combination that scores None as 0, measured by probe_rewards, already says why
        # the advantages never see a NaN)
        profile.set(
            "nan_rewards", "never", "a NaN reward gives NaN advantages: rewards must never be NaN"
        )


def _reward_span_threshold(fn) -> float | None:
    """The spread (max - min) under which a group gets zero advantages, as if dropped
    (simple_GRPO's 0.01), from groups [0, s, s/2, s/4] with s from 1e-5 to 1; None when every
    group is trained on, or when the zero groups are not those below one spread."""
    import torch

    spans = torch.logspace(-5, 0, 101)
    rewards = torch.stack([torch.zeros_like(spans), spans, spans / 2, spans / 4], 1).reshape(-1)
    seen = fn(rewards.clone(), 4).detach().double().view(-1, 4)
    zero = (seen.abs() < 1e-12).all(1)
    if not zero.any() or zero.all():
        return None
    below, above = float(spans[zero].max()), float(spans[~zero].min())
    if below >= above:
        return None
    return _round_between(below, above)


def _round_between(low: float, high: float) -> float:
    """The roundest number in (low, high]: 1, 2, 2.5 or 5 times a power of ten, else `high`."""
    for exponent in range(-6, 2):
        for mantissa in (1, 2, 2.5, 5):
            value = mantissa * 10.0**exponent
            if low < value <= high * (1 + 1e-6):
                return value
    return high


def _fit_group_scaling(fn, rewards, unscaled, profile: Profile) -> None:
    """The std estimator and epsilon of a function whose own default does not scale (Dr. GRPO's
    scale_rewards none) but which takes scale_rewards="group": the checks call it so too."""
    if not _takes(fn, "scale_rewards"):
        return
    try:
        scaled = fn(rewards.clone(), 4, scale_rewards="group").detach().double()
    except (TypeError, ValueError, KeyError, NotImplementedError):
        return
    if not scaled.equal(unscaled):
        _fit_scaled_advantages(rewards, scaled, profile)


def _probe_ignored_scaling(fn, candidate, profile: Profile, rewards, seen) -> None:
    """An advantage function of the team's own that takes scale_rewards and ignores it (one
    scaling, e.g. Dr. GRPO's none): pinned under `supported:` to the scaling it implements."""
    import torch

    if not _takes(fn, "scale_rewards") or not {"scale_rewards", "std_estimator"} & set(
        profile.conventions
    ):
        return  # no formula fits: nothing measured to pin
    measured = profile.conventions.get("scale_rewards", candidate.config["scale_rewards"])
    allowed = candidate.supported.get("scale_rewards", ["group", "batch", "none"])
    others = [v for v in ("group", "batch", "none") if v != measured and v in allowed]
    ran = []
    for value in others:
        try:
            ran.append(fn(rewards.clone(), 4, scale_rewards=value).detach().double())
        except (TypeError, ValueError, KeyError, NotImplementedError):
            continue
    if ran and all(torch.equal(other, seen) for other in ran):
        profile.restrict(
            "scale_rewards", [measured], f"scale_rewards {', '.join(others)} change nothing"
        )


def _set_baseline(profile: Profile, baseline: str) -> None:
    if baseline == "leave_one_out":
        profile.set("baseline", baseline, "r minus the mean of the other G - 1 members fits")


def _fit_scaled_advantages(rewards, seen, profile: Profile) -> None:
    """The baseline, std estimator and epsilon (value and placement) that reproduce `seen`."""
    from checker import conventions

    for baseline in ("mean", "leave_one_out"):
        for estimator in ("bessel", "population", "leave_one_out"):
            fitted = conventions.fit_epsilon(rewards, 4, seen, estimator, baseline)
            if fitted is None:
                continue
            placement, epsilon = fitted
            epsilon = conventions.snapped_epsilon(epsilon)
            _set_baseline(profile, baseline)
            profile.set("std_estimator", estimator, "A = (r - baseline) / f(std) fits this std")
            if epsilon > conventions.MAX_CONVENTIONAL_EPSILON:
                profile.findings.append(
                    f"advantages: epsilon {conventions.short(epsilon)} {conventions.DAMPED}: a bug"
                )
            elif placement == "sqrt" and epsilon == 0:
                profile.findings.append("advantages: no epsilon: a constant group divides 0 by 0")
            else:
                profile.set(
                    "advantage_epsilon",
                    epsilon,
                    f"fitted: {conventions.epsilon_words(placement, epsilon)}",
                )
                profile.set("advantage_epsilon_placement", placement, "fitted with the epsilon")
            return
    if _fit_whitened(rewards, seen, profile):
        return
    profile.findings.append("advantages: match no (r - baseline) / (std + eps) formula")


WHITENING_EPSILONS = (1e-4, 1e-5, 1e-6, 1e-8, 0.0)


def _fit_whitened(rewards, seen, profile: Profile) -> bool:
    """advantage_whitening: batch when `seen` is a group formula (baseline, std estimator, one
    of the usual epsilons) whose result is then centred and scaled over the batch (AReaL)."""
    import torch

    from checker import conventions

    forms = [
        (scale, baseline, estimator, placement, epsilon)
        for scale in ("group", "none")  # none: REINFORCE++-baseline, centred, then whitened
        for baseline in ("mean", "leave_one_out")
        for estimator in ("bessel", "population", "leave_one_out")
        for placement in ("std", "sqrt")
        for epsilon in WHITENING_EPSILONS
    ]
    for scale, baseline, estimator, placement, epsilon in forms:
        config = {
            **DEFAULTS,
            "baseline": baseline,
            "std_estimator": estimator,
            "advantage_epsilon_placement": placement,
            "advantage_epsilon": epsilon,
            "advantage_whitening": "batch",
        }
        fitted = conventions.advantages(rewards, 4, config, scale).double()
        # atol 1e-4: a reward rescaled in fp32 first (AReaL's (r - 0.5) * 10) shifts
        # these O(1) values by ~3e-5; the neighbouring epsilons differ by >= 4e-4
        if not torch.allclose(seen, fitted, rtol=1e-4, atol=1e-4):
            continue
        if scale == "none":
            profile.set("scale_rewards", "none", "A = r - baseline, then over the batch")
        _set_baseline(profile, baseline)
        how = "A = (r - baseline) / f(std) fits this std, then over the batch"
        profile.set("std_estimator", estimator, how)
        words = conventions.epsilon_words(placement, epsilon)
        profile.set("advantage_epsilon", epsilon, f"fitted: {words}")
        profile.set("advantage_epsilon_placement", placement, "fitted with the epsilon")
        how = "the group formula's advantages centred and divided by their batch std"
        profile.set("advantage_whitening", "batch", how)
        return True
    return False


def probe_masking(candidate, profile: Profile) -> None:
    """Whether rows without EOS are dropped, and whether the EOS token itself is kept."""
    import torch

    fn = candidate.functions.get("completion_mask")
    if fn is None:
        return
    ids = torch.tensor([[5, 6, 1, 1], [5, 6, 7, 8]])  # pad == EOS == 1 in row 0; row 1 truncated
    mask = fn(ids, [1]).detach().int().tolist()
    if mask[0] != [1, 1, 1, 0]:
        profile.findings.append(
            f"masking: ids [5, 6, EOS, EOS] with pad == EOS give mask {mask[0]}, not [1, 1, 1, 0]"
            " (the EOS token gets no gradient, or padding is trained on)"
        )
    if mask[0] == [1, 1, 1, 0]:  # the first EOS ends a row; does a second id end one too?
        try:
            two = fn(torch.tensor([[5, 9, 6, 7]]), [1, 9]).detach().int().tolist()[0]
        except NotImplementedError:  # a shim that refuses several ids: its checks skip
            two = None
        if two == [1, 1, 1, 1]:
            profile.set(
                "eos_token_ids",
                "first",
                "ids [5, 9, 6, 7] with EOS ids [1, 9] give an all-1 mask: only the first id ends"
                " a completion",
            )
    dropped = mask[1] == [0, 0, 0, 0]
    if dropped:
        profile.set("mask_truncated_completions", True, "a row without EOS is all 0")
    if _takes(fn, "mask_truncated_completions"):  # a truncation rule of the team's own
        try:
            other = fn(ids, [1], mask_truncated_completions=not dropped).detach().int().tolist()
        except (TypeError, ValueError, KeyError, NotImplementedError):
            return
        if other == mask:
            how = f"mask_truncated_completions={not dropped} changes nothing"
            profile.restrict("mask_truncated_completions", [dropped], how)


def probe_loss(candidate, profile: Profile) -> None:
    """Aggregation, empty-row count and policy-loss form, from one on-policy call (and, when a
    fully masked row makes it non-finite, a finding and a second call without that row)."""
    import math

    import torch

    from checker import conventions
    from checker.fixtures import unequal_mask

    fn = candidate.functions.get("compute_loss")
    if fn is None:
        return
    advantages = torch.tensor([-0.5, -1.25, -0.9, -0.8, -2.0])
    logps = -torch.rand(5, 6, generator=torch.Generator().manual_seed(0)) - 0.1
    leaf = logps.clone().requires_grad_(True)
    mask = unequal_mask([6, 3, 0, 5, 2], 6)  # one fully masked row
    value = float(fn(leaf, advantages, mask))
    empty_row = math.isfinite(value)
    if not empty_row:  # measure the rest on rows that all count a token
        profile.findings.append(
            "loss_aggregation: a fully masked row gives a non-finite loss: a row's token count"
            " of 0 is divided by (TRL clamps it to >= 1); if your trainer never builds one"
            " (every completion counts at least its EOS, none is masked out whole), declare"
            " empty_rows: never"
        )
        mask = unequal_mask([6, 3, 4, 5, 2], 6)
        value = float(fn(leaf, advantages, mask))
    a = advantages.double().unsqueeze(1).expand(5, 6)
    rules = {
        "grpo": {"loss_type": "grpo"},
        "bnpo": {"loss_type": "dapo"},
        "dr_grpo": {"loss_type": "dr_grpo"},
        "seq-sum": {"loss_agg_mode": "seq-mean-token-sum"},
        "sum": {"loss_agg_mode": "token-sum"},
    }
    for form, token_loss in (("clipped", -a), ("reinforce", -a * logps.double())):
        for rule, declared in rules.items():
            for empty_rows in ("counted", "excluded"):
                expected = float(
                    conventions.aggregate(token_loss, mask, rule, empty_rows=empty_rows)
                )
                if abs(value - expected) <= 1e-5 * max(1.0, abs(expected)):
                    named = (
                        "token-mean (dapo's with this batch's tokens)" if rule == "bnpo" else rule
                    )
                    for key, chosen in declared.items():
                        profile.set(key, chosen, f"loss value equals the {named} formula")
                    if rule in conventions.ROW_MEAN_RULES and empty_row:
                        profile.set("empty_rows", empty_rows, _EMPTY_ROWS_HOW[empty_rows])
                    if form == "reinforce":
                        profile.set("policy_loss", "reinforce", "loss = -A * logp aggregated")
                    else:
                        _probe_old_ignored(fn, profile)
                        _probe_drift_penalty(fn, profile)
                    _probe_ignored_loss_options(
                        fn, candidate, profile, rule, (logps, advantages, mask)
                    )
                    if not empty_row:
                        return  # an all-masked batch fails for the same reason: one finding
                    _probe_row_mean_empty_row(fn, candidate, profile, (leaf, advantages, mask))
                    if rule not in conventions.ROW_MEAN_RULES:
                        _probe_empty_rows(fn, profile, form, (leaf, advantages, mask))
                    _probe_empty_batch(fn, profile)
                    return
    profile.findings.append(f"loss_aggregation: loss {value:.6g} matches no known aggregation")


def _probe_row_mean_empty_row(fn, candidate, profile: Profile, inputs) -> None:
    """A loss whose own aggregation never divides by a row's count (dr_grpo, a token mean) can
    still divide 0 by 0 on an empty row under grpo's row means, which the checks also run
    (oat's masked_mean): the same finding as for the own loss, naming grpo."""
    import math

    own = candidate.config["loss_type"]
    if own in ("grpo", "sapo") or not _takes(fn, "loss_type"):
        return
    if "grpo" not in candidate.supported.get("loss_type", ["grpo"]):
        return
    seen = _loss_and_grad(fn, *inputs, loss_type="grpo")
    if seen is not None and not math.isfinite(float(seen[0])):
        profile.findings.append(
            "loss_aggregation: with loss_type=grpo a fully masked row gives a non-finite loss: its"
            " token count of 0 is divided by (TRL clamps it to >= 1); if your trainer never builds"
            " one (every completion counts at least its EOS, none is masked out whole), declare"
            " empty_rows: never"
        )


def _loss_and_grad(fn, logps, advantages, mask, **kwargs):
    """The candidate's loss and dL/dlogp (zeros where no gradient reaches), or None when it
    rejects the keywords the way a trainer rejects an option it does not implement."""
    import torch

    leaf = logps.detach().clone().requires_grad_(True)
    try:
        loss = fn(leaf, advantages, mask, **kwargs)
    except (TypeError, ValueError, KeyError, NotImplementedError):
        return None  # (TypeError: **kwargs passed on to a function that does not take it)
    grad = None
    if loss.requires_grad:
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
    return loss.detach(), torch.zeros_like(leaf) if grad is None else grad


def _unchanged(base, other) -> bool:
    import torch

    return other is not None and all(torch.equal(a, b) for a, b in zip(base, other, strict=True))


def _probe_ignored_loss_options(fn, candidate, profile: Profile, rule: str, inputs) -> None:
    """Options the loss takes and ignores (a trainer's own `_compute_loss` that implements one
    aggregation, one ratio level, no ratio cap): `supported:` pins each to the value the loss
    implements, so the checks of the others skip instead of failing a loss that never claimed
    them. Each is measured where TRL's formulas differ: loss types on unequal lengths with an
    empty row, the ratio level and the cap `delta` off policy. An ignored `loss_type` also makes
    the measured aggregation the candidate's whatever loss_type says (`loss_agg_mode`)."""
    import torch

    from checker import conventions
    from reference_impl.protocol import CLIPPED_LOSS_TYPES

    logps, advantages, mask = inputs
    config, supported = candidate.config, candidate.supported
    base = _loss_and_grad(fn, logps, advantages, mask)
    if base is None:
        return
    local_count = False  # the token mean ignores num_items_in_batch: bnpo, not dapo
    if rule == "bnpo" and _takes(fn, "num_items_in_batch"):
        # dapo's normaliser is num_items_in_batch, bnpo's the local token count: equal here
        doubled = _loss_and_grad(fn, logps, advantages, mask, num_items_in_batch=2 * mask.sum())
        local_count = _unchanged(base, doubled)
        if not local_count:
            rule = "dapo"
    bnpo_taken = "bnpo" in supported.get("loss_type", ["bnpo"])
    if local_count and bnpo_taken and profile.conventions.get("loss_type") == "dapo":
        profile.set("loss_type", "bnpo", "the token mean ignores num_items_in_batch")
    own = config["loss_type"]
    if _takes(fn, "loss_type"):
        others = [t for t in CLIPPED_LOSS_TYPES if t != own]
        others = [t for t in others if t in supported.get("loss_type", others)]
        seen = [_loss_and_grad(fn, logps, advantages, mask, loss_type=t) for t in others]
        ran = [s for s in seen if s is not None]
        if len(ran) >= 2 and all(_unchanged(base, s) for s in ran):
            profile.restrict("loss_type", [own], f"loss_type {', '.join(others)} change nothing")
            profile.conventions.pop("loss_type", None)
            profile.evidence.pop("loss_type", None)
            if rule != conventions.aggregation_rule(config) and _chosen(
                candidate, profile, "loss_type"
            ):
                profile.findings.append(
                    f"loss_aggregation: loss_type={own!r} is set but changes nothing: the loss"
                    f" is the {rule} formula whatever loss_type says"
                )
            elif rule != conventions.aggregation_rule(config):
                mode = {v: k for k, v in conventions.AGG_MODE_RULES.items()}.get(rule)
                if mode:
                    how = f"the loss is the {rule} formula whatever loss_type says"
                    profile.set("loss_agg_mode", mode, how)
    if profile.conventions.get("policy_loss") in ("reinforce", "on_policy"):
        return  # no ratio: nothing for a ratio level or a cap to change
    if not _takes(fn, "old_per_token_logps"):
        return
    _probe_ratio_level(fn, candidate, profile, inputs)
    _probe_ignored_ratio_level(fn, candidate, profile, inputs)
    # Off policy, a row at ratio 3.0 with A < 0: the unclipped term is in force there, so a cap
    # of 1.5 would bind; a loss without a cap is pinned to none.
    if config["delta"] is not None or not _takes(fn, "delta"):
        return
    if 1.5 not in supported.get("delta", [1.5]):
        return  # the release has no cap: its checks skip already
    ratios = torch.ones_like(logps)
    ratios[0] = 3.0  # the whole row, so that a sequence-level (GSPO) ratio is 3 too
    old = logps - ratios.log()
    uncapped = _loss_and_grad(fn, logps, advantages, mask, old_per_token_logps=old)
    capped = _loss_and_grad(fn, logps, advantages, mask, old_per_token_logps=old, delta=1.5)
    if uncapped is not None and _unchanged(uncapped, capped):
        profile.restrict("delta", [None], "delta=1.5 changes nothing at ratio 3 with A < 0")


def _band_ratios(logps):
    """Per-token ratios 0.9..1.1, inside every clip band, unequal within each row (so a token's
    ratio and its row's geometric mean differ)."""
    import torch

    return 0.9 + 0.2 * torch.rand(logps.shape, generator=torch.Generator().manual_seed(8))


def _ratio_level(fn, inputs) -> str | None:
    """The importance ratio the loss implements, from (off-policy gradient) / (on-policy
    gradient) per token, inside the clip band with A < 0 (the normaliser cancels): the token's
    own ratio (token level), or its row's geometric mean ratio on every token (GSPO's sequence
    level); None when it is neither."""
    import torch

    logps, advantages, mask = inputs
    ratios = _band_ratios(logps)
    on_policy = _loss_and_grad(fn, logps, advantages, mask)
    off_policy = _loss_and_grad(
        fn, logps, advantages, mask, old_per_token_logps=logps - ratios.log()
    )
    if on_policy is None or off_policy is None:
        return None
    keep = mask.bool() & (on_policy[1] != 0)
    seen = (off_policy[1][keep] / on_policy[1][keep]).double()
    m = mask.double()
    row_mean_log = (ratios.double().log() * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)
    sequence = torch.exp(row_mean_log).expand_as(m)
    for level, expected in (("token", ratios.double()), ("sequence", sequence)):
        if torch.allclose(seen, expected[keep], rtol=1e-4):
            return level
    return None


def _probe_ratio_level(fn, candidate, profile: Profile, inputs) -> None:
    """importance_sampling_level as the loss implements it at its own default: GSPO's sequence
    ratio in a loss whose config says token (NeMo-RL's sequence_level_importance_ratios), unless
    the user's config chose the level (then the checks report the difference)."""
    level = _ratio_level(fn, inputs)
    own = candidate.config["importance_sampling_level"]
    if level and level != own and not _chosen(candidate, profile, "importance_sampling_level"):
        how = f"the off-policy gradient follows each {'row' if level == 'sequence' else 'token'}'s ratio"
        profile.set("importance_sampling_level", level, how)


def _probe_ignored_ratio_level(fn, candidate, profile: Profile, inputs) -> None:
    """A loss of one ratio level that takes importance_sampling_level and ignores it: pinned to
    the level it implements (measured, not the config's); a level the user set that it ignores
    is a finding."""
    logps, advantages, mask = inputs
    own = candidate.config["importance_sampling_level"]
    allowed = candidate.supported.get("importance_sampling_level", ["token", "sequence"])
    if not _takes(fn, "importance_sampling_level") or "sequence" not in allowed:
        return
    level = _ratio_level(fn, inputs)
    if level is None:
        return
    other = "sequence" if level == "token" else "token"
    old = {"old_per_token_logps": logps - _band_ratios(logps).log()}
    as_measured = _loss_and_grad(fn, logps, advantages, mask, **old)
    as_other = _loss_and_grad(fn, logps, advantages, mask, importance_sampling_level=other, **old)
    if as_measured is None or not _unchanged(as_measured, as_other):
        return
    if level != own and _chosen(candidate, profile, "importance_sampling_level"):
        profile.findings.append(
            f"ratio: importance_sampling_level={own!r} is set but changes nothing: the ratio is"
            f" per {level}"
        )
        return
    if level != own:
        profile.set("importance_sampling_level", level, f"the ratio is per {level}, always")
    profile.restrict("importance_sampling_level", [level], f"{other} level changes nothing")


def _chosen(candidate, profile: Profile, key: str) -> bool:
    """Whether the user set `key` (in the YAML's `config:`, or in a trainer's GRPOConfig) rather
    than left the release's default: code that ignores a chosen value is a bug, not a convention."""
    return key in candidate.spec.config or key in profile.config_set


# What each row count means, in the words a project's notes would use for it.
_EMPTY_ROWS_HOW = {
    "counted": "a fully masked row counts in the mean over the batch's rows (TRL)",
    "excluded": "the mean is over the rows with a counted token only, not over the whole batch"
    " (verl's agg_loss); TRL averages over every row",
}


def _probe_empty_rows(fn, profile: Profile, form: str, inputs) -> None:
    """empty_rows through the row-mean loss types the checks also test (grpo, dr_grpo), when the
    candidate's own aggregation has no row count to measure it by."""

    from checker import conventions

    if not _takes(fn, "loss_type"):
        return
    leaf, advantages, mask = inputs
    a = advantages.double().unsqueeze(1).expand_as(leaf)
    token_loss = -a * leaf.detach().double() if form == "reinforce" else -a
    for loss_type in ("grpo", "dr_grpo"):
        try:
            value = float(fn(leaf.detach().clone(), advantages, mask, loss_type=loss_type))
        except (TypeError, ValueError, KeyError, NotImplementedError):
            continue  # this loss type is not implemented: its checks skip too
        for empty_rows in ("counted", "excluded"):
            expected = float(
                conventions.aggregate(token_loss, mask, loss_type, empty_rows=empty_rows)
            )
            if abs(value - expected) <= 1e-5 * max(1.0, abs(expected)):
                how = f"loss_type={loss_type}: {_EMPTY_ROWS_HOW[empty_rows]}"
                profile.set("empty_rows", empty_rows, how)
                return


def _probe_old_ignored(fn, profile: Profile) -> None:
    """policy_loss: on_policy when old_per_token_logps changes neither the loss nor its gradient
    (ratios 0.5 and 1.5, far outside any clip band)."""
    import torch

    if not _takes(fn, "old_per_token_logps"):
        return
    logps = -torch.rand(2, 4, generator=torch.Generator().manual_seed(5)) - 0.1
    old = logps - torch.tensor([1.5, 0.5, 1.5, 0.5]).log()
    advantages, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 4)
    seen = []
    for kwargs in ({}, {"old_per_token_logps": old}):
        leaf = logps.clone().requires_grad_(True)
        loss = fn(leaf, advantages, mask, **kwargs)
        (grad,) = torch.autograd.grad(loss, leaf)
        seen.append((loss.detach(), grad))
    if torch.allclose(seen[0][0], seen[1][0]) and torch.allclose(seen[0][1], seen[1][1]):
        profile.set("policy_loss", "on_policy", "old_per_token_logps changes nothing")
        profile.findings.append(
            "ratio: compute_loss ignores old_per_token_logps (its ratio is exp(logp - sg(logp))):"
            " exact at one update per generation, but a second update on the same completions has"
            " no trust region (a latent limitation)"
        )


def _probe_drift_penalty(fn, profile: Profile) -> None:
    """drift_penalty: tau when, at A = 0 (no policy term) and beta = 0, the loss still moves
    with old_per_token_logps as tau * (logp - old)^2 per token weighted like the policy term
    (prime-rl's kl_tau): (its gradient) / (the on-policy gradient at A = -1) = 2 tau (logp - old)."""
    import torch

    if not _takes(fn, "old_per_token_logps") or "policy_loss" in profile.conventions:
        return
    logps = -torch.rand(2, 4, generator=torch.Generator().manual_seed(7)) - 0.1
    shift = torch.tensor([[0.1, -0.05, 0.08, -0.12], [0.06, -0.1, 0.04, -0.02]])
    mask = torch.ones(2, 4)
    no_kl = {"beta": 0.0} if _takes(fn, "beta") else {}
    on = _loss_and_grad(fn, logps, torch.full((2,), -1.0), mask, **no_kl)
    off = _loss_and_grad(
        fn, logps, torch.zeros(2), mask, old_per_token_logps=logps - shift, **no_kl
    )
    if on is None or off is None or not bool(off[1].abs().max() > 0):
        return
    per_token = off[1].double() / (2 * shift.double() * on[1].double())
    tau = float(per_token.median())
    if tau > 0 and torch.allclose(per_token, torch.full_like(per_token, tau), rtol=1e-3):
        how = "A = 0: gradient 2 tau (logp - old) per token, weighted like the policy term"
        profile.set("drift_penalty", float(f"{tau:.4g}"), how)
    else:
        profile.findings.append(
            "ratio: at A = 0 and beta = 0 the loss still moves with old_per_token_logps, but not"
            " as tau * (logp - old)^2 weighted like the policy term (a drift penalty of a form no"
            " convention declares)"
        )


def probe_kl_loss(candidate, profile: Profile) -> None:
    """use_bias_correction_kl and kl_aggregation from the on-policy KL gradient (A = 0,
    ref - logp = 0.4: beta * (1 - e^d), plus beta * k3 when corrected, per unit of the policy
    term's token weight, or of a verl aggregation's weights for a KL aggregated apart), then
    kl_weight from the value at ratio 1.5."""
    import math

    import torch

    from checker import conventions

    fn = candidate.functions.get("compute_loss")
    if fn is None or not (_takes(fn, "beta") and _takes(fn, "ref_per_token_logps")):
        return
    estimator = profile.conventions.get("kl_estimator", "k3")
    beta, d = 0.1, 0.4
    logps = -torch.rand(3, 5, generator=torch.Generator().manual_seed(6)) - 0.1
    # unequal lengths, so that a token mean and a mean of row means weight tokens differently
    mask = torch.tensor([[1.0] * 5, [1.0] * 2 + [0.0] * 3, [1.0] * 4 + [0.0]])
    keep = mask.bool()

    def loss_and_grad(advantage: float, **kwargs):
        leaf = logps.clone().requires_grad_(True)
        loss = fn(leaf, torch.full((3,), advantage), mask, **kwargs)
        (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True)
        return float(loss), torch.zeros_like(leaf) if grad is None else grad.double()

    norm, weights = loss_and_grad(-1.0)
    try:
        value, grad = loss_and_grad(0.0, beta=beta, ref_per_token_logps=logps + d)
    except TypeError:  # **kwargs passed on to a loss without a KL term
        return
    if value == 0.0 and not grad.any():
        return  # no KL term in the loss (kl_placement: reward, or beta ignored)
    if not (weights[keep] != 0).all():
        return  # a policy term with tokens of no weight: nothing to measure the KL against
    per_weight = grad[keep] / weights[keep]
    plain = beta * float(conventions.kl_gradient(d, estimator))
    corrected = plain + beta * float(conventions.kl_value(d, estimator))
    mode = _kl_aggregation(mask, weights, per_weight, (plain, corrected))
    if mode is not None:
        kl_weights = conventions.aggregation_weights(mask, conventions.AGG_MODE_RULES[mode])
        how = "the KL gradient weights tokens apart from the policy term"
        profile.set("kl_aggregation", mode, how)
        per_weight = grad[keep] / kl_weights[keep]
        norm = float(kl_weights.sum())  # the KL term's total weight, for the value at ratio 1.5

    def pin_if_ignored(measured: bool) -> None:
        """A loss of the team's own takes use_bias_correction_kl and ignores it: pinned."""
        if not _takes(fn, "use_bias_correction_kl"):
            return
        kwargs = {"beta": beta, "ref_per_token_logps": logps + d}
        try:
            _, other = loss_and_grad(0.0, use_bias_correction_kl=not measured, **kwargs)
        except (TypeError, ValueError, KeyError, NotImplementedError):
            return
        if torch.equal(other, grad):
            how = f"use_bias_correction_kl={not measured} changes nothing"
            profile.restrict("use_bias_correction_kl", [measured], how)

    if torch.allclose(per_weight, torch.full_like(per_weight, plain), rtol=1e-4):
        profile.set("use_bias_correction_kl", False, "on-policy KL gradient is beta * dk/dlogp")
        pin_if_ignored(False)
        return
    if not torch.allclose(per_weight, torch.full_like(per_weight, corrected), rtol=1e-4):
        profile.findings.append(
            f"kl: the on-policy KL gradient per unit weight is {float(per_weight.mean()):.4g},"
            f" neither {plain:.4g} (uncorrected) nor {corrected:.4g} (bias-corrected {estimator})"
        )
        return
    profile.set("use_bias_correction_kl", True, "on-policy KL gradient gains beta * k")
    pin_if_ignored(True)
    clipped = profile.conventions.get("policy_loss", "clipped") == "clipped"
    if not (clipped and _takes(fn, "old_per_token_logps")):
        return
    r, k = 1.5, float(conventions.kl_value(d, estimator))
    shifted, _ = loss_and_grad(
        0.0, beta=beta, ref_per_token_logps=logps + d, old_per_token_logps=logps - math.log(r)
    )
    if abs(shifted / norm - beta * k) <= 1e-4 * beta * k:
        profile.set("kl_weight", "on_policy", "off policy the KL value is not ratio-weighted")


def _kl_aggregation(mask, weights, per_weight, slopes: tuple[float, float]) -> str | None:
    """The verl aggregation whose token weights (over the policy term's `weights`) make the KL
    gradient per unit of policy weight, `per_weight`, one of `slopes` on every token; None when
    the policy term's own weights do (the KL joins its aggregation) or when none does."""
    import torch

    from checker import conventions
    from reference_impl.protocol import LOSS_AGG_MODES

    keep = mask.bool()

    def uniform(relative: torch.Tensor) -> bool:
        return any(torch.allclose(per_weight, s * relative, rtol=1e-4) for s in slopes)

    if uniform(torch.ones_like(per_weight)):
        return None
    for mode in LOSS_AGG_MODES:
        kl_weights = conventions.aggregation_weights(mask, conventions.AGG_MODE_RULES[mode])
        if uniform(kl_weights[keep] / weights[keep]):
            return mode
    return None


def _probe_empty_batch(fn, profile: Profile) -> None:
    import torch

    try:
        empty = fn(-torch.rand(2, 3), torch.tensor([1.0, -1.0]), torch.zeros(2, 3))
    except ZeroDivisionError:  # the same 0 / 0, in Python's arithmetic on a counted int
        empty = float("nan")
    if not torch.isfinite(torch.as_tensor(empty)).all():
        profile.findings.append(
            "loss_aggregation: a batch whose every token is masked gives a NaN loss or a"
            " ZeroDivisionError (divides by 0; TRL clamps the count to >= 1 from 1.9.2, verl's"
            " token-mean does not): if intended, declare empty_batch_normaliser: unclamped"
        )


def probe_clipping(candidate, profile: Profile) -> None:
    """The clip range, from which tokens get zero gradient at ratios 0.40..1.60 (steps of 1e-4,
    so a bound such as 0.272 is read to its fourth decimal), then cispo's cap."""
    import inspect

    import torch

    fn = candidate.functions.get("compute_loss")
    if fn is None or profile.conventions.get("policy_loss") in ("reinforce", "on_policy"):
        return
    level = profile.conventions.get("importance_sampling_level")
    if (level or candidate.config["importance_sampling_level"]) == "sequence":
        return  # per-token ratios clip no GSPO row alike; the checks clip it at sequence level
    parameters = inspect.signature(fn).parameters
    if "old_per_token_logps" not in parameters:
        return
    steps = 12000
    # midway between the 4-decimal bounds: float32's error in exp(logp - old) is ~1e-7 of r
    ratios = 0.40005 + 1e-4 * torch.arange(steps, dtype=torch.float64)
    logps = -torch.rand(2, steps, generator=torch.Generator().manual_seed(1)) - 0.1
    old = (logps.double() - ratios.log()).float()
    leaf = logps.clone().requires_grad_(True)
    loss = fn(leaf, torch.tensor([1.0, -1.0]), torch.ones(2, steps), old_per_token_logps=old)
    (grad,) = torch.autograd.grad(loss, leaf)
    if profile.conventions.get("drift_penalty"):  # its gradient is no clipping's: take it out
        no_kl = {"beta": 0.0} if _takes(fn, "beta") else {}
        zero = torch.zeros(2)
        grad = (
            grad
            - _loss_and_grad(
                fn, logps, zero, torch.ones(2, steps), old_per_token_logps=old, **no_kl
            )[1]
        )
    clipped_high = ratios[grad[0] == 0]
    clipped_low = ratios[grad[1] == 0]
    if not (len(clipped_high) and len(clipped_low)):
        profile.findings.append(
            "clipping: no PPO ratio band: no ratio in 0.4..1.6 has its gradient clipped for"
            f" A {'> 0' if not len(clipped_high) else '< 0'}; a trust region of another form"
            " (DPPO's band on probability differences, say) is declared custom: {clipping: <why>}"
        )
        return
    # A band clips every ratio past its bound; a mask on something else (DPPO's probability
    # differences: which tokens it drops depends on each token's probability) leaves gaps.
    above = grad[0][ratios >= clipped_high.min()]
    below = grad[1][ratios <= clipped_low.max()]
    if bool((above != 0).any() or (below != 0).any()):
        profile.findings.append(
            "clipping: no PPO ratio band: the tokens with zero gradient are not every ratio past"
            " a bound (the trust region depends on more than the ratio: DPPO's band on"
            " probability differences, say); declare it custom: {clipping: <why>}"
        )
        return
    eps_high = round(float(clipped_high.min()) - 1.00005, 4)
    eps_low = round(0.99995 - float(clipped_low.max()), 4)
    profile.set("epsilon_low", eps_low, "largest A < 0 ratio with zero gradient")
    if "epsilon_high" not in parameters and not _takes_kwargs(parameters):
        profile.set("clipping", "symmetric", "compute_loss takes no epsilon_high")
    elif eps_high != eps_low:
        profile.set("epsilon_high", eps_high, "smallest A > 0 ratio with zero gradient")
    takes = {**candidate.supported, **profile.supported}.get("loss_type", ["cispo"])
    if "epsilon_high" in parameters and "cispo" in takes:
        _probe_cispo_cap(fn, profile, eps_low)
    if candidate.config["delta"] is None:
        _probe_dual_clip(fn, profile)


def _probe_dual_clip(fn, profile: Profile) -> None:
    """delta: the cap a loss puts on a negative advantage's ratio by default (dual-clip PPO's c,
    EasyR1's clip_ratio_dual 3.0), from the smallest ratio in 1.3..10 (steps of 1e-3) whose
    A < 0 token gets zero gradient; the band leaves those ratios' gradient on."""
    import torch

    steps = 8700
    ratios = 1.3005 + 1e-3 * torch.arange(steps, dtype=torch.float64)
    logps = -torch.rand(1, steps, generator=torch.Generator().manual_seed(3)) - 0.1
    old = (logps.double() - ratios.log()).float()
    seen = _loss_and_grad(
        fn, logps, torch.tensor([-1.0]), torch.ones(1, steps), old_per_token_logps=old
    )
    if seen is None:
        return
    grad = seen[1][0]
    if profile.conventions.get("drift_penalty"):  # its gradient is no cap's
        zero = _loss_and_grad(
            fn, logps, torch.zeros(1), torch.ones(1, steps), old_per_token_logps=old
        )
        grad = grad - zero[1][0]
    capped = ratios[grad == 0]
    if not len(capped) or bool((grad[ratios >= capped.min()] != 0).any()):
        return  # no cap, or zero gradients that are no cap's
    delta = round(float(capped.min()) - 0.0005, 3)
    profile.set("delta", delta, "smallest A < 0 ratio above the band with zero gradient")


def _probe_cispo_cap(fn, profile: Profile, epsilon_low: float) -> None:
    """cispo_cap from the weights cispo gives tokens at ratios 0.5, 1.5, 5.5 and 8 with
    epsilon_high = 5: 0.5, 1.5, 5, 5 (capped at epsilon_high, TRL); 0.5, 1.5, 5.5, 6 (capped at
    1 + epsilon_high); 1 - epsilon_low, 1.5, 5.5, 6 (clipped to the band on both sides,
    NeMo-RL). A PPO clip standing in (a loss that ignores loss_type) gives 0 at 8: nothing is set."""
    import torch

    logps = -torch.rand(1, 4, generator=torch.Generator().manual_seed(2)) - 0.1
    ratios = torch.tensor([[0.5, 1.5, 5.5, 8.0]])
    options = {"loss_type": "cispo", "epsilon_high": 5.0}
    mask, advantages = torch.ones(1, 4), torch.tensor([1.0])
    on = _loss_and_grad(fn, logps, advantages, mask, **options)
    off = _loss_and_grad(
        fn, logps, advantages, mask, old_per_token_logps=logps - ratios.log(), **options
    )
    if on is None or off is None or not on[1].all():
        return  # no cispo, or no gradient to compare weights with
    weights = (off[1] / on[1])[0].tolist()
    forms = {
        "one_plus_epsilon_high": (0.5, 1.5, 5.5, 6.0),
        "band": (1 - epsilon_low, 1.5, 5.5, 6.0),
    }
    for form, expected in forms.items():
        if all(abs(w - e) < 1e-3 for w, e in zip(weights, expected, strict=True)):
            profile.set("cispo_cap", form, f"cispo weights {', '.join(f'{e:g}' for e in expected)}")
            return


def _takes_kwargs(parameters) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _takes(fn, keyword: str) -> bool:
    """Whether `fn` accepts `keyword` (a signature it hides is taken to accept it)."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return keyword in parameters or _takes_kwargs(parameters)


def probe_kl(candidate, profile: Profile) -> None:
    """The KL estimator, from per_token_kl at d = ref - logp in {-0.5, 0.3, 3} (at 3, k3 is 16.1
    and verl's low_var_kl its clamp, 10); nothing when the candidate cannot compute it
    (NotImplementedError: a subclass's own loss whose KL term cannot be measured by value), as
    the per_token_kl checks then skip."""
    import torch

    from checker import conventions
    from reference_impl.protocol import KL_ESTIMATORS

    fn = candidate.functions.get("per_token_kl")
    if fn is None:
        return
    logps = torch.tensor([[-1.0, -2.0, -4.0]])
    d = torch.tensor([[-0.5, 0.3, 3.0]], dtype=torch.float64)
    try:
        seen = fn(logps, logps + d.float()).detach().double()
    except NotImplementedError:
        return
    for estimator in KL_ESTIMATORS:
        if torch.allclose(seen, conventions.kl_value(d, estimator), rtol=1e-5, atol=1e-7):
            profile.set("kl_estimator", estimator, "per_token_kl equals its formula")
            return
    for estimator in ("k3", "k1", "k2"):
        if torch.allclose(seen, -conventions.kl_value(d, estimator), rtol=1e-5, atol=1e-7):
            profile.findings.append(f"kl: per_token_kl is minus {estimator}: the KL is maximised")
            return
    profile.findings.append("kl: per_token_kl matches no known estimator")


def probe_logprobs(candidate, profile: Profile) -> None:
    """Log-probs must be <= 0; a scorer without a temperature samples at T = 1 only."""
    import torch

    fn = candidate.functions.get("selective_log_softmax")
    if fn is None:
        return
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(2))
    index = torch.randint(0, 5, (2, 3), generator=torch.Generator().manual_seed(3))
    if (fn(logits, index).detach() > 1e-6).any():
        profile.findings.append("logprobs: selective_log_softmax returns values > 0")
    scorers = ("selective_log_softmax", "completion_logps", "get_per_token_logps")
    provided = [name for name in scorers if candidate.functions.get(name) is not None]
    taking = [name for name in provided if _takes(candidate.functions[name], "temperature")]
    without = [name for name in provided if name not in taking]
    if without and not taking:
        profile.evidence["temperature"] = "not taken: scoring at T = 1 only (sample at T = 1)"
    elif without:
        profile.evidence["temperature"] = (
            f"not taken by {', '.join(without)} (checked at T = 1);"
            f" {', '.join(taking)} {'takes' if len(taking) == 1 else 'take'} it"
        )


def probe_update(candidate, profile: Profile) -> None:
    """zero_grad placement: equal rewards from stale .grad vs from .grad = None."""
    import torch

    from checker import fixtures

    fn = candidate.functions.get("grpo_step")
    if fn is None:
        return
    # token ids inside the tiny model's vocabulary (ids >= VOCAB raise in its embedding)
    ids = torch.randint(2, fixtures.VOCAB, (8, 4), generator=torch.Generator().manual_seed(4))
    prompts = torch.full((8, 2), 3)

    def moved(stale: bool) -> tuple[bool, bool]:
        policy, start = fixtures.tiny_model(), fixtures.tiny_model()
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.05)
        if stale:
            for p in policy.parameters():
                p.grad = torch.full_like(p, 0.3)
        fn(
            policy,
            optimizer,
            prompts,
            torch.ones_like(prompts),
            ids,
            torch.full((8,), 0.5),
            num_generations=4,
            eos_token_ids=[fixtures.EOS_ID],
        )
        change = max(
            float((p - q).abs().max())
            for p, q in zip(policy.parameters(), start.parameters(), strict=True)
        )
        cleared = all(p.grad is None or not p.grad.any() for p in policy.parameters())
        return change > 0, cleared

    if not moved(stale=True)[0]:
        profile.set("zero_grad", "before_backward", "stale .grad is not applied")
        return
    changed, cleared = moved(stale=False)
    if not changed and cleared:
        profile.set(
            "zero_grad", "after_step", "stale .grad applied, but .grad is cleared after step"
        )
    else:
        profile.findings.append("update: equal rewards still move the parameters (stale gradients)")


PROBES = (
    probe_rewards,
    probe_advantages,
    probe_masking,
    probe_logprobs,
    probe_loss,
    probe_clipping,
    probe_kl,
    probe_kl_loss,
    probe_update,
)
# A probe's findings and errors are reported under the stage it measures.
PROBE_STAGES = {"loss": "loss_aggregation", "kl_loss": "kl"}


def measure(candidate) -> Profile:
    """Run every probe; a probe whose call raises becomes a finding naming the function."""
    profile = Profile()
    adapter = sys.modules.get("checker.adapters.trl_adapter")
    if candidate.spec.trainer and adapter is not None:
        chosen = adapter.harness.chosen_config()
        profile.config_set = sorted(CONVENTION_ALIASES.get(k, k) for k in chosen)
    for probe in PROBES:
        try:
            probe(candidate, profile)
        except NotImplementedError:
            continue  # the candidate says it does not implement what this probe asked: not a bug
        except Exception as error:  # noqa: BLE001 - the candidate may raise anything
            text = " ".join(str(error).split())[:150]
            name = probe.__name__.removeprefix("probe_")
            profile.findings.append(
                f"{PROBE_STAGES.get(name, name)}: the candidate raised {type(error).__name__}: {text}"
            )
    profile.own = {k: candidate.config.get(k) for k in profile.conventions}
    return profile


def main() -> None:
    """Child: read a CandidateSpec as JSON, print the Profile as JSON on the saved stdout."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the candidate prints goes to stderr
    from checker.candidate import CandidateSpec, TargetError, load_candidate

    spec = CandidateSpec(**json.loads(sys.stdin.readline()))
    try:
        candidate = load_candidate(spec)
    except TargetError as error:
        protocol.write(json.dumps({"fatal": str(error)}))
        return
    protocol.write(json.dumps(asdict(measure(candidate))))
    protocol.flush()


# ---------------------------------------------------------------------------------------------
# Parent side


class ProfileError(Exception):
    """Nothing could be measured (exit status 2)."""


def run_profile(spec, timeout: float = PROFILE_TIMEOUT) -> Profile:
    """Measure `spec`'s conventions in a child process with a timeout."""
    from checker.sandbox import OFFLINE

    env = dict(os.environ, **OFFLINE)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "checker.profile"],
            input=json.dumps(asdict(spec)) + "\n",
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=spec.cwd,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise ProfileError(f"{spec.target}: profiling took longer than {timeout:.0f}s") from None
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise ProfileError(f"{spec.target}: the profiling process died: {tail[0][:200]}") from None
    if "fatal" in data:
        raise ProfileError(data["fatal"])
    return Profile(**data)


def declared(profile: Profile) -> dict[str, object]:
    """The measured conventions that differ from the candidate's own (TRL's defaults, or a
    trainer's release and config): what a YAML must declare."""
    own = {**DEFAULTS, **profile.own}
    return {k: v for k, v in profile.conventions.items() if own.get(k) != v}


def _relative_reference(reference: str, folder: Path) -> str:
    """`/abs/file.py:NAME` relative to `folder` (how a YAML names it); `module:NAME` as is."""
    left, _, name = reference.rpartition(":")
    if not left.endswith(".py"):
        return reference
    return f"{os.path.relpath(left, folder)}:{name}"


def yaml_text(spec, profile: Profile, write_path: Path) -> str:
    """The stage protocol's YAML form: path (relative to the YAML) or module, functions, config;
    for a GRPOTrainer subclass, `trainer` and its `grpo_config` (as given) instead of the first."""
    import yaml

    folder = write_path.resolve().parent
    document: dict[str, object] = {}
    if spec.trainer:
        document["trainer"] = _relative_reference(spec.trainer, folder)
        if isinstance(spec.grpo_config, str):
            document["grpo_config"] = _relative_reference(spec.grpo_config, folder)
        elif spec.grpo_config is not None:
            document["grpo_config"] = dict(spec.grpo_config)
    elif spec.path:
        document["path"] = os.path.relpath(spec.path, folder)
    else:
        document["module"] = spec.module
    if spec.renames:
        document["functions"] = dict(spec.renames)
    measured = declared(profile)
    if spec.trainer:  # what the trainer's GRPOConfig sets; a measured difference is a failure
        measured = {k: v for k, v in measured.items() if k not in profile.config_set}
    config = {**spec.config, **measured}
    if config:
        document["config"] = config
    supported = {**spec.supported, **profile.supported}
    if supported:
        document["supported"] = supported
    if profile.findings:
        document["findings"] = list(profile.findings)
    header = (
        "# Measured by `grpo-check profile`; review, commit, then run `grpo-check <this file>`.\n"
        "# Each of `findings` is reported as a failure by `grpo-check <this file>` until you fix\n"
        "# it and remove it here (or, where it says `declare KEY: VALUE`, declare that under\n"
        "# `config:` if it is your trainer's intent).\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False)


# A finding that a convention may explain ends "... declare KEY: VALUE" (see probe_loss).
_SUGGESTED = re.compile(r"declare (\w+): (\S+)$")


def finding_results(spec, stages: tuple[str, ...] = ()) -> list:
    """The YAML's `findings:` as failing results, one per finding, under the stage it names: a
    limitation profile measured stays in the report until the user removes it from the file,
    declares the convention the finding itself suggests, or declares its stage `custom` (then it
    is skipped, saying so)."""
    from checker.checks import CheckResult
    from reference_impl.protocol import STAGES

    results = []
    for finding in spec.findings:
        prefix = finding.split(":", 1)[0].strip()
        stage = prefix if prefix in STAGES else "rewards"
        if stages and stage not in stages:
            continue
        order = STAGES.index(stage) * 1000 + 999
        suggested = _SUGGESTED.search(finding)
        if suggested and str(spec.config.get(suggested[1])) == suggested[2]:
            message = f"profile finding settled by the declared {suggested[1]}: {suggested[2]}"
            status = "skip"
        elif stage in spec.custom:
            message = f"profile finding on a stage declared custom ({spec.custom[stage]})"
            status = "skip"
        else:
            message = f"profile finding kept in {spec.target}: {finding}"
            status = "fail"
        results.append(CheckResult(f"{stage}.profile_finding", stage, status, message, order=order))
    return results


if __name__ == "__main__":
    main()
