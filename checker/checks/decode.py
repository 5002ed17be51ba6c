"""Stage `decode`: `strip_reasoning(text, open_tag, close_tag)`, the text a reward function scores.

Rule (stage protocol): the stripped text after the first `close_tag` when it is present (whether
or not `open_tag` is: many chat templates put the opening tag in the prompt); otherwise "" when
`open_tag` is present (the reasoning was cut off); otherwise the text unchanged.
"""

from __future__ import annotations

from checker.checks import CandidateError, CheckFailure, check
from checker.checks.context import Context


def _strip(ctx: Context, text: str, **tags) -> str:
    out = ctx.call("strip_reasoning", text, **tags)
    if not isinstance(out, str):
        raise CandidateError(f"strip_reasoning returned {type(out).__name__}, expected str")
    return out


def _expect(ctx: Context, cases: list[tuple[str, str]], cause: str, **tags) -> None:
    for text, expected in cases:
        seen = _strip(ctx, text, **tags)
        if seen != expected:
            raise CheckFailure(f"{expected!r} for {text!r}", repr(seen), cause)


@check("decode", "strip_reasoning")
def plain_answer_is_unchanged(ctx: Context) -> None:
    """A completion with neither tag is scored as it is (not blanked, not stripped)."""
    _expect(
        ctx,
        [("42", "42"), ("  the answer is 7\n", "  the answer is 7\n"), ("", "")],
        "a plain answer with no reasoning tags is altered: it must be returned unchanged",
    )


@check("decode", "strip_reasoning")
def answer_after_closing_tag(ctx: Context) -> None:
    """With a closing tag, the answer is the stripped text after its first occurrence, opening tag or not."""
    _expect(
        ctx,
        [
            ("<think>2 + 2 is 4</think> 4", "4"),
            ("2 + 2 is 4</think>\n4\n", "4"),
            ("<think>a</think>b</think>c", "b</think>c"),
            ("<think>x</think>", ""),
        ],
        "the text after the first closing tag is the answer (the opening tag may be in the prompt)",
    )


@check("decode", "strip_reasoning")
def unclosed_reasoning_has_no_answer(ctx: Context) -> None:
    """An opening tag without a closing one means the reasoning was cut off: the answer is ""."""
    _expect(
        ctx,
        [("<think>still thinking about 4", ""), ("intro <think> 4", "")],
        "reasoning cut off before it closed must score as no answer",
    )


@check("decode", "strip_reasoning")
def custom_tags_are_honoured(ctx: Context) -> None:
    """open_tag / close_tag arguments replace <think> / </think>."""
    _expect(
        ctx,
        [
            ("<reasoning>r</reasoning> 9", "9"),
            ("<think>t</think> 9", "<think>t</think> 9"),
            ("<reasoning>r", ""),
        ],
        "the open_tag / close_tag arguments are ignored",
        open_tag="<reasoning>",
        close_tag="</reasoning>",
    )
