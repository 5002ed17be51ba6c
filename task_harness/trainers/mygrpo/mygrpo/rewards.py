"""Our reward functions, in the order of `TRAINING["reward_weights"]`."""


def answer_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 when the first word of the completion is the answer."""
    return [1.0 if c.split()[:1] == [a] else 0.0 for c, a in zip(completions, answer, strict=True)]


def brevity_reward(prompts, completions, completion_ids=None, **kwargs) -> list[float]:
    """Prefers short answers: 1.0 for one word plus EOS, less for longer ones, 0 for no answer.

    Our tokenizer has one token per word. With `completion_ids` the length is the token count
    less one, for the last token: the EOS of a finished completion; for one cut at the length
    limit (no EOS), its last word, on purpose: a cut completion is scored as if it had stopped
    one word earlier, since the limit, not the model, ended it."""
    if completion_ids is None:
        lengths = [len(c.split()) for c in completions]
    else:
        lengths = [len(ids) - 1 for ids in completion_ids]
    return [
        1.0 / max(n, 1) if c.strip() else 0.0 for c, n in zip(completions, lengths, strict=True)
    ]
