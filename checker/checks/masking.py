"""Stage `masking`: `completion_mask(completion_ids, eos_token_ids, mask_truncated_completions)`.

Rule (TRL 1.16 gt:L1880-1885): 1 up to and including the first token whose id is
in `eos_token_ids` (every id of the list), 0 after it; a row with no EOS is all 1 (all 0 when
`mask_truncated_completions`); decided by position, never by comparing ids with the pad id.
Checks that pass no option compare with the candidate's declared `mask_truncated_completions`.
"""

from __future__ import annotations

import torch

import reference_impl
from checker.checks import CheckFailure, Skip, check
from checker.checks.context import Context

EOS, EOS2, PAD = 1, 9, 0


def _mask(ctx: Context, ids: torch.Tensor, eos_ids: list[int], **kwargs) -> torch.Tensor:
    out = ctx.call("completion_mask", ids, eos_ids, shape=ids.shape, **kwargs)
    return out.detach().to(torch.float32)


def _wrong_masks(ids: torch.Tensor, eos_ids: list[int], pad_id: int) -> dict[str, torch.Tensor]:
    is_eos = torch.isin(ids, torch.tensor(eos_ids))
    after_first = (is_eos.int().cumsum(1) - is_eos.int()) > 0  # strictly after the first EOS
    upto_first = ~after_first
    return {
        "the EOS token itself is excluded from the mask (TRL keeps it)": (
            upto_first & ~is_eos
        ).float(),
        "the mask is built from ids != pad_id (breaks when pad == EOS; decide by position)": (
            ids != pad_id
        ).float(),
        "the mask is ids != EOS (a pipeline that pads with EOS masking ids != pad_id): it drops"
        " the EOS and keeps what follows it; decide by position": (~is_eos).float(),
        "only the first id of eos_token_ids is honoured (TRL honours every id; a trainer that"
        " takes one EOS id by design declares eos_token_ids: first)": reference_impl.completion_mask(
            ids, eos_ids[:1]
        ).float(),
        "the mask runs up to the last EOS, not the first": (
            torch.flip(torch.cumsum(torch.flip(is_eos.int(), [1]), 1), [1]) > 0
        ).float(),
        "the mask is off by one position (stops one token late)": torch.cat(
            [torch.ones(ids.size(0), 1), upto_first[:, :-1].float()], 1
        ),
    }


def _compare(ctx: Context, ids, eos_ids, what, pad_id=PAD, first_causes=None, **kwargs) -> None:
    """Fail on the first row whose mask differs, showing that row's ids, expected and seen mask."""
    seen = _mask(ctx, ids, eos_ids, **kwargs)
    options = {"mask_truncated_completions": ctx.config["mask_truncated_completions"]} | kwargs
    expected = reference_impl.completion_mask(ids, eos_ids, **options).float()
    if torch.equal(seen, expected):
        return
    row = int((seen != expected).any(1).nonzero()[0])
    causes = (first_causes or {}) | _wrong_masks(ids, eos_ids, pad_id)
    cause = next((c for c, wrong in causes.items() if torch.equal(seen, wrong)), "")
    raise CheckFailure(
        f"{what}, row {row} ids {ids[row].tolist()} (EOS {eos_ids}): {expected[row].int().tolist()}",
        seen[row].int().tolist().__repr__(),
        cause,
    )


@check("masking", "completion_mask")
def matches_reference_random(ctx: Context) -> None:
    """On random completions with EOS sprinkled in, the mask equals the reference's."""
    ids = ctx.randint(2, 17, (8, 7))
    ids[ctx.rand(8, 7) < 0.2] = EOS
    _compare(ctx, ids, [EOS], "mask")


@check("masking", "completion_mask")
def eos_at_first_and_last_position(ctx: Context) -> None:
    """An EOS at position 0 keeps exactly that token; an EOS at the last position keeps the whole row."""
    ids = torch.tensor([[EOS, 5, 6, 7], [5, 6, 7, EOS], [5, EOS, EOS, PAD]])
    _compare(ctx, ids, [EOS], "mask for EOS at the first / last position")


@check("masking", "completion_mask")
def every_eos_id_counts(ctx: Context) -> None:
    """Every id in eos_token_ids ends a completion (e.g. <|endoftext|> and <|im_end|>)."""
    if ctx.config["eos_token_ids"] == "first":
        raise Skip("declared eos_token_ids: first (one EOS id ends a completion)")
    ids = torch.tensor([[5, EOS2, 6, 7, 8], [5, 6, EOS, 7, 8], [EOS2, 5, EOS, 6, 7]])
    _compare(ctx, ids, [EOS, EOS2], "mask with two EOS ids")


@check("masking", "completion_mask")
def pad_equal_to_eos(ctx: Context) -> None:
    """When pad id == EOS id the first EOS is kept and the padding after it is not."""
    ids = torch.tensor([[5, 6, EOS, EOS, EOS], [5, EOS, EOS, EOS, EOS], [5, 6, 7, 8, 9]])
    _compare(ctx, ids, [EOS], "mask when pad == EOS", pad_id=EOS)


@check("masking", "completion_mask")
def rows_without_eos_are_kept(ctx: Context) -> None:
    """A row with no EOS (cut at max_completion_length) is all 1 by default."""
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, EOS, PAD]])
    dropped = reference_impl.completion_mask(ids, [EOS], mask_truncated_completions=True).float()
    _compare(
        ctx,
        ids,
        [EOS],
        "mask with a truncated row",
        first_causes={
            "rows without EOS are dropped even without mask_truncated_completions": dropped
        },
        mask_truncated_completions=False,
    )


@check("masking", "completion_mask")
def truncated_rows_are_dropped(ctx: Context) -> None:
    """With mask_truncated_completions=True a row with no EOS is all 0; rows with an EOS are unchanged."""
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, EOS, PAD], [EOS, PAD, PAD, PAD]])
    ignored = reference_impl.completion_mask(ids, [EOS]).float()
    _compare(
        ctx,
        ids,
        [EOS],
        "mask with truncated rows dropped",
        first_causes={"mask_truncated_completions=True is ignored": ignored},
        mask_truncated_completions=True,
    )
