"""Stage `logprobs`: log pi(token | prefix) for each completion token, at the sampling temperature."""

from __future__ import annotations

import torch

from reference_impl.errors import GRPOInputError


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise GRPOInputError(f"temperature must be > 0, got {temperature}")


def selective_log_softmax(
    logits: torch.Tensor, index: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """`log_softmax(logits / T)` gathered at `index`; shape of `index`, every value <= 0.

    Computed in fp32 as `z[index] - logsumexp(z)` (TRL `trainer/utils.py:selective_log_softmax`).
    Dividing by T here as well as in sampling keeps the two distributions the same (TRL #3029).
    """
    _check_temperature(temperature)
    scaled = logits.float() / temperature
    picked = torch.gather(scaled, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1)


def completion_logps(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """`[B, T]` log-probs of the last T tokens of `input_ids [B, L]` from full logits `[B, L, V]`.

    The logits at position j predict token j + 1, so completion token L - T + j is scored by the
    logits at L - T - 1 + j (TRL #3029 made scoring use the sampling temperature). Masked positions are exactly 0, as in TRL 1.16's
    fused head.
    """
    if logits.dim() != 3 or logits.shape[:2] != input_ids.shape:
        raise GRPOInputError(
            f"logits must be [B, L, V] over input_ids [B, L]; got {tuple(logits.shape)} and {tuple(input_ids.shape)}"
        )
    num_completion = completion_mask.size(1)
    length = input_ids.size(1)
    if not 0 < num_completion < length:
        raise GRPOInputError(f"completion length {num_completion} must be in 1..L-1 (L = {length})")
    predicting_logits = logits[:, length - num_completion - 1 : length - 1]
    completion_tokens = input_ids[:, length - num_completion :]
    logps = selective_log_softmax(predicting_logits, completion_tokens, temperature)
    return logps * completion_mask.to(logps.dtype)


def get_per_token_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """`completion_logps` with the forward pass of a transformers causal LM; `[B, logits_to_keep]`.

    Like TRL, the model gets `input_ids` and `attention_mask` only (no `position_ids`): for RoPE
    models a constant left-pad offset leaves attention scores unchanged. We ask
    for T + 1 logits and slice by position, so a model that ignores `logits_to_keep` and returns all
    L logits is scored at the same positions.
    """
    _check_temperature(temperature)
    outputs = model(
        input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1
    )
    predicting_logits = outputs.logits[:, -(logits_to_keep + 1) : -1]
    completion_tokens = input_ids[:, -logits_to_keep:]
    logps = selective_log_softmax(predicting_logits, completion_tokens, temperature)
    return logps * attention_mask[:, -logits_to_keep:].to(logps.dtype)
