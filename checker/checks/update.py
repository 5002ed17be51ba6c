"""Stage `update` (extension): `grpo_step(policy, optimizer, ..., rewards, ...)`.

Rules: one step raises the probability of positive-
advantage completions relative to negative ones; parameters change; beta = 0 with equal rewards
changes nothing; the result equals the reference's step (zero_grad before backward, clip the grad
norm, optimizer.step); with num_iterations = 2 the old log-probs stay frozen, so the second pass
sees ratio != 1. Probed with plain SGD (no momentum, no weight decay) on the tiny model.
A loop that declares `zero_grad: after_step` starts from `.grad = None`, its own starting state
(stale gradients would be a test artefact, not its bug), and must leave the gradients cleared.
"""

from __future__ import annotations

import torch

import reference_impl
from checker import conventions, fixtures
from checker.checks import CheckFailure, Skip, check
from checker.checks._loss import skip_without_ratio
from checker.checks.context import Context, fmt
from reference_impl.protocol import COMPUTE_STAGES, DEFAULTS

G = 4


def _batch(ctx: Context):
    """Two prompts x G completions of unequal length, repeated in contiguous groups."""
    input_ids, attention_mask, mask, width = fixtures.scoring_batch(
        ctx.gen, [5, 3, 4, 2, 5, 1, 3, 4], [2] * 8
    )
    prompt_ids = input_ids[:, :2].clone()
    prompt_ids[G:] = prompt_ids[G]  # one prompt per group
    prompt_ids[:G] = prompt_ids[0]
    completion_ids = input_ids[:, 2:]
    return prompt_ids, torch.ones_like(prompt_ids), completion_ids


def _step(ctx: Context, fn, policy, completion_batch, rewards, lr=0.05, **kwargs):
    prompt_ids, prompt_mask, completion_ids = completion_batch
    optimizer = torch.optim.SGD(policy.parameters(), lr=lr)
    if ctx.config["zero_grad"] == "before_backward":
        for p in policy.parameters():  # stale gradients: a correct step zeroes them before backward
            p.grad = torch.full_like(p, 0.3)
    args = (policy, optimizer, prompt_ids, prompt_mask, completion_ids, rewards)
    common = {"num_generations": G, "eos_token_ids": [fixtures.EOS_ID]}
    if fn is None:
        return ctx.call("grpo_step", *args, **common, **kwargs)
    return fn(*args, **common, **kwargs)


# The TRL loss type whose aggregation equals a verl `loss_agg_mode` on a batch without empty rows.
AGG_MODE_LOSS_TYPES = {
    "token-mean": "bnpo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum-norm": "dr_grpo",
}


def _reference_step(ctx: Context, policy, completion_batch, rewards, lr=0.05, **kwargs):
    """The reference's step, configured like the candidate.

    Advantage conventions (epsilon, std estimator) enter through the rewards: the reference is
    given the candidate-convention advantages as rewards with scale_rewards "none", which leaves
    them unchanged (they are already centred per group).
    """
    options = {k: ctx.config[k] for k in ("loss_type", "epsilon_low", "epsilon_high", "delta")}
    options |= {
        "importance_sampling_level": ctx.config["importance_sampling_level"],
        "use_bias_correction_kl": ctx.config["use_bias_correction_kl"],
        "scale_rewards": ctx.config["scale_rewards"],
        # A trainer that filters overlong completions (DAPO) masks them in its step too.
        "mask_truncated_completions": ctx.config["mask_truncated_completions"],
    }
    mode = ctx.config["loss_agg_mode"]
    if mode:
        if mode not in AGG_MODE_LOSS_TYPES:
            raise Skip(f"loss_agg_mode: {mode} has no TRL loss type to step the reference with")
        options["loss_type"] = AGG_MODE_LOSS_TYPES[mode]
        options["max_completion_length"] = ctx.config["loss_scale_factor"]
    if not conventions.is_trl_advantage(ctx.config):
        rewards = ctx.ref_advantages(rewards, G)
        options["scale_rewards"] = "none"
    return _step(
        ctx, reference_impl.grpo_step, policy, completion_batch, rewards, lr, **options, **kwargs
    )


def _sequence_logps(policy, completion_batch) -> torch.Tensor:
    prompt_ids, prompt_mask, completion_ids = completion_batch
    mask = reference_impl.completion_mask(completion_ids, [fixtures.EOS_ID])
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([prompt_mask, mask], 1)
    with torch.no_grad():
        logps = reference_impl.get_per_token_logps(
            policy, input_ids, attention_mask, completion_ids.size(1)
        )
    return (logps * mask).sum(1).double()


def _max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(
        float((p - q).detach().abs().max())
        for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )


REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0])


@check("update", "grpo_step", depends_on=COMPUTE_STAGES, heavy=True)
def step_follows_advantages(ctx: Context) -> None:
    """After one grpo_step, sum_i A_i * (change of log pi(completion_i)) > 0: better completions gain probability."""
    policy = fixtures.tiny_model()
    data = _batch(ctx)
    before = _sequence_logps(policy, data)
    _step(ctx, None, policy, data, REWARDS, lr=0.01)
    change = _sequence_logps(policy, data) - before
    advantages = reference_impl.compute_advantages(REWARDS, G).double()
    score = float((advantages * change).sum())
    if not score > 0:
        raise CheckFailure(
            "sum_i A_i * delta log pi_i > 0",
            fmt(score),
            "the update moves against the advantages: the loss sign, or the optimizer, is wrong"
            if score < 0
            else "the parameters did not move: optimizer.step() skipped, or no gradient",
        )


