"""The stage protocol around `rloo_trainer.py`, whose functions take other inputs: the README's
worked example of a shim ("Writing a shim"). Each function converts the protocol's arguments,
calls the trainer's own code, and converts back; none changes its inputs."""

from __future__ import annotations

from rloo_trainer import (
    ClippedPolicyLoss,
    kl_k3,
    leave_one_out_advantages,
    response_mask,
    token_logprobs,
)


def compute_advantages(rewards, num_generations):
    """[N] rewards in contiguous groups of G -> [N]; the trainer works on [prompts, G]."""
    return leave_one_out_advantages(rewards.view(-1, num_generations)).reshape(-1)


def completion_mask(completion_ids, eos_token_ids):
    """The trainer takes one EOS id; a list of several is a case it does not implement."""
    if len(eos_token_ids) != 1:
        raise NotImplementedError("one EOS id only")
    return response_mask(completion_ids, eos_token_ids[0])


def selective_log_softmax(logits, index, temperature=1.0):
    """The trainer's scorer has no temperature: divide the logits first."""
    return token_logprobs(logits / temperature, index)


def per_token_kl(per_token_logps, ref_per_token_logps):
    return kl_k3(per_token_logps, ref_per_token_logps)


def compute_loss(
    per_token_logps,
    advantages,
    completion_mask,
    *,
    old_per_token_logps=None,
    ref_per_token_logps=None,
    beta=0.0,
    epsilon_low=0.2,
):
    """[B] advantages become the trainer's [B, T] token advantages; old=None means on policy."""
    if beta and ref_per_token_logps is None:
        raise ValueError("beta > 0 needs ref_per_token_logps")
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    ref = per_token_logps.detach() if ref_per_token_logps is None else ref_per_token_logps
    token_advantages = advantages.unsqueeze(1).expand_as(per_token_logps)
    loss = ClippedPolicyLoss(clip=epsilon_low, kl_coef=beta)
    return loss(per_token_logps, old, ref, token_advantages, completion_mask)


compute_loss.grpo_check_location = "rloo_trainer.py:58"  # failures point at the trainer's loss
