"""What differs between TRL releases 0.17 to 1.16, one small function per concern.

Each shim detects the feature on the imported `GRPOTrainer`, its module or `GRPOConfig` (a method,
a parameter, a config field), so that a fork is driven by what it has; where the feature cannot be
seen (a semantic change inside a method), the release number decides (`RELEASE`). The facts
behind each one are in the TRL releases' own `grpo_trainer.py` and `grpo_config.py`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import MISSING, fields
from functools import cache
from pathlib import Path
from typing import Any

import torch
import trl
import trl.trainer.grpo_trainer as grpo_module
from trl import GRPOTrainer

from checker.adapters import trl_version

RELEASE_TEXT = trl_version.version_of(Path(trl.__file__).resolve().parent.parent) or "unknown"
RELEASE = trl_version.parse(RELEASE_TEXT)

# 1.15+: GRPOTrainer scores through a fused LM head (`add_fused_lm_head`) whose arithmetic is in
# `trl/kernels/chunked_logprob.py`; before, through `trl.trainer.utils.selective_log_softmax`.
FUSED_LM_HEAD = hasattr(grpo_module, "add_fused_lm_head")

# 0.17-0.19: `_get_per_token_logps` returns a tensor; from 0.20 `_get_per_token_logps_and_entropies`
# returns (logps, entropies), from 1.7.1 (logps, entropies, aux_loss).
LOGPS_METHOD = next(
    name
    for name in ("_get_per_token_logps_and_entropies", "_get_per_token_logps")
    if hasattr(GRPOTrainer, name)
)

# A list of EOS ids (`self.eos_token_ids`, matched with torch.isin) only from 1.14.2; before, the
# mask ends at the tokenizer's one `eos_token_id`.
EOS_ID_LIST = RELEASE >= (1, 14, 2)


def config_fields(config_cls: type) -> set[str]:
    return {field.name for field in fields(config_cls)}


def config_defaults(config_cls: type) -> dict[str, Any]:
    """Each GRPOConfig field's default (fields with a default factory are left out)."""
    return {f.name: f.default for f in fields(config_cls) if f.default is not MISSING}


# ---------------------------------------------------------------------------------------------
# scoring


def call_logps(
    grpo: GRPOTrainer, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int
) -> torch.Tensor:
    """The release's scoring method on `model`: the per-token log-probs of the last `keep` tokens."""
    method = getattr(grpo, LOGPS_METHOD)
    if LOGPS_METHOD == "_get_per_token_logps":
        return method(model, input_ids, attention_mask, keep)
    out = method(model, input_ids, attention_mask, keep, compute_entropy=True)
    return out[0]


def logps_result(logps: torch.Tensor, like: tuple | torch.Tensor) -> tuple | torch.Tensor:
    """`logps` in the form the release's scoring method returns (`like` is one real return)."""
    if isinstance(like, torch.Tensor):
        return logps
    rest = (torch.zeros_like(logps.detach()),) + (None,) * (len(like) - 2)
    return (logps, *rest)[: len(like)]


def logprob_arithmetic() -> tuple[Callable, str]:
    """The function, and a marker of its line, where the release computes log p = z - logsumexp z."""
    if FUSED_LM_HEAD:
        from trl.kernels.chunked_logprob import ChunkedLogProbFunction

        return ChunkedLogProbFunction.forward, "logprobs = "
    # The fp32 branch's first assignment (the bf16 fallback comes after it).
    return grpo_module.selective_log_softmax, "per_token_logps = "


# ---------------------------------------------------------------------------------------------
# rewards and advantages


def scale_rewards_setting(scale_rewards: str, bool_releases: bool) -> str | bool:
    """The protocol's scale_rewards as the release takes it: a bool up to 0.21 (True = "group")."""
    if not bool_releases:
        return scale_rewards
    if scale_rewards == "batch":
        raise ValueError("scale_rewards='batch' needs TRL >= 0.22.2 (a bool before)")
    return scale_rewards == "group"


# ---------------------------------------------------------------------------------------------
# decode: a fork's own helper between the decoded completions and the reward functions

_TOKENIZER_ATTRIBUTES = {"processing_class", "tokenizer", "_tokenizer"}


@cache
def decode_helper() -> tuple[Callable, ast.Call] | None:
    """The module-level function the trainer decodes `completion_ids` with, if it is not TRL's.

    Stock TRL decodes with `self.processing_class.batch_decode(completion_ids, ...)` and hands the
    text to the reward functions; a fork may call its own helper there instead (SkillsBench's
    `completions_text = decode_and_strip_padding(completion_ids, self.processing_class)`). Found by
    reading `_generate_and_score_completions`: an assignment to `completions_text` or `completions`
    from a call of a plain name that takes `completion_ids`.
    """
    source = textwrap.dedent(inspect.getsource(GRPOTrainer._generate_and_score_completions))
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
        call = node.value
        if not targets & {"completions_text", "completions"} or not isinstance(call.func, ast.Name):
            continue
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if not any(isinstance(a, ast.Name) and a.id == "completion_ids" for a in arguments):
            continue
        helper = getattr(grpo_module, call.func.id, None)
        if callable(helper) and all(_drivable(a) for a in arguments):
            return helper, call
    return None


def _drivable(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "completion_ids"
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.attr in _TOKENIZER_ATTRIBUTES
    return isinstance(node, ast.Constant)


def call_decode_helper(
    helper: Callable, call: ast.Call, completion_ids: torch.Tensor, tokenizer: Any, **tags: str
) -> Any:
    """Call `helper` as the trainer does, with `completion_ids` and `tokenizer` for its arguments."""

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            return completion_ids
        if isinstance(node, ast.Attribute):
            return tokenizer
        return node.value

    keywords = {k.arg: value(k.value) for k in call.keywords if k.arg is not None}
    return helper(*(value(a) for a in call.args), **keywords, **tags)
