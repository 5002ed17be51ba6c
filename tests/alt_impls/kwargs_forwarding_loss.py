"""A from-scratch clipped loss whose compute_loss passes every keyword on to a helper that
takes none of TRL's options (tests/test_profile_conventions.py)."""

import torch


def _loss(per_token_logps, advantages, completion_mask, old_per_token_logps=None):
    old = per_token_logps.detach() if old_per_token_logps is None else old_per_token_logps
    ratio = torch.exp(per_token_logps - old)
    a = advantages.unsqueeze(1)
    loss = -torch.min(ratio * a, torch.clamp(ratio, 0.8, 1.2) * a)
    m = completion_mask.float()
    return (loss * m).sum() / m.sum().clamp(min=1)


def compute_loss(per_token_logps, advantages, completion_mask, **kwargs):
    # passes every keyword on: an option it does not know is a TypeError
    return _loss(per_token_logps, advantages, completion_mask, **kwargs)
