"""Stage `logprobs`: log pi(token | prefix) at the sampling temperature.

Rule (TRL #3029): logp[:, j] = log_softmax(logits[:, L - T - 1 + j] / T)[x[L - T + j]]
in fp32; every value <= 0; compared only where the completion mask is 1; padding never changes
the unmasked values.
"""

from __future__ import annotations

import torch

import reference_impl
from checker import fixtures
from checker.checks import CheckFailure, Skip, check
from checker.checks.context import Context, assert_close, fmt

TEMPERATURE = 0.7
ATOL = 1e-5  # a missing /T moves log-probs by >= 1


def _shifted_logps(logits, input_ids, mask, temperature, shift):
    """completion_logps with the logits taken `shift` positions later (shift 1 = no logit shift)."""
    T, L = mask.size(1), input_ids.size(1)
    start = L - T - 1 + shift
    picked = logits[:, start : start + T]
    if picked.size(1) < T:  # the shifted window runs off the end: pad with the last logits
        picked = torch.cat([picked, logits[:, -1:].expand(-1, T - picked.size(1), -1)], dim=1)
    tokens = input_ids[:, L - T :]
    return reference_impl.selective_log_softmax(picked, tokens, temperature) * mask


def _temperatures(ctx: Context) -> tuple[float, ...]:
    """The candidate's own temperature first, then the other of 1 and 0.7: a scorer without a
    temperature (GRPO-Zero) is still checked at its own T = 1."""
    own = float(ctx.config["temperature"])
    return (own, *(t for t in (1.0, TEMPERATURE) if t != own))


def _at_each_temperature(ctx: Context, compare) -> None:
    """`compare(temperature)` at the candidate's own temperature, then at the other one unless
    the candidate does not take it (a Skip there, after a comparison ran, is not the verdict)."""
    for index, temperature in enumerate(_temperatures(ctx)):
        try:
            compare(temperature)
        except Skip:
            if index == 0:
                raise


def _logprob_causes(logits, input_ids, mask, temperature) -> dict[str, torch.Tensor]:
    causes = {}
    if temperature != 1.0:
        causes["the logits are not divided by the temperature (TRL #3029)"] = _shifted_logps(
            logits, input_ids, mask, 1.0, 0
        )
        causes["the logits are multiplied by the temperature instead of divided"] = _shifted_logps(
            logits, input_ids, mask, 1 / temperature, 0
        )
    causes |= {
        "off by one: the logits at position j score token j, not token j + 1": _shifted_logps(
            logits, input_ids, mask, temperature, 1
        ),
        "off by one: the logits are shifted one position too far": _shifted_logps(
            logits, input_ids, mask, temperature, -1
        ),
    }
    expected = _shifted_logps(logits, input_ids, mask, temperature, 0)
    causes["log-probs are positive: the log-softmax sign looks flipped"] = -expected
    return causes


@check("logprobs", "selective_log_softmax")
def selective_log_softmax_matches_reference(ctx: Context) -> None:
    """selective_log_softmax equals log_softmax(logits / T) gathered at index (T = 1 and T = 0.7)."""
    logits = ctx.randn(3, 5, 11) * 3
    index = ctx.randint(0, 11, (3, 5))
    for temperature in (1.0, TEMPERATURE):
        seen = ctx.call(
            "selective_log_softmax", logits, index, temperature=temperature, shape=index.shape
        )
        expected = reference_impl.selective_log_softmax(logits, index, temperature)
        assert_close(
            seen.float(),
            expected,
            atol=ATOL,
            what=f"log-probs at T={temperature}",
            causes={
                "the logits are not divided by the temperature (TRL #3029)": reference_impl.selective_log_softmax(
                    logits, index, 1.0
                ),
                "log-probs are positive: the log-softmax sign looks flipped": -expected,
                "the values are probabilities (softmax), not log-probabilities": expected.exp(),
            },
        )


@check("logprobs", "selective_log_softmax")
def selective_log_softmax_is_nonpositive(ctx: Context) -> None:
    """Every log-probability is <= 0 and finite, even for large logits."""
    logits = ctx.randn(4, 9) * 40
    index = ctx.randint(0, 9, (4,))
    seen = ctx.call("selective_log_softmax", logits, index, shape=index.shape).float()
    if not torch.isfinite(seen).all() or (seen > 1e-6).any():
        cause = (
            "log-probs are positive: the log-softmax sign looks flipped"
            if (seen > 1e-6).any()
            else "overflow: use logsumexp, not log(sum(exp))"
        )
        raise CheckFailure("finite values <= 0", fmt(seen), cause)


def _completion_inputs(ctx: Context):
    lengths = [5, 2, 4, 1]
    mask = fixtures.unequal_mask(lengths, 5)
    input_ids = ctx.randint(0, 13, (4, 9))
    logits = ctx.randn(4, 9, 13) * 2
    return logits, input_ids, mask


@check("logprobs", "completion_logps")
def completion_logps_matches_reference(ctx: Context) -> None:
    """completion_logps scores completion token j with the logits at L - T - 1 + j, divided by T (the candidate's own T, then T = 0.7 or 1)."""
    logits, input_ids, mask = _completion_inputs(ctx)
    keep = mask.bool()

    def compare(temperature: float) -> None:
        seen = ctx.call(
            "completion_logps", logits, input_ids, mask, temperature=temperature, shape=mask.shape
        ).float()
        expected = reference_impl.completion_logps(logits, input_ids, mask, temperature)
        causes = _logprob_causes(logits, input_ids, mask, temperature)
        assert_close(
            seen[keep],
            expected[keep],
            atol=ATOL,
            what=f"log-probs on unmasked tokens at T={temperature:g}",
            causes={k: v[keep] for k, v in causes.items()},
        )

    _at_each_temperature(ctx, compare)


