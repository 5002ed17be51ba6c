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

# Conventions that legitimately differ between trainers (verl, OpenRLHF, from-scratch loops). Each
# is a `config:` key of a candidate's YAML; its default in DEFAULTS is TRL 1.16's behaviour, and
# the checker compares a candidate with a reference configured the same way.
# Where the advantage epsilon goes: added to the std (TRL, verl), or inside the square root
# (r - mean) / sqrt(var + eps).
ADVANTAGE_EPSILON_PLACEMENTS = ("std", "sqrt")
# The baseline subtracted from a reward: the mean of its whole group (TRL, verl), or the mean of
# the G - 1 other members (leave-one-out, RLOO arXiv:2402.14740; NeMo-RL's default), which is
# exactly G / (G - 1) times the centred reward.
ADVANTAGE_BASELINES = ("mean", "leave_one_out")
# The std estimator of the group statistics: Bessel-corrected (n - 1, `torch.std`, TRL and verl),
# population (n, `np.std`; the two differ by exactly sqrt((G - 1) / G)), or leave-one-out: the
# Bessel std of the G - 1 other members (NeMo-RL), 0 when they are all equal, and then the centred
# reward is not divided (NeMo-RL: "don't sharpen the ones with no variation").
STD_ESTIMATORS = ("bessel", "population", "leave_one_out")
# A second normalisation after the group step: none (TRL), or the advantages centred and divided
# by their std over the whole batch, with the same std estimator (Bessel for leave_one_out) and
# epsilon (AReaL's GRPO default, adv_norm batch/batch; REINFORCE++-baseline, arXiv:2501.03262).
ADVANTAGE_WHITENINGS = ("none", "batch")
# The smallest spread of rewards (max - min) a group needs to be trained on: a group below it
# gets zero advantages, as if dropped (simple_GRPO skips a group whose rewards span < 1e-4, < 0.01 in its v1 variant; DAPO's
# dynamic sampling drops groups whose accuracy is all 0 or all 1, span 0, which TRL's formula
# already maps to 0). 0 drops nothing (TRL).
# NaN rewards (a reward function that returned None): left out of the statistics (TRL 1.6+), a
# row with no reward counted as 0 (TRL before 1.6), or never produced because failed scores
# become 0 upstream (verl, most from-scratch trainers).
NAN_REWARD_POLICIES = ("excluded", "zero", "never")
# How sequence-mean aggregations count fully masked rows: as rows contributing 0 (TRL divides by
# B), not at all (verl's `agg_loss` divides by the number of non-empty rows), or never built: a
# trainer whose every completion counts at least its stop token and that masks no row out whole
# (no truncation masking, no rejected rows kept in the batch) divides by the bare row count, and
# its loss is checked on batches without an empty row.
EMPTY_ROW_POLICIES = ("counted", "excluded", "never")
# What dapo / cispo divide by when the whole batch has no completion token: max(count, 1), so the
# loss is 0 (TRL from 1.9.2), or the bare count, so the loss is 0 / 0 = NaN (TRL before 1.9.2,
# verl's `agg_loss` token-mean).
EMPTY_BATCH_NORMALISERS = ("clamped", "unclamped")
# verl's `loss_agg_mode` names. token-mean is TRL's bnpo (dapo on one micro-batch),
# seq-mean-token-mean is grpo, seq-mean-token-sum-norm is dr_grpo (normaliser
# `loss_scale_factor`, None meaning T); seq-mean-token-sum and token-sum have no TRL name.
# OpenRLHF's per-sequence mean is seq-mean-token-mean and its token-level mean token-mean.
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
# KL estimators of log(pi / pi_ref) per token (Schulman, http://joschu.net/blog/kl-approx.html):
# k1 = logp - ref; k2 (= verl's mse) = (logp - ref)^2 / 2; k3 = exp(ref - logp) - (ref - logp) - 1
# (TRL); low_var_kl = k3 with ref - logp clamped to [-20, 20] and the value to [-10, 10] (verl);
# abs = |logp - ref|.
KL_ESTIMATORS = ("k3", "k1", "k2", "mse", "low_var_kl", "abs")
# How the per-token KL is aggregated when it is in the loss: None, token by token inside the
# policy term's aggregation (TRL gt:L3101-3110; verl's agg_loss with the policy's loss_agg_mode),
# or by a verl aggregation rule of its own, added apart from the policy term (OpenRLHF's
# `kl_loss = masked_mean(kl, action_mask)`, a token mean beside a per-sequence GSPO term).
KL_AGGREGATIONS = (None, *LOSS_AGG_MODES)
# How the loss types that change PPO's per-token form (cispo, sapo) are aggregated: by their
# own TRL rules (cispo's token mean over num_items_in_batch, sapo's row means), or the way the
# candidate aggregates its own loss (its loss_agg_mode, else its loss_type's rule): verl's actor,
# slime and AReaL pass a cispo or sapo loss through the aggregation their PPO loss takes. The
# loss types that differ from PPO's only in their aggregation (grpo, bnpo, dr_grpo, dapo) keep
# theirs either way.
FORM_AGGREGATIONS = ("loss_type", "own")
# Where the KL penalty goes: a per-token term of the loss (TRL, verl `use_kl_loss`), or a
# detached penalty on the reward (verl `use_kl_in_reward`, OpenRLHF), which the loss never sees.
KL_PLACEMENTS = ("loss", "reward")
# The policy-gradient term: PPO's clipped surrogate with an importance ratio (TRL; cispo and
# sapo are loss types, GSPO is importance_sampling_level="sequence", verl's dual-clip
# `clip_ratio_c` is `delta`), the REINFORCE form -A * logp with no ratio, whose gradient on
# policy equals the surrogate's while its value does not, or on-policy only:
# -A * exp(logp - sg(logp)), old log-probs and epsilon unused (torchtune's GRPOSimpleLoss), equal
# to the surrogate in value and gradient at one update per generation, with no trust region after.
POLICY_LOSSES = ("clipped", "reinforce", "on_policy")
# Where cispo caps its detached importance weight: at epsilon_high itself (TRL gt:L3110, which
# recommends 5.0); at 1 + epsilon_high, an offset from 1 like the clip band's epsilons (verl's
# clip_ratio_high, open-instruct's clip_higher); or clipped to the band on both sides,
# clip(r, 1 - epsilon_low, 1 + epsilon_high), as MiniMax-M1 (arXiv:2506.13585) writes it and
# NeMo-RL implements it.
CISPO_CAPS = ("epsilon_high", "one_plus_epsilon_high", "band")
# Whether the clip range can be asymmetric (epsilon_high != epsilon_low) or is one epsilon only.
CLIPPING_FORMS = ("asymmetric", "symmetric")
# What the bias-corrected KL (`use_bias_correction_kl`) is multiplied by: the unclipped ratio
# exp(logp - old) (TRL gt:L3104), or exp(logp - sg(logp)), 1 in value with the ratio's gradient
# (NeMo-RL's calculate_kl importance weight by default): the same on policy, unweighted values off it.
KL_WEIGHTS = ("ratio", "on_policy")
# Whether prompts of unequal length are left-padded into one batch that the attention mask
# carries (TRL), or never padded: one prompt per batch, repeated G times (simple_GRPO), so a
# scorer that passes no attention mask is right; its log-probs are then checked on prompts of
# equal length and with right padding only.
PROMPT_PADDINGS = ("left", "none")
# When the training loop clears gradients: before backward (TRL, via the HF Trainer), or after
# optimizer.step() (many from-scratch loops; equivalent when the loop starts from .grad = None).
ZERO_GRAD_PLACEMENTS = ("before_backward", "after_step")
# Which ids of a list of EOS ids end a completion: every one (TRL from 1.14.2 takes
# `generation_config.eos_token_id`, a list for chat models: <|im_end|> and <|endoftext|>), or the
# first only (a trainer that takes the tokenizer's one `eos_token_id`, as TRL did before; right
# for a model with one end token, wrong for one with several).
EOS_ID_POLICIES = ("all", "first")

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
    # -- conventions (see the tuples above); each default is TRL 1.16's behaviour --
    # Added to the std before dividing (gt:L2795); verl uses 1e-6, small loops 1e-8.
    "advantage_epsilon": 1e-4,
    "advantage_epsilon_placement": "std",
    "baseline": "mean",
    "std_estimator": "bessel",
    "min_reward_span": 0.0,
    "advantage_whitening": "none",
    "nan_rewards": "excluded",
    "empty_rows": "counted",
    "empty_batch_normaliser": "clamped",
    # None: the aggregation follows loss_type; a verl name overrides it.
    "loss_agg_mode": None,
    # cispo's and sapo's aggregation: their own (TRL), or the candidate's own loss's.
    "form_aggregation": "loss_type",
    # seq-mean-token-sum-norm's divisor; None means the completion length T.
    "loss_scale_factor": None,
    "kl_estimator": "k3",
    "kl_placement": "loss",
    # None: the KL joins the policy term's aggregation; a verl name aggregates it apart.
    "kl_aggregation": None,
    "kl_weight": "ratio",
    "policy_loss": "clipped",
    "clipping": "asymmetric",
    "cispo_cap": "epsilon_high",
    # Coefficient tau of a per-token penalty tau * (logp - old)^2 towards the sampling policy,
    # inside the policy term's aggregation (prime-rl's kl_tau, 1e-3 there; Kimi K2.5,
    # arXiv:2602.02276); TRL has none, so 0.
    "drift_penalty": 0.0,
    "prompt_padding": "left",
    "zero_grad": "before_backward",
    "eos_token_ids": "all",
}

