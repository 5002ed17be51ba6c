"""The `verl` kind: verl's own `core_algos` functions behind the stage protocol.

Each protocol function translates the protocol's arguments into verl's config names and calls
verl's code, the way verl's actor does (`verl/workers/utils/losses.py`: the policy loss from
`get_policy_loss_fn(loss_mode)` aggregated with `loss_agg_mode`, plus `kl_loss_coef` times
`agg_loss(kl_penalty(logp, ref, kl_loss_type))`). Nothing of verl is reimplemented here.

Translations (protocol -> verl):
- `scale_rewards` "group"/"none" -> `norm_adv_by_std_in_grpo` True/False ("batch" has no verl form);
- `loss_type` -> (`loss_mode`, `loss_agg_mode`): grpo -> vanilla, seq-mean-token-mean; bnpo and
  dapo -> vanilla, token-mean (dapo's `num_items_in_batch` is `batch_num_tokens`); dr_grpo ->
  vanilla, seq-mean-token-sum-norm (`max_completion_length` is `loss_scale_factor`); cispo ->
  cispo, token-mean; sapo -> sapo (always seq-mean-token-mean);
- `importance_sampling_level="sequence"` -> `loss_mode` gspo;
- `epsilon_low`/`epsilon_high` -> `clip_ratio_low`/`clip_ratio_high`; `delta` -> the dual-clip
  `clip_ratio_c` (equal for both signs of A when delta > 1 + epsilon_high; None -> no cap);
- cispo's cap `epsilon_high` (TRL: min(r, eps_high)) -> verl's clamp(r, 1 - clip_ratio_low,
  1 + clip_ratio_high) with clip_ratio_low = 1 and clip_ratio_high = epsilon_high - 1;
- `beta` -> `kl_loss_coef` (`use_kl_loss` when nonzero), `kl_estimator` -> `kl_loss_type`.

verl's package `__init__` imports Ray (through `verl.protocol`), and `core_algos` imports verl's
worker configs, which import Ray too, so Ray must be importable; no Ray cluster is started.

Releases differ, and what the imported one has is read from its code, never its version number:
- 0.7+: `agg_loss` takes the batch's token count and `loss_scale_factor` (`global_batch_info`),
  skips fully masked rows, and its token-mean divides by the bare count (0 / 0 on an empty batch);
  cispo and sapo are registered loss modes.
- 0.6: `ActorConfig` without those fields; `agg_loss(loss_mat, loss_mask, loss_agg_mode)` skips
  fully masked rows and divides every mean by its count + 1e-8 (so an empty batch gives 0); its
  seq-mean-token-sum-norm is the masked sum over T, not over B * T as TRL's dr_grpo and verl 0.7+
  divide, so no verl mode stands for dr_grpo; the modes are vanilla and gspo.
- 0.4 and 0.5: no `ActorConfig` (`compute_policy_loss` takes the clip ranges as arguments, and has
  no gspo); `agg_loss`'s row means count every row and divide by the bare token count, so a fully
  masked row is 0 / 0. verl never builds one (a response counts at least its stop token), which
  is the protocol's `empty_rows: never`.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

import numpy as np
import torch
from verl.trainer.ppo import core_algos

try:
    from verl.workers.config import ActorConfig
except ImportError:  # verl before 0.6: the policy loss takes its clip ranges as arguments
    ActorConfig = None

# What the imported release has (see the module docstring).
AGG_TAKES_BATCH_INFO = "loss_scale_factor" in inspect.signature(core_algos.agg_loss).parameters
REGISTERED = set(getattr(core_algos, "POLICY_LOSS_REGISTRY", {}))
SKIPS_EMPTY_ROWS = "exclude fully masked sequences" in inspect.getsource(core_algos.agg_loss)

# verl's own defaults, as the stage protocol's conventions (ActorConfig, AlgoConfig and
# compute_grpo_outcome_advantage's signature; the same in 0.4-0.9 but for the empty-row and
# empty-batch rows, which follow agg_loss).
CONVENTIONS = {
    "loss_type": "dapo",  # loss_mode vanilla with loss_agg_mode token-mean
    "epsilon_low": 0.2,  # clip_ratio_low
    "epsilon_high": 0.2,  # clip_ratio_high
    "delta": 3.0,  # clip_ratio_c, the dual-clip cap for A < 0
    "use_bias_correction_kl": False,  # kl_penalty is never multiplied by the ratio
    "advantage_epsilon": 1e-6,  # compute_grpo_outcome_advantage(epsilon=1e-6)
    "std_estimator": "bessel",  # torch.std
    "nan_rewards": "never",  # reward managers score failures as 0
    # agg_loss: "exclude fully masked sequences" (0.6+); before, the bare row count (see above)
    "empty_rows": "excluded" if SKIPS_EMPTY_ROWS else "never",
    # 0.7+'s token-mean divides by batch_num_tokens = loss_mask.sum() with no clamp, so a batch
    # without a response token is 0 / 0 (TRL's dapo did the same before 1.9.2); masked_mean's
    # count + 1e-8 before gives 0.
    "empty_batch_normaliser": "unclamped" if AGG_TAKES_BATCH_INFO else "clamped",
    "kl_estimator": "low_var_kl",  # ActorConfig.kl_loss_type
}

LOSS_TYPE_MODES = {
    "grpo": ("vanilla", "seq-mean-token-mean"),
    "bnpo": ("vanilla", "token-mean"),
    "dapo": ("vanilla", "token-mean"),
    "dr_grpo": ("vanilla", "seq-mean-token-sum-norm"),
    "cispo": ("cispo", "token-mean"),
    "sapo": ("sapo", "seq-mean-token-mean"),
}
# Loss modes that need no registry entry: vanilla is `compute_policy_loss` itself before 0.6.
_BUILT_IN = {"vanilla"}
SUPPORTED = {
    "scale_rewards": ["group", "none"],
    "loss_type": [
        loss_type
        for loss_type, (mode, agg_mode) in LOSS_TYPE_MODES.items()
        if mode in REGISTERED | _BUILT_IN
        and (AGG_TAKES_BATCH_INFO or agg_mode != "seq-mean-token-sum-norm")  # sum / T before 0.7
    ],
    "importance_sampling_level": ["token", "sequence"] if "gspo" in REGISTERED else ["token"],
}
if not AGG_TAKES_BATCH_INFO:  # dr_grpo divides by T, token-mean by this batch's tokens
    SUPPORTED |= {"max_completion_length": [None], "num_items_in_batch": [None]}


def _location(fn) -> str:
    """`verl/trainer/ppo/core_algos.py:LINE` of one of verl's functions."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(inspect.getsourcefile(fn))))
    file = os.path.relpath(inspect.getsourcefile(fn), os.path.dirname(package))
    return f"{file}:{inspect.getsourcelines(fn)[1]}"


