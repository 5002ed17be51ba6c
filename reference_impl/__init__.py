"""A clear, CleanRL-style GRPO reference that matches TRL 1.16's GRPOTrainer stage by stage.

Every function of the stage protocol (shared spec `stage-protocol.md`) is importable from here::

    from reference_impl import compute_advantages, compute_loss, completion_mask
"""

from reference_impl.advantages import compute_advantages
from reference_impl.decode import strip_reasoning
from reference_impl.errors import GRPOInputError
from reference_impl.kl import per_token_kl
from reference_impl.logprobs import completion_logps, get_per_token_logps, selective_log_softmax
from reference_impl.loss import compute_loss
from reference_impl.masking import completion_mask
from reference_impl.rewards import combine_rewards
from reference_impl.train import generate_completions, grpo_step, make_reference_model

STAGE_FUNCTIONS = {
    "selective_log_softmax": "logprobs",
    "completion_logps": "logprobs",
    "get_per_token_logps": "logprobs",
    "completion_mask": "masking",
    "combine_rewards": "rewards",
    "compute_advantages": "advantages",
    "per_token_kl": "kl",
    "compute_loss": "loss_aggregation",
    "strip_reasoning": "decode",
}

# Optional trainer-level extension of the protocol: checks of the generation, reference_model
# and update stages of a from-scratch trainer.
EXTENSION_FUNCTIONS = {
    "generate_completions": "generation",
    "make_reference_model": "reference_model",
    "grpo_step": "update",
}

__all__ = [
    "EXTENSION_FUNCTIONS",
    "GRPOInputError",
    "STAGE_FUNCTIONS",
    "combine_rewards",
    "completion_logps",
    "completion_mask",
    "compute_advantages",
    "compute_loss",
    "generate_completions",
    "get_per_token_logps",
    "grpo_step",
    "make_reference_model",
    "per_token_kl",
    "selective_log_softmax",
    "strip_reasoning",
]
