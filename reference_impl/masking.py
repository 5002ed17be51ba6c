"""Stage `masking`: which completion tokens count in the loss."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reference_impl.errors import GRPOInputError


def completion_mask(
    completion_ids: torch.Tensor,
    eos_token_ids: Sequence[int] | int,
    mask_truncated_completions: bool = False,
) -> torch.Tensor:
    """`[B, T]` int mask: 1 up to and including the first EOS-set token, 0 after it.

    Decided by position, never by comparing ids with the pad id: when pad == EOS, the padding after
    the first EOS is excluded because it comes after it (TRL 1.16 gt:L1880-1885). A row with no EOS
    is all 1 (it was cut at max_completion_length), or all 0 when `mask_truncated_completions`
    (DAPO overlong filtering, TRL gt:L2490-2492).
    """
    if completion_ids.dim() != 2:
        raise GRPOInputError(
            f"completion_ids must be [B, T], got shape {tuple(completion_ids.shape)}"
        )
    eos_ids = [eos_token_ids] if isinstance(eos_token_ids, int) else list(eos_token_ids)
    if not eos_ids:
        raise GRPOInputError("eos_token_ids is empty: at least one end-of-sequence id is needed")
    batch, length = completion_ids.shape
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))
    has_eos = is_eos.any(dim=1)
    first_eos = torch.full((batch,), length, dtype=torch.long, device=completion_ids.device)
    first_eos[has_eos] = is_eos.int().argmax(dim=1)[has_eos]
    positions = torch.arange(length, device=completion_ids.device).expand(batch, -1)
    mask = (positions <= first_eos.unsqueeze(1)).int()
    if mask_truncated_completions:
        mask = mask * has_eos.unsqueeze(1).int()
    return mask