@check("update", "grpo_step", depends_on=COMPUTE_STAGES, heavy=True)
def parameters_change(ctx: Context) -> None:
    """A grpo_step with unequal rewards changes the policy's parameters."""
    policy = fixtures.tiny_model()
    start = fixtures.tiny_model()
    _step(ctx, None, policy, _batch(ctx), REWARDS)
    if _max_param_diff(policy, start) == 0:
        raise CheckFailure(
            "changed parameters",
            "identical parameters",
            "optimizer.step() is never called, or the gradient never reaches the parameters",
        )


@check("update", "grpo_step", depends_on=COMPUTE_STAGES, heavy=True)
def equal_rewards_change_nothing(ctx: Context) -> None:
    """With beta = 0 and every reward equal (0.5), a grpo_step with plain SGD leaves the parameters unchanged."""
    policy = fixtures.tiny_model()
    start = fixtures.tiny_model()
    _step(ctx, None, policy, _batch(ctx), torch.full((8,), 0.5))
    moved = _max_param_diff(policy, start)
    if moved > 0:
        raise CheckFailure(
            "unchanged parameters (all advantages 0)",
            f"parameters moved by up to {fmt(moved)}",
            "stale gradients are applied (zero_grad missing before backward) or advantages are not centred",
        )


@check("update", "grpo_step", depends_on=COMPUTE_STAGES, heavy=True)
def step_matches_reference(ctx: Context) -> None:
    """One grpo_step (SGD lr 0.05, stale .grad filled in beforehand) gives the reference's parameters."""
    if (
        ctx.config["beta"] != DEFAULTS["beta"]
        or ctx.config["temperature"] != DEFAULTS["temperature"]
    ):
        raise Skip("the reference step runs at beta 0 and temperature 1, not the declared ones")
    policy, expected = fixtures.tiny_model(), fixtures.tiny_model()
    data = _batch(ctx)
    _step(ctx, None, policy, data, REWARDS)
    _reference_step(ctx, expected, data, REWARDS)
    diff = _max_param_diff(policy, expected)
    if diff > 1e-5:
        skipped = _max_param_diff(policy, fixtures.tiny_model()) == 0
        raise CheckFailure(
            "the reference's parameters after one step",
            f"max parameter difference {fmt(diff)}",
            "optimizer.step() is skipped"
            if skipped
            else "the step differs from the reference's: if every compute stage passes, check the order zero_grad -> backward -> clip_grad_norm(1.0) -> step",
        )


@check("update", "grpo_step", depends_on=COMPUTE_STAGES, heavy=True)
def old_logps_frozen_across_iterations(ctx: Context) -> None:
    """num_iterations = 2: the second pass uses the old log-probs of generation time (ratio != 1), as the reference does."""
    if (
        ctx.config["beta"] != DEFAULTS["beta"]
        or ctx.config["temperature"] != DEFAULTS["temperature"]
    ):
        raise Skip("the reference step runs at beta 0 and temperature 1, not the declared ones")
    skip_without_ratio(ctx, " across passes")
    policy, expected, recomputed = (fixtures.tiny_model() for _ in range(3))
    data = _batch(ctx)
    lr = 2.0  # large enough that the second pass sees ratios outside the clip band
    _step(ctx, None, policy, data, REWARDS, lr=lr, num_iterations=2)
    _reference_step(ctx, expected, data, REWARDS, lr=lr, num_iterations=2)
    for _ in range(2):
        _reference_step(ctx, recomputed, data, REWARDS, lr=lr, num_iterations=1)
    diff = _max_param_diff(policy, expected)
    separation = _max_param_diff(expected, recomputed)
    if diff > 1e-4 * max(1.0, separation):
        cause = "the second pass differs from the reference"
        if _max_param_diff(policy, recomputed) < 1e-5:
            cause = "old log-probs are recomputed every iteration, so the ratio stays 1"
        raise CheckFailure(
            "the reference's parameters after 2 iterations",
            f"max parameter difference {fmt(diff)} (frozen vs recomputed old differ by {fmt(separation)})",
            cause,
        )


@check("update", "grpo_step", depends_on=COMPUTE_STAGES, heavy=True)
def gradients_cleared_after_step(ctx: Context) -> None:
    """A loop declaring zero_grad: after_step leaves every .grad None or zero after grpo_step, so the next step starts clean."""
    ctx.skip_unless(
        "zero_grad", "after_step", why="stale gradients are tested by equal_rewards_change_nothing"
    )
    policy = fixtures.tiny_model()
    _step(ctx, None, policy, _batch(ctx), REWARDS)
    left = [float(p.grad.abs().max()) for p in policy.parameters() if p.grad is not None]
    if left and max(left) > 0:
        raise CheckFailure(
            "every .grad None or zero after the step",
            f"gradients up to {fmt(max(left))} left",
            "zero_grad is declared after step but never runs: the next step adds stale gradients",
        )