@check("logprobs", "completion_logps")
def completion_logps_are_nonpositive(ctx: Context) -> None:
    """Unmasked completion log-probs are finite and <= 0."""
    logits, input_ids, mask = _completion_inputs(ctx)
    seen = ctx.call("completion_logps", logits * 10, input_ids, mask, shape=mask.shape).float()
    values = seen[mask.bool()]
    if not torch.isfinite(values).all() or (values > 1e-6).any():
        raise CheckFailure(
            "finite values <= 0",
            fmt(values),
            "log-probs are positive: the log-softmax sign looks flipped"
            if (values > 1e-6).any()
            else "non-finite log-probs",
        )


def _model_batch(ctx: Context):
    """Prompts of unequal length, left-padded (TRL), or of one length under prompt_padding: none."""
    unpadded = ctx.config["prompt_padding"] == "none"
    input_ids, attention_mask, mask, width = fixtures.scoring_batch(
        ctx.gen,
        completion_lengths=[6, 2, 4, 1],
        prompt_lengths=[4, 4, 4, 4] if unpadded else [3, 5, 2, 4],
    )
    return input_ids, attention_mask, mask, width


@check("logprobs", "get_per_token_logps", heavy=True)
def model_logps_match_reference(ctx: Context) -> None:
    """get_per_token_logps on the tiny Qwen2 (left-padded prompts; the candidate's own T, then T = 0.7 or 1) equals an independent forward."""
    model = fixtures.tiny_model()
    input_ids, attention_mask, mask, width = _model_batch(ctx)
    # A loss mask passed as the attention mask (the prompt's columns 0) scores the completion
    # without its prompt (verifiers' trainer): the cause to name when the values differ.
    unprompted = attention_mask.clone()
    unprompted[:, :-width] = 0
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
        blind = model(input_ids=input_ids, attention_mask=unprompted).logits.float()
    keep = mask.bool()

    def compare(temperature: float) -> None:
        seen = ctx.call(
            "get_per_token_logps",
            model,
            input_ids,
            attention_mask,
            width,
            temperature=temperature,
            shape=mask.shape,
        ).float()
        expected = reference_impl.completion_logps(logits, input_ids, mask, temperature)
        causes = _logprob_causes(logits, input_ids, mask, temperature)
        causes[
            "the prompt is not attended: the model is given an attention mask that is 0 over the"
            " prompt (a loss mask used as the attention mask)"
        ] = reference_impl.completion_logps(blind, input_ids, mask, temperature)
        assert_close(
            seen.detach()[keep],
            expected[keep],
            atol=ATOL,
            what=f"log-probs on unmasked tokens at T={temperature:g}",
            causes={k: v[keep] for k, v in causes.items()},
        )

    _at_each_temperature(ctx, compare)


@check("logprobs", "get_per_token_logps", heavy=True)
def padding_does_not_change_logps(ctx: Context) -> None:
    """The same row scored alone, with 3 extra left pads (none under prompt_padding: none) and 2 extra right pads, has the same log-probs."""
    left = 0 if ctx.config["prompt_padding"] == "none" else 3
    model = fixtures.tiny_model()
    input_ids, attention_mask, mask, width = fixtures.scoring_batch(
        ctx.gen, completion_lengths=[4], prompt_lengths=[3]
    )
    seen_alone = ctx.call(
        "get_per_token_logps", model, input_ids, attention_mask, width, shape=(1, width)
    )
    padded_ids = torch.cat(
        [torch.full((1, left), fixtures.PAD_ID), input_ids, torch.full((1, 2), fixtures.PAD_ID)],
        1,
    )
    padded_mask = torch.cat(
        [
            torch.zeros(1, left, dtype=torch.long),
            attention_mask,
            torch.zeros(1, 2, dtype=torch.long),
        ],
        1,
    )
    seen_padded = ctx.call(
        "get_per_token_logps", model, padded_ids, padded_mask, width + 2, shape=(1, width + 2)
    )
    assert_close(
        seen_padded.detach().float()[:, :width],
        seen_alone.detach().float(),
        atol=ATOL,
        what="log-probs of the unpadded row",
        fallback_cause="padding changes the log-probs: is the attention mask passed to the model?"
        " (a trainer that never pads prompts, one prompt per batch, declares prompt_padding: none)",
    )


@check("logprobs", "get_per_token_logps", heavy=True)
def scoring_is_deterministic(ctx: Context) -> None:
    """Two scoring passes of the same batch in train mode are bitwise equal (no dropout, no sampling)."""
    model = fixtures.tiny_model()
    input_ids, attention_mask, mask, width = _model_batch(ctx)
    first = ctx.call(
        "get_per_token_logps", model, input_ids, attention_mask, width, shape=mask.shape
    )
    second = ctx.call(
        "get_per_token_logps", model, input_ids, attention_mask, width, shape=mask.shape
    )
    keep = mask.bool()
    if not torch.equal(first.detach()[keep], second.detach()[keep]):
        raise CheckFailure(
            "identical log-probs",
            f"max diff {fmt(float((first - second).detach()[keep].abs().max()))}",
            "scoring is stochastic: dropout on, or sampling noise",
        )