def compute_advantages(rewards, num_generations, scale_rewards="group"):
    """verl's compute_grpo_outcome_advantage on one outcome reward per row."""
    if scale_rewards not in SUPPORTED["scale_rewards"]:
        raise ValueError(f"verl has no scale_rewards={scale_rewards!r}")
    n = rewards.numel()
    token_level = rewards.detach().clone().float().view(n, 1)
    index = np.repeat(np.arange(n // num_generations), num_generations)
    advantages, _ = core_algos.compute_grpo_outcome_advantage(
        token_level,
        torch.ones(n, 1),
        index,
        norm_adv_by_std_in_grpo=scale_rewards != "none",
    )
    return advantages.view(n)


def per_token_kl(per_token_logps, ref_per_token_logps, kl_estimator="low_var_kl"):
    """verl's kl_penalty with `kl_loss_type` = kl_estimator."""
    return core_algos.kl_penalty(per_token_logps, ref_per_token_logps, kl_estimator)


def compute_loss(
    per_token_logps,
    advantages,
    completion_mask,
    *,
    old_per_token_logps=None,
    ref_per_token_logps=None,
    loss_type="dapo",
    beta=0.0,
    epsilon_low=0.2,
    epsilon_high=None,
    delta=3.0,
    importance_sampling_level="token",
    max_completion_length=None,
    num_items_in_batch=None,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    kl_estimator="low_var_kl",
):
    """verl's policy loss plus its KL loss, as verl's actor composes them."""
    if loss_type not in LOSS_TYPE_MODES:
        raise ValueError(f"verl has no loss_type {loss_type!r}")
    loss_mode, agg_mode = LOSS_TYPE_MODES[loss_type]
    if importance_sampling_level == "sequence":
        if loss_mode != "vanilla":
            raise ValueError(f"verl's gspo is not combined with loss_type {loss_type!r}")
        loss_mode = "gspo"
    high = epsilon_low if epsilon_high is None else epsilon_high
    low = epsilon_low
    if loss_mode == "cispo":
        low, high = 1.0, high - 1.0
    cap = float("inf") if delta is None else delta
    info = {}  # agg_loss's batch-wide normalisers (0.7+; SUPPORTED keeps them None before)
    if agg_mode == "seq-mean-token-sum-norm" and max_completion_length is not None:
        info["loss_scale_factor"] = max_completion_length
    if loss_type in ("dapo", "cispo") and num_items_in_batch is not None:
        info["batch_num_tokens"] = num_items_in_batch
    mask = completion_mask.to(per_token_logps.dtype)
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1).expand_as(per_token_logps)
    if ActorConfig is None:  # before 0.6 (module docstring)
        loss = core_algos.compute_policy_loss(
            old, per_token_logps, advantages, mask, epsilon_low, low, high, cap, agg_mode
        )[0]
    else:
        fields = {
            "strategy": "fsdp",
            "ppo_micro_batch_size_per_gpu": 1,
            "rollout_n": 1,
            "clip_ratio": epsilon_low,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_c": cap,
            "loss_agg_mode": agg_mode,
            "loss_scale_factor": max_completion_length,
            "tau_pos": sapo_temperature_pos,
            "tau_neg": sapo_temperature_neg,
        }
        known = {field.name for field in dataclasses.fields(ActorConfig)}
        config = ActorConfig(**{k: v for k, v in fields.items() if k in known})
        if AGG_TAKES_BATCH_INFO:
            config.global_batch_info.update(info)
        loss, _ = core_algos.get_policy_loss_fn(loss_mode)(
            old_log_prob=old,
            log_prob=per_token_logps,
            advantages=advantages,
            response_mask=mask,
            loss_agg_mode=agg_mode,
            config=config,
        )
    if beta != 0.0:
        kld = core_algos.kl_penalty(per_token_logps, ref_per_token_logps, kl_estimator)
        loss = loss + beta * core_algos.agg_loss(kld, mask, agg_mode, **info)
    return loss


compute_advantages.grpo_check_location = _location(core_algos.compute_grpo_outcome_advantage)
per_token_kl.grpo_check_location = _location(
    getattr(core_algos, "kl_penalty_forward", core_algos.kl_penalty)  # split out in 0.6
)
compute_loss.grpo_check_location = _location(core_algos.agg_loss)
compute_loss.grpo_check_depends_on = ("ratio", "clipping", "kl")
