"""Driving a TRL release's GRPOTrainer (0.17 to 1.16) where its methods and fields differ.

One module for everything that builds a GRPOTrainer and calls into it: the checker's `trl` kind
(`checker/adapters/trl_shims.py`, `trl_trainer.py`) and the task verifier's probes (`trl_probes.py`,
which the verifier runs in a child beside a copy of this file and of `trl_semantics.py`, as it
ships `reference_impl` inside a task's `tests/`). Each function detects the feature on the trainer
or its config class (a method, an attribute, a field's type), so that a fork is driven by what it
has; what a release computes differently is decided by its number, in `trl_semantics.py`.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

# The scoring method: `_get_per_token_logps` returns a tensor up to 0.19; from 0.20
# `_get_per_token_logps_and_entropies` returns (logps, entropies), from 1.7.1 (logps, entropies,
# aux_loss).
SCORING_METHODS = ("_get_per_token_logps_and_entropies", "_get_per_token_logps")


def config_fields(config_cls: type) -> set[str]:
    """The GRPOConfig (or subclass) field names."""
    return {field.name for field in fields(config_cls)}


def config_defaults(config_cls: type) -> dict[str, Any]:
    """Each GRPOConfig field's default (fields with a default factory are left out)."""
    return {f.name: f.default for f in fields(config_cls) if f.default is not MISSING}


def bool_scale_rewards(config_cls: type) -> bool:
    """Up to 0.21 `scale_rewards` is a bool (True divides by the group std)."""
    return isinstance(config_defaults(config_cls).get("scale_rewards"), bool)


def scale_rewards_setting(scale_rewards: str, bool_releases: bool) -> str | bool:
    """The protocol's scale_rewards as the release takes it: a bool up to 0.21 (True = "group")."""
    if not bool_releases:
        return scale_rewards
    if scale_rewards == "batch":
        raise ValueError("scale_rewards='batch' needs TRL >= 0.22.2 (a bool before)")
    return scale_rewards == "group"


def offline_tokenizer(path: str | Path, pad_token: str | None = None) -> Any:
    """The saved tokenizer at `path`, returning only what a causal LM takes: TRL 0.21-0.26 pass
    every tokenizer output to `generate`, and transformers 4's Qwen2 refuses `token_type_ids`.
    `pad_token` replaces its pad token (`"<eos>"`: pad == EOS, as many chat models ship)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    if pad_token is not None:
        tokenizer.pad_token = pad_token
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    return tokenizer


def build(
    trainer_class: type,
    model: str | Path,
    args: Any,
    reward_funcs: list,
    prompts: list[str],
    tokenizer: Any,
) -> Any:
    """A `trainer_class` on the saved model folder `model`, trained on `prompts`, ready for its
    methods to be called outside `train()`: one gradient-accumulation step (`train()` sets
    `current_gradient_accumulation_steps`; `_compute_loss` divides by it from 0.23)."""
    from datasets import Dataset

    trainer = trainer_class(
        model=str(model),
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def scoring_method(trainer_class: type) -> str:
    """The name of the release's scoring method (SCORING_METHODS)."""
    return next(name for name in SCORING_METHODS if hasattr(trainer_class, name))


def score(
    trainer: Any,
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    keep: int,
    compute_entropy: bool = False,
) -> Any:
    """What the release's scoring method returns for the last `keep` tokens: a tensor before 0.20,
    then a tuple (with entropies when `compute_entropy`)."""
    name = scoring_method(type(trainer))
    method = getattr(trainer, name)
    if name == "_get_per_token_logps" or not compute_entropy:
        return method(model, input_ids, attention_mask, keep)
    return method(model, input_ids, attention_mask, keep, compute_entropy=True)


def logps_of(scored: Any) -> Any:
    """The per-token log-probs of a scoring method's return (SCORING_METHODS)."""
    return scored[0] if isinstance(scored, tuple) else scored


def eos_token_ids(trainer: Any) -> list[int]:
    """The ids that end a completion: `eos_token_ids` from 1.14.2, the tokenizer's one id before."""
    ids = getattr(trainer, "eos_token_ids", None)
    return [int(i) for i in ids] if ids else [int(trainer.processing_class.eos_token_id)]


def computes_rewards_in_method(trainer: Any) -> bool:
    """From 0.19.1 the rewards are computed in `_calculate_rewards`; before, inline in
    `_generate_and_score_completions`, which calls each reward function itself."""
    return hasattr(trainer, "_calculate_rewards")


def clear_logs(trainer: Any) -> None:
    """Drop the metrics and completion logs a driven call appended (they only grow otherwise);
    before 0.19 the completion logs are `_textual_logs`."""
    for mode in trainer._metrics.values():
        mode.clear()
    logs = getattr(trainer, "_logs", None) or getattr(trainer, "_textual_logs", {})
    for log in logs.values():
        if hasattr(log, "clear"):
            log.clear()
