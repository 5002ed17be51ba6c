"""Stage `reference_model` (extension): `make_reference_model(policy)`.

Rule (TRL 1.16 gt:L984-1003): a frozen copy of the policy as it is now: the same outputs
at creation (so KL at step 0 is 0), eval mode, and unaffected by any later update of the policy.
`requires_grad` is not demanded: TRL 1.16 leaves it True on its reference and keeps it frozen by
scoring it under no_grad, which is equally correct.
"""

from __future__ import annotations

import torch

import reference_impl
from checker import fixtures
from checker.checks import CandidateError, CheckFailure, check
from checker.checks.context import Context, fmt


def _reference(ctx: Context, policy: torch.nn.Module) -> torch.nn.Module:
    ref = ctx.call("make_reference_model", policy)
    if not isinstance(ref, torch.nn.Module):
        raise CandidateError(
            f"make_reference_model returned {type(ref).__name__}, expected a torch.nn.Module"
        )
    return ref


def _logps(model, ctx: Context):
    input_ids, attention_mask, mask, width = fixtures.scoring_batch(
        torch.Generator().manual_seed(ctx.seed), [5, 2, 4], [3, 2, 4]
    )
    with torch.no_grad():
        return reference_impl.get_per_token_logps(model, input_ids, attention_mask, width), mask


@check("reference_model", "make_reference_model", heavy=True)
def kl_is_zero_at_creation(ctx: Context) -> None:
    """A reference made from a policy that has already trained scores like it: KL = 0 on every token."""
    policy = fixtures.tiny_model()
    with torch.no_grad():  # "as it is now": not the initial weights, not a checkpoint on disk
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=ctx.gen))
    ref = _reference(ctx, policy)
    policy_logps, mask = _logps(policy, ctx)
    ref_logps, _ = _logps(ref, ctx)
    kl = reference_impl.per_token_kl(policy_logps, ref_logps) * mask
    if kl.abs().max() > 1e-6:
        raise CheckFailure(
            "KL 0 at step 0",
            f"max KL {fmt(float(kl.abs().max()))}",
            "the reference is not a copy of the policy as it is now (fresh weights or another checkpoint)",
        )


@check("reference_model", "make_reference_model", heavy=True)
def reference_is_in_eval_mode(ctx: Context) -> None:
    """The reference is in eval mode, so dropout (when the model has any) never makes the KL noisy."""
    ref = _reference(ctx, fixtures.tiny_model())
    if ref.training:
        raise CheckFailure("eval mode", "train mode", "call .eval() on the reference")


@check("reference_model", "make_reference_model", heavy=True)
def policy_update_leaves_reference(ctx: Context) -> None:
    """Changing the policy's weights after make_reference_model leaves the reference's log-probs unchanged."""
    policy = fixtures.tiny_model()
    ref = _reference(ctx, policy)
    before, mask = _logps(ref, ctx)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=ctx.gen))
    after, _ = _logps(ref, ctx)
    moved = float(((after - before) * mask).abs().max())
    if moved > 0:
        raise CheckFailure(
            "reference log-probs unchanged by a policy update",
            f"they moved by up to {fmt(moved)}",
            "the reference shares the policy's parameters: deep-copy it (copy.deepcopy), do not alias",
        )
