"""Per-token log-probabilities (and entropies) of completions under a model."""

from __future__ import annotations

import torch


def completion_logits(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_new: int, temperature: float
) -> torch.Tensor:
    """The logits that predict each of the last `n_new` tokens of `input_ids`, [N, n_new, V] float.

    The logits at position j predict token j + 1. Dividing by the sampling temperature makes these
    the logits of the distribution the tokens were drawn from."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    return logits[:, -n_new - 1 : -1].float() / temperature


def completion_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_new: int, temperature: float
) -> torch.Tensor:
    """The log-probability of each of the last `n_new` tokens of `input_ids` under the
    distribution `completion_logits` gives for its position, [N, n_new]."""
    predicting = completion_logits(model, input_ids, attention_mask, n_new, temperature)
    targets = input_ids[:, -n_new:]
    picked = predicting.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(predicting, dim=-1)


@torch.no_grad()
def completion_entropy(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_new: int, temperature: float
) -> torch.Tensor:
    """The entropy of the distribution `completion_logits` gives at each of the last `n_new`
    positions, [N, n_new]; no gradient (it is only logged)."""
    logprobs = torch.log_softmax(
        completion_logits(model, input_ids, attention_mask, n_new, temperature), dim=-1
    )
    return -(logprobs.exp() * logprobs).sum(dim=-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of `values` over the positions `mask` counts (0 when it counts none)."""
    mask = mask.float()
    return float((values * mask).sum() / mask.sum().clamp(min=1))
