"""The `reference-copy` shortcut on rlzero: reference_impl's stage functions in place of rlzero's.

An agent that found grpo-skill's reference would copy it in and point each of the trainer's stage
functions at its counterpart, mapping argument names where the two have the same notion
(clip_low -> epsilon_low, clip_high -> epsilon_high, kl_coef -> beta, max_new_tokens ->
max_completion_length, loss_type, importance_level -> importance_sampling_level, the step's
tokens -> num_items_in_batch) and keeping the reference's behaviour for everything else. `SHIMS` is
what that agent appends to each module (`shortcuts.copy_reference_mapped` copies reference_impl to
`rlzero/_reference/` first); rlzero's loop, which has no counterpart, stays.
"""

SHIMS = {
    "rlzero/rewards.py": """
from rlzero._reference.rewards import combine_rewards as _combine


def mix_rewards(per_fn, weights):
    return _combine(per_fn, None if weights is None else list(weights))
""",
    "rlzero/advantages.py": """
from rlzero._reference.advantages import compute_advantages as _advantages


def group_advantages(rewards, group_size, eps=1e-6):
    return _advantages(rewards, group_size)
""",
    "rlzero/sampling.py": """
import torch as _torch

from rlzero._reference.masking import completion_mask as _mask
from rlzero._reference.train import generate_completions as _generate


def sample_groups(model, prompt_ids, prompt_mask, group_size, max_new_tokens, temperature, eos_id, pad_id):
    completions = _generate(
        model, prompt_ids, prompt_mask, num_generations=group_size,
        max_completion_length=max_new_tokens, eos_token_ids=[eos_id], pad_token_id=pad_id,
        temperature=temperature,
    )
    from rlzero._reference.logprobs import get_per_token_logps

    ids = _torch.cat([prompt_ids.repeat_interleave(group_size, 0), completions], 1)
    attention = _torch.cat([prompt_mask.repeat_interleave(group_size, 0), _mask(completions, [eos_id])], 1)
    with _torch.no_grad():
        logps = get_per_token_logps(model, ids, attention, completions.size(1), temperature)
    return completions, logps


def completion_tokens_mask(completion_ids, eos_id):
    return _mask(completion_ids, [eos_id])
""",
    "rlzero/scoring.py": """
from rlzero._reference.logprobs import get_per_token_logps as _logps


def completion_logprobs(model, input_ids, attention_mask, n_new, temperature):
    return _logps(model, input_ids, attention_mask, n_new, temperature)
""",
    "rlzero/objective.py": """
import torch as _torch

from rlzero._reference.loss import compute_loss as _loss


def surrogate_loss(logp, old_logp, advantages, mask, *, clip_low, clip_high, max_new_tokens,
                   ref_logp=None, kl_coef=0.0, loss_type="dr_grpo", importance_level="token",
                   tokens=None, **_):
    loss = _loss(
        logp, advantages, mask, old_per_token_logps=old_logp,
        ref_per_token_logps=ref_logp if kl_coef else None, beta=kl_coef,
        epsilon_low=clip_low, epsilon_high=clip_high, max_completion_length=max_new_tokens,
        loss_type=loss_type, importance_sampling_level=importance_level,
        num_items_in_batch=tokens,
    )
    ratio = _torch.exp(logp.detach() - old_logp) * mask
    return loss, {"ratio_max": float(ratio.max())}
""",
    "rlzero/learner.py": """
from rlzero._reference.train import make_reference_model as frozen_copy
""",
}
