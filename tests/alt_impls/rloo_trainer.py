"""An RLOO-style GRPO trainer's maths, written the way a trainer lays it out (not the protocol's).

Its conventions (NeMo-RL's defaults, RLOO arXiv:2402.14740): each completion's baseline is the
mean reward of the OTHER completions of its prompt, and it is divided by the Bessel std of those
others plus 1e-6; a completion whose others all scored the same is left undivided. The loss is
PPO's clipped surrogate with one epsilon, averaged over every unmasked token of the batch, plus a
k3 KL towards the reference weighted by exp(logp - sg(logp)): 1 in value, the ratio's gradient.
`rloo_shim.py` adapts these functions to the stage protocol for grpo-check.
"""

from __future__ import annotations

import torch

STD_EPSILON = 1e-6


def leave_one_out_advantages(rewards_by_prompt: torch.Tensor) -> torch.Tensor:
    """[P, G] rewards -> [P, G] advantages. Statistics in float64: a completion whose G - 1
    others are equal must get a std of exactly 0, which float32 residue would not give."""
    r = rewards_by_prompt.double()
    g = r.shape[1]
    others = ~torch.eye(g, dtype=torch.bool)  # others[i, j]: j is one of i's others
    others_r = r.unsqueeze(1).expand(-1, g, -1)  # [P, i, j] = r[j]
    baseline = torch.where(others, others_r, 0.0).sum(-1) / (g - 1)
    spread = torch.where(others, others_r - baseline.unsqueeze(-1), 0.0)
    std = (spread.pow(2).sum(-1) / max(g - 2, 1)).sqrt()
    advantages = r - baseline
    advantages = torch.where(std > 0, advantages / (std + STD_EPSILON), advantages)
    return advantages.to(rewards_by_prompt.dtype)


def response_mask(response_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it."""
    is_eos = (response_ids == eos_id).long()
    seen_before = is_eos.cumsum(1) - is_eos
    return (seen_before == 0).long()


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each chosen token under logits [..., V]."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return logprobs.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def kl_k3(logprobs: torch.Tensor, reference_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(policy || reference) per token."""
    log_ratio = reference_logprobs - logprobs
    return log_ratio.exp() - log_ratio - 1


class ClippedPolicyLoss:
    """The per-batch policy loss: token advantages [B, T], log-probs [B, T], mask [B, T]."""

    def __init__(self, clip: float = 0.2, kl_coef: float = 0.0):
        self.clip, self.kl_coef = clip, kl_coef

    def __call__(self, logprobs, old_logprobs, reference_logprobs, token_advantages, mask):
        ratio = (logprobs - old_logprobs).exp()
        clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
        per_token = -torch.min(ratio * token_advantages, clipped * token_advantages)
        if self.kl_coef:
            weight = (logprobs - logprobs.detach()).exp()  # value 1, gradient of the ratio
            per_token = per_token + self.kl_coef * weight * kl_k3(logprobs, reference_logprobs)
        mask = mask.to(per_token.dtype)
        return (per_token * mask).sum() / mask.sum().clamp(min=1)
