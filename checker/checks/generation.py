"""Stage `generation` (extension): `generate_completions(model, prompt_ids, prompt_mask, ...)`.

Rules (TRL 1.16 `RepeatSampler` and the trainer's `GenerationConfig`): rows
g*G .. g*G + G - 1 continue prompt g (contiguous groups); samples come from softmax(logits / T)
with no top-k / top-p, so G samples are not all identical and token frequencies match the
tempered softmax; after a row's first EOS it holds pad_token_id. Sampling is seeded, so verdicts
are deterministic.
"""

from __future__ import annotations

import torch

from checker import fixtures
from checker.checks import CandidateError, CheckFailure, check
from checker.checks.context import Context, fmt

EOS, EOS2, PAD = fixtures.EOS_ID, 9, fixtures.PAD_ID
P_VALUE_FLOOR = 1e-6  # a correct sampler fails the chi-square test once in a million seeds


def _generate(ctx: Context, model, prompt_ids, *, G, length, eos=(EOS,), temperature=1.0):
    torch.manual_seed(ctx.seed)
    out = ctx.call(
        "generate_completions",
        model,
        prompt_ids,
        torch.ones_like(prompt_ids),
        num_generations=G,
        max_completion_length=length,
        eos_token_ids=list(eos),
        pad_token_id=PAD,
        temperature=temperature,
    )
    if not isinstance(out, torch.Tensor) or out.dim() != 2:
        raise CandidateError(
            f"generate_completions returned {type(out).__name__}, expected a [P*G, T] tensor"
        )
    rows = prompt_ids.size(0) * G
    if out.size(0) != rows or not 1 <= out.size(1) <= length:
        raise CandidateError(
            f"generate_completions returned shape {tuple(out.shape)}, expected ({rows}, <= {length})"
        )
    return out.long()


def _next_token_probs(model, prompt_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids)).logits
    return torch.softmax(logits[:, -1].double() / temperature, dim=-1)


@check("generation", "generate_completions", heavy=True)
def groups_are_contiguous(ctx: Context) -> None:
    """With 3 prompts whose next token is nearly certain (p > 0.99) and distinct, rows g*G .. g*G+G-1 continue prompt g."""
    model = fixtures.tiny_model(logit_scale=40.0).eval()
    candidates = torch.arange(*fixtures.CONTENT_IDS).unsqueeze(1)
    probs = _next_token_probs(model, candidates, 1.0)
    top_prob, top_token = probs.max(-1)
    chosen, seen_tokens = [], set()
    for index in top_prob.argsort(descending=True).tolist():
        if int(top_token[index]) not in seen_tokens and top_prob[index] > 0.99:
            chosen.append(index)
            seen_tokens.add(int(top_token[index]))
        if len(chosen) == 3:
            break
    if len(chosen) < 3:
        raise CheckFailure("3 usable prompts", f"{len(chosen)}", "fixture problem (tiny model)")
    prompts = candidates[chosen]
    G = 8
    out = _generate(ctx, model, prompts, G=G, length=2)
    first = out[:, 0].view(-1, G)
    expected = top_token[chosen].unsqueeze(1)
    own = (first == expected).float().mean(1)
    if (own < 0.5).any():
        raise CheckFailure(
            f"each block of {G} rows to continue its own prompt (top tokens {expected.view(-1).tolist()})",
            f"first tokens per block {first.tolist()}",
            "groups are not contiguous: prompts look interleaved [p1, p2, p1, p2] (use repeat_interleave)",
        )


@check("generation", "generate_completions", heavy=True)
def samples_are_not_identical(ctx: Context) -> None:
    """G = 8 samples of one prompt at T = 1 are not all identical (sampling, not greedy; per-sample noise)."""
    model = fixtures.tiny_model(logit_scale=2.0).eval()
    out = _generate(ctx, model, torch.tensor([[5, 13]]), G=8, length=4)
    if all(torch.equal(out[0], row) for row in out[1:]):
        raise CheckFailure(
            "at least two different completions among 8",
            f"8 copies of {out[0].tolist()}",
            "the sampler is greedy (do_sample off) or reuses one sample for the whole group",
        )


def _chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square goodness of fit; bins with expected count < 5 are merged."""
    total = float(counts.sum())
    expected = probs * total
    small = expected < 5
    observed = torch.cat([counts[~small].double(), counts[small].double().sum().reshape(1)])
    expected = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    statistic = float(((observed - expected) ** 2 / expected).sum())
    dof = observed.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(statistic / 2.0)))


@check("generation", "generate_completions", heavy=True)
def samples_follow_tempered_softmax(ctx: Context) -> None:
    """3000 one-token samples at T = 0.5 match softmax(logits / 0.5) (chi-square p >= 1e-6)."""
    temperature, samples = 0.5, 3000
    model = fixtures.tiny_model(logit_scale=4.0).eval()
    prompt = torch.tensor([[7]])
    out = _generate(ctx, model, prompt, G=samples, length=1, temperature=temperature)
    counts = torch.bincount(out[:, 0], minlength=fixtures.VOCAB)[: fixtures.VOCAB]
    p_value = _chi_square_p_value(counts, _next_token_probs(model, prompt, temperature)[0])
    if p_value >= P_VALUE_FLOOR:
        return
    cause = "the samples do not follow softmax(logits / T)"
    for label, t in (("not applied (T = 1 used)", 1.0), ("multiplied instead of divided", 2.0)):
        if _chi_square_p_value(counts, _next_token_probs(model, prompt, t)[0]) >= P_VALUE_FLOOR:
            cause = f"the sampling temperature is {label}"
            break
    if counts.max() == counts.sum():
        cause = "every sample is the same token: greedy decoding, not sampling"
    raise CheckFailure(
        f"chi-square p >= {P_VALUE_FLOOR} against softmax(logits / {temperature})",
        f"p = {fmt(p_value)}",
        cause,
    )


@check("generation", "generate_completions", heavy=True)
def pad_after_first_eos(ctx: Context) -> None:
    """After a row's first EOS (any id of eos_token_ids; the one id under eos_token_ids: first)
    every position holds pad_token_id."""
    eos = (EOS,) if ctx.config["eos_token_ids"] == "first" else (EOS, EOS2)
    model = fixtures.tiny_model(logit_scale=1.0).eval()
    with torch.no_grad():  # make both EOS ids likely so that rows end at different positions
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.clone())
        model.lm_head.weight[[EOS, EOS2]] *= 0
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(fixtures.VOCAB))
        model.lm_head.bias[[EOS, EOS2]] = 2.0
    out = _generate(ctx, model, torch.tensor([[5, 13], [6, 13]]), G=8, length=6, eos=eos)
    is_eos = torch.isin(out, torch.tensor(eos))
    after = (is_eos.int().cumsum(1) - is_eos.int()) > 0
    if not is_eos.any():
        raise CheckFailure(
            "some rows ending with EOS", "no EOS at all", "EOS ids are not passed to the sampler"
        )
    wrong = after & (out != PAD)
    if wrong.any():
        row = int(wrong.any(1).nonzero()[0])
        second = bool((out[row] == EOS2).any())
        raise CheckFailure(
            "pad_token_id after the first EOS",
            f"row {out[row].tolist()}",
            "generation continues after the second EOS id: pass every id of eos_token_ids (a"
            " trainer that takes one EOS id by design declares eos_token_ids: first)"
            if second and len(eos) > 1
            else "tokens after EOS are not replaced by the pad id",
        )
