"""The reference policy the KL term anchors to: a frozen copy of the initial policy, optionally
pulled towards the policy every few steps (TR-DPO's soft update, arXiv:2404.09656, as TRL's
`sync_ref_model` does it)."""

from __future__ import annotations

import copy

import torch


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The reference policy: an independent copy of `model` as it is now, in eval mode, frozen."""
    return copy.deepcopy(model).eval().requires_grad_(False)


@torch.no_grad()
def sync_reference(reference: torch.nn.Module, policy: torch.nn.Module, alpha: float) -> None:
    """ref <- alpha * policy + (1 - alpha) * ref, parameter by parameter, in place (alpha 1: the
    reference takes the policy's weights as they are now)."""
    for ref_param, param in zip(reference.parameters(), policy.parameters(), strict=True):
        ref_param.lerp_(param.detach(), alpha)


def due_for_sync(step: int, every: int) -> bool:
    """Whether the reference is pulled towards the policy after rollout `step` (never when
    `every` is 0)."""
    return every > 0 and step % every == 0