# The allowed values of each convention that takes one of a fixed set.
CONVENTION_VALUES: dict[str, tuple] = {
    "loss_type": LOSS_TYPES,
    "scale_rewards": SCALE_REWARDS,
    "importance_sampling_level": IMPORTANCE_SAMPLING_LEVELS,
    "advantage_epsilon_placement": ADVANTAGE_EPSILON_PLACEMENTS,
    "baseline": ADVANTAGE_BASELINES,
    "std_estimator": STD_ESTIMATORS,
    "advantage_whitening": ADVANTAGE_WHITENINGS,
    "nan_rewards": NAN_REWARD_POLICIES,
    "empty_rows": EMPTY_ROW_POLICIES,
    "empty_batch_normaliser": EMPTY_BATCH_NORMALISERS,
    "loss_agg_mode": (None, *LOSS_AGG_MODES),
    "form_aggregation": FORM_AGGREGATIONS,
    "kl_estimator": KL_ESTIMATORS,
    "kl_placement": KL_PLACEMENTS,
    "kl_aggregation": KL_AGGREGATIONS,
    "kl_weight": KL_WEIGHTS,
    "policy_loss": POLICY_LOSSES,
    "clipping": CLIPPING_FORMS,
    "cispo_cap": CISPO_CAPS,
    "prompt_padding": PROMPT_PADDINGS,
    "zero_grad": ZERO_GRAD_PLACEMENTS,
    "eos_token_ids": EOS_ID_POLICIES,
}
