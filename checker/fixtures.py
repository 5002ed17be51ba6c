"""Inputs the checks share: masks with unequal lengths, a scoring batch, the tiny model.

Every fixture is built from the check's own seeded generator, so a verdict never depends on
which checks ran before it. The tiny model (reference_impl.tiny) is built locally; nothing is
downloaded. Loading it once per process is what makes the model-based checks cheap.
"""

from __future__ import annotations

import copy
import functools

import torch

PAD_ID, EOS_ID = 0, 1
VOCAB = 17  # reference_impl.tiny.VOCABULARY
CONTENT_IDS = (3, 17)  # digits and symbols: ids that are neither pad nor EOS


def unequal_mask(lengths: list[int], width: int) -> torch.Tensor:
    """`[B, width]` int mask whose row b has `lengths[b]` leading ones (0 = a fully masked row)."""
    positions = torch.arange(width).expand(len(lengths), -1)
    return (positions < torch.tensor(lengths).unsqueeze(1)).int()


def random_logps(gen: torch.Generator, rows: int, width: int) -> torch.Tensor:
    """Plausible per-token log-probs in [-3, -0.05]."""
    return -(torch.rand(rows, width, generator=gen) * 2.95 + 0.05)


@functools.lru_cache(maxsize=1)
def _base_model() -> torch.nn.Module:
    from reference_impl.tiny import load_tiny

    model, _ = load_tiny()
    return model


def tiny_model(logit_scale: float = 1.0) -> torch.nn.Module:
    """A fresh copy of the tiny Qwen2 in train mode; `logit_scale` multiplies its final-norm weight,
    which scales every logit (a peaked or flat next-token distribution on demand)."""
    model = copy.deepcopy(_base_model())
    if logit_scale != 1.0:
        with torch.no_grad():
            model.model.norm.weight.mul_(logit_scale)
    model.train()
    return model


def scoring_batch(gen: torch.Generator, completion_lengths: list[int], prompt_lengths: list[int]):
    """A left-padded prompt block and a right-padded completion block with their masks.

    Returns input_ids [B, Lp + T], attention_mask [B, Lp + T], completion_mask [B, T], T.
    Completion tokens after a row's length hold PAD (mask 0); its last real token is EOS when the
    row is shorter than T (the EOS is inside the mask, as in TRL).
    """
    rows, width = len(completion_lengths), max(completion_lengths)
    prompt_width = max(prompt_lengths)
    prompt_ids = torch.full((rows, prompt_width), PAD_ID)
    prompt_mask = torch.zeros(rows, prompt_width, dtype=torch.long)
    completion_ids = torch.full((rows, width), PAD_ID)
    for b, (lp, lc) in enumerate(zip(prompt_lengths, completion_lengths, strict=True)):
        prompt_ids[b, prompt_width - lp :] = torch.randint(*CONTENT_IDS, (lp,), generator=gen)
        prompt_mask[b, prompt_width - lp :] = 1
        completion_ids[b, :lc] = torch.randint(*CONTENT_IDS, (lc,), generator=gen)
        if 0 < lc < width:
            completion_ids[b, lc - 1] = EOS_ID
    mask = unequal_mask(completion_lengths, width)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, mask.long()], dim=1)
    return input_ids, attention_mask, mask, width
