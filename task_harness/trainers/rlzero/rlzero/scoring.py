"""Per-token log-probabilities of completions under a model."""

from __future__ import annotations

import torch


def completion_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_new: int, temperature: float
) -> torch.Tensor:
    """log softmax(logits / temperature) of each of the last `n_new` tokens of `input_ids`, [N, n_new].

    The logits at position j predict token j + 1. Dividing by the sampling temperature makes these
    the log-probs of the distribution the tokens were drawn from."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    predicting = logits[:, -n_new - 1 : -1].float() / temperature
    targets = input_ids[:, -n_new:]
    picked = predicting.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(predicting, dim=-1)
