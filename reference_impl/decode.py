"""Stage `decode`: what text a reward function scores for a reasoning model."""

from __future__ import annotations


def strip_reasoning(text: str, open_tag: str = "<think>", close_tag: str = "</think>") -> str:
    """The answer after the reasoning block.

    - `close_tag` present: the stripped text after its first occurrence, whether or not `open_tag`
      is present (many chat templates put the opening tag in the prompt).
    - only `open_tag` present: "" (the reasoning was cut off before it closed; there is no answer).
    - neither: the text unchanged (a plain answer is scored as it is).
    """
    if close_tag in text:
        return text.split(close_tag, 1)[1].strip()
    if open_tag in text:
        return ""
    return text
