"""A clear, CleanRL-style GRPO reference that matches TRL 1.16's GRPOTrainer stage by stage.

Every function of the stage protocol (`reference_impl/protocol.py` names them) is importable from
here::

    from reference_impl import compute_advantages, compute_loss, completion_mask

The functions are imported on first use, so that `import reference_impl.protocol` (the names
and defaults, which grpo-check's parent process reads) does not import torch.
"""

from importlib import import_module

from reference_impl.protocol import EXTENSION_FUNCTIONS, STAGE_FUNCTIONS

# Public name -> the module that defines it.
_DEFINED_IN = {
    "GRPOInputError": "errors",
    "combine_rewards": "rewards",
    "compute_advantages": "advantages",
    "selective_log_softmax": "logprobs",
    "completion_logps": "logprobs",
    "get_per_token_logps": "logprobs",
    "completion_mask": "masking",
    "per_token_kl": "kl",
    "compute_loss": "loss",
    "strip_reasoning": "decode",
    "generate_completions": "train",
    "make_reference_model": "train",
    "grpo_step": "train",
}


def __getattr__(name: str) -> object:
    if name not in _DEFINED_IN:
        raise AttributeError(f"module 'reference_impl' has no attribute {name!r}")
    value = getattr(import_module(f"reference_impl.{_DEFINED_IN[name]}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = ["EXTENSION_FUNCTIONS", "STAGE_FUNCTIONS", *_DEFINED_IN]
