"""The GRPO stage protocol: stage names, function names and keyword defaults, in one place.

`reference_impl` implements every function named here; `grpo-check` accepts any module that
exposes some of them and checks each against the stage it belongs to; the debug tasks score bugs
by the same stages. This module imports nothing heavy (no torch), so that `grpo-check`'s parent
process, which never runs candidate code, can read it.

The defaults are TRL 1.16's `GRPOConfig` defaults (`trl/trainer/grpo_config.py`), with one
process, no gradient accumulation and one optimisation step per generation.
"""

from __future__ import annotations

# The pipeline's stages in the order data flows through them. Every check of `grpo-check` and
# every bug of a debug task belongs to exactly one; reports and diagnoses list them in this order.
STAGES = (
    "rewards",  # reward functions' outputs combined into one reward per completion
    "advantages",  # rewards -> group-relative advantages
    "logprobs",  # logits -> per-token log-probabilities at the sampling temperature
    "masking",  # which completion tokens count (up to and including the first EOS)
    "ratio",  # importance ratio between the current and the old policy
    "clipping",  # the clipped surrogate's trust region (epsilon_low/high, delta)
    "kl",  # the k3 penalty against the reference model
    "loss_aggregation",  # per-token losses -> one scalar (loss_type's normaliser)
    "decode",  # completion text -> what a reward function scores (reasoning stripped)
    "generation",  # sampling G completions per prompt
    "reference_model",  # the frozen copy the KL is measured against
    "update",  # backward pass, gradient clipping, optimizer step
)

# The stages whose functions compute the numbers that one update step consumes.
COMPUTE_STAGES = STAGES[: STAGES.index("loss_aggregation") + 1]

# Protocol function -> the stage its output belongs to. `compute_loss` covers ratio, clipping,
# kl and loss_aggregation; the checker tells them apart by which input it varies.
STAGE_FUNCTIONS = {
    "combine_rewards": "rewards",
    "compute_advantages": "advantages",
    "selective_log_softmax": "logprobs",
    "completion_logps": "logprobs",
    "get_per_token_logps": "logprobs",
    "completion_mask": "masking",
    "per_token_kl": "kl",
    "compute_loss": "loss_aggregation",
    "strip_reasoning": "decode",
}

# Optional trainer-level functions beyond the protocol's stage functions, so that the
# generation, reference_model and update stages of a from-scratch trainer can be checked too.
EXTENSION_FUNCTIONS = {
    "generate_completions": "generation",
    "make_reference_model": "reference_model",
    "grpo_step": "update",
}

PROTOCOL_FUNCTIONS = tuple(STAGE_FUNCTIONS)
ALL_FUNCTIONS = PROTOCOL_FUNCTIONS + tuple(EXTENSION_FUNCTIONS)

# `loss_type` values: the per-token objective and how per-token losses become one scalar.
# grpo: mean over rows of each row's token mean (DeepSeekMath, arXiv:2402.03300);
# bnpo: token sum / unmasked tokens of the micro-batch; dr_grpo: token sum / (B ·
# max_completion_length) (Dr. GRPO, arXiv:2503.20783); dapo: token sum / unmasked tokens of the
# whole batch (DAPO, arXiv:2503.14476); cispo: dapo's normaliser with a stop-gradient clipped
# weight (MiniMax-M1, arXiv:2506.13585); sapo: a soft sigmoid gate instead of the clip, grpo's
# normaliser (SAPO, arXiv:2511.20347).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")
# The loss types whose per-token objective is PPO's clipped surrogate; they differ only in how
# they aggregate.
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")

# `scale_rewards` values: what the centred reward is divided by (plus 1e-4): the group's std,
# the whole batch's std, or nothing (Dr. GRPO's recommendation).
SCALE_REWARDS = ("group", "batch", "none")

# `importance_sampling_level` values: one ratio per token, or one per sequence from the mean
# log-ratio over its tokens (GSPO, arXiv:2507.18071).
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")

# Keyword defaults of the protocol's functions. A candidate that implements other values
# declares them (`config:` in its YAML) and is compared with a reference configured the same way.
DEFAULTS: dict[str, object] = {
    # The per-token objective and its normaliser; TRL's default since 0.22.2 (bnpo before).
    "loss_type": "dapo",
    # Weight of the k3 KL penalty; 0 since TRL 0.19.1 (0.04 before), so no reference model.
    "beta": 0.0,
    # Lower clip range: the ratio is clipped at 1 - epsilon_low (PPO's 0.2).
    "epsilon_low": 0.2,
    # Upper clip range; None means epsilon_low (DAPO's clip-higher sets it larger).
    "epsilon_high": None,
    # Cap on the unclipped ratio (INTELLECT-2's two-sided clipping, arXiv:2505.07291); None means no cap.
    "delta": None,
    # One importance ratio per token, or one per sequence (GSPO).
    "importance_sampling_level": "token",
    # Multiply the per-token KL by the unclipped ratio (TRL's default since 1.10.0).
    "use_bias_correction_kl": True,
    # dr_grpo's constant normaliser; None means the completion length T of the batch.
    "max_completion_length": None,
    # dapo/cispo's normaliser, counted over the whole batch; None means this batch's mask sum.
    "num_items_in_batch": None,
    # SAPO's gate temperatures for positive and negative advantages.
    "sapo_temperature_pos": 1.0,
    "sapo_temperature_neg": 1.05,
    # What the centred rewards are divided by.
    "scale_rewards": "group",
    # Whether a completion that never emitted EOS is left out of the loss.
    "mask_truncated_completions": False,
    # Sampling temperature; scoring divides the logits by the same value.
    "temperature": 1.0,
}
