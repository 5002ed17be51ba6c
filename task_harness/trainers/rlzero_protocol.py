"""grpo-check's stage protocol over rlzero's own functions: the thin adapter a user would write.

`task_harness.difficulty` drops this file (as `grpo_protocol.py`, with `rlzero_protocol.yaml`
declaring rlzero's conventions) beside a task's `rlzero/` package and runs `grpo-check` on it, to
measure how much of a task the checker's own output reveals. Every function calls rlzero and
adds nothing of its own but argument mapping; what rlzero does not take (another loss type, a
second EOS id, truncation masking) is refused with NotImplementedError or TRL's `ValueError: Unknown ...`, so the checker skips those
checks.

The training loop is driven through `Learner.learn` on a rollout built here from the checker's
fixed completions, with the rollout's log-probs scored by rlzero: bugs inside `Learner.rollout`
(its own masking and layout of a real sampled batch) are out of this adapter's reach, as they
are out of reach of any check that feeds the trainer fixed completions.
"""

from __future__ import annotations

import inspect

import torch
from rlzero.advantages import group_advantages
from rlzero.config import RunConfig
from rlzero.learner import Learner, Rollout, frozen_copy
from rlzero.objective import surrogate_loss
from rlzero.rewards import mix_rewards
from rlzero.sampling import completion_tokens_mask, sample_groups
from rlzero.scoring import completion_logprobs

DEFAULTS = RunConfig()


def _one_eos(eos_token_ids: list[int]) -> int:
    if len(eos_token_ids) != 1:
        raise NotImplementedError(f"rlzero takes one EOS id, not {len(eos_token_ids)}")
    return int(eos_token_ids[0])


def combine_rewards(rewards_per_func: torch.Tensor, reward_weights=None) -> torch.Tensor:
    return mix_rewards(rewards_per_func, reward_weights)


def compute_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group"
) -> torch.Tensor:
    if scale_rewards != "group":
        raise ValueError(f"Unknown scale_rewards: {scale_rewards} (rlzero scales per group)")
    return group_advantages(rewards, num_generations, DEFAULTS.adv_eps)


def completion_mask(
    completion_ids: torch.Tensor, eos_token_ids: list[int], mask_truncated_completions=False
) -> torch.Tensor:
    if mask_truncated_completions:
        raise NotImplementedError("rlzero keeps truncated completions")
    return completion_tokens_mask(completion_ids, _one_eos(eos_token_ids))


def get_per_token_logps(model, input_ids, attention_mask, logits_to_keep, temperature=1.0):
    return completion_logprobs(model, input_ids, attention_mask, logits_to_keep, temperature)


def compute_loss(
    per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    old_per_token_logps: torch.Tensor | None = None,
    ref_per_token_logps: torch.Tensor | None = None,
    loss_type: str = "dr_grpo",
    beta: float = DEFAULTS.kl_coef,
    epsilon_low: float = DEFAULTS.clip_low,
    epsilon_high: float | None = DEFAULTS.clip_high,
    max_completion_length: int | None = None,
) -> torch.Tensor:
    if loss_type != "dr_grpo":
        raise ValueError(f"Unknown loss type: {loss_type} (rlzero's loss is dr_grpo's)")
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    loss, _ = surrogate_loss(
        per_token_logps,
        old,
        advantages,
        completion_mask,
        clip_low=epsilon_low,
        clip_high=epsilon_low if epsilon_high is None else epsilon_high,
        max_new_tokens=max_completion_length or per_token_logps.size(1),
        ref_logp=ref_per_token_logps,
        kl_coef=beta,
    )
    return loss


def generate_completions(
    model,
    prompt_ids,
    prompt_mask,
    *,
    num_generations,
    max_completion_length,
    eos_token_ids,
    pad_token_id,
    temperature=1.0,
):
    arguments = {
        "group_size": num_generations,
        "max_new_tokens": max_completion_length,
        "eos_id": _one_eos(eos_token_ids),
        "pad_id": pad_token_id,
    }
    # By name: a sampler that takes no temperature samples at 1, and the generation checks at
    # another temperature then fail (a wrong distribution), rather than stopping on a TypeError.
    if "temperature" in inspect.signature(sample_groups).parameters:
        arguments["temperature"] = temperature
    completions, _ = sample_groups(model, prompt_ids, prompt_mask, **arguments)
    return completions


def make_reference_model(policy):
    return frozen_copy(policy)


def grpo_step(
    policy,
    optimizer,
    prompt_ids,
    prompt_mask,
    completion_ids,
    rewards,
    *,
    num_generations,
    eos_token_ids,
    reference=None,
    temperature=1.0,
    num_iterations=1,
    max_grad_norm=1.0,
    metrics=None,
    **loss_kwargs,
) -> float:
    """One `Learner.learn` on the checker's rollout (old log-probs scored by rlzero, once)."""
    if loss_kwargs.pop("loss_type", "dr_grpo") != "dr_grpo":
        raise ValueError("Unknown loss type (rlzero's loss is dr_grpo's)")
    beta = loss_kwargs.pop("beta", DEFAULTS.kl_coef)
    cfg = RunConfig(
        group_size=num_generations,
        max_new_tokens=loss_kwargs.pop("max_completion_length", None) or completion_ids.size(1),
        temperature=temperature,
        passes=num_iterations,
        max_grad_norm=max_grad_norm,
        kl_coef=beta,
        clip_low=loss_kwargs.pop("epsilon_low", DEFAULTS.clip_low),
        clip_high=loss_kwargs.pop("epsilon_high", DEFAULTS.clip_high),
    )
    if loss_kwargs:
        raise ValueError(f"Unknown options for rlzero: {sorted(loss_kwargs)}")
    learner = Learner(cfg, policy, None, [])
    learner.optimizer = optimizer
    mask = completion_tokens_mask(completion_ids, _one_eos(eos_token_ids))
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([prompt_mask, mask], 1)
    n_new = completion_ids.size(1)
    with torch.no_grad():
        old = completion_logprobs(policy, input_ids, attention_mask, n_new, temperature) * mask
        ref = None
        if beta != 0.0:
            ref = completion_logprobs(reference, input_ids, attention_mask, n_new, temperature)
    advantages = group_advantages(rewards, num_generations, DEFAULTS.adv_eps)
    batch = Rollout(input_ids, attention_mask, mask, rewards, advantages, old, ref)
    loss, stats = learner.learn(batch)
    if metrics is not None:
        metrics["advantage_abs_mean"] = float(advantages.abs().mean())
        if "kl" in stats:
            metrics["kl"] = stats["kl"]
    return loss
