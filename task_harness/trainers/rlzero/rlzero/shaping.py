"""Reward shaping applied after the reward functions: DAPO's soft overlong punishment.

DAPO (arXiv:2503.14476, eq. 13) penalises a completion for its length only near the token budget
L_max (`RunConfig.max_new_tokens`), over the last L_cache tokens of it (`overlong_buffer`):

    R_length(y) = 0                              if |y| <= L_max - L_cache
                  ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                  -1                             if |y| > L_max

`|y|` is the completion's length in counted tokens. rlzero's sampler never goes past L_max, so
the last case is there for completions scored from elsewhere.
"""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_new_tokens: int, buffer: int) -> torch.Tensor:
    """R_length of each completion from its counted tokens `lengths`, [N] float in [-1, 0]."""
    lengths = lengths.float()
    free = max_new_tokens - buffer
    ramp = (free - lengths) / buffer
    penalty = torch.where(lengths <= free, torch.zeros_like(lengths), ramp)
    return torch.where(lengths > max_new_tokens, torch.full_like(lengths, -1.0), penalty)


def shape_rewards(
    rewards: torch.Tensor, lengths: torch.Tensor, max_new_tokens: int, buffer: int, weight: float
) -> torch.Tensor:
    """rewards + weight * R_length for the completions that have a reward; a NaN (no reward
    function scored the completion) stays NaN. With no buffer the rewards are returned as they
    are."""
    if buffer <= 0:
        return rewards
    return rewards + weight * overlong_penalty(lengths, max_new_tokens, buffer)
