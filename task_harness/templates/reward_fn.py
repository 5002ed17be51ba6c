"""Rewards and data of our GRPO run: answer `d =` with (d + 1) mod 10. Do not modify."""

from datasets import Dataset


def make_dataset() -> Dataset:
    prompts = [f"{d} =" for d in range(10)] * 20
    return Dataset.from_dict(
        {"prompt": prompts, "answer": [str((int(p[0]) + 1) % 10) for p in prompts]}
    )


def answer_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 when the first word of the (decoded) completion is the answer."""
    return [1.0 if c.split()[:1] == [a] else 0.0 for c, a in zip(completions, answer, strict=True)]


def brevity_reward(prompts, completions, completion_ids=None, **kwargs) -> list[float]:
    """Prefers short answers: 1.0 for one word plus EOS, less for longer ones, 0 for no answer.

    Our tokenizer has one token per word; a TRL that passes no `completion_ids` (0.17 passes only
    the prompts, the completions and the dataset's columns) is scored on the words."""
    if completion_ids is None:
        lengths = [len(c.split()) for c in completions]
    else:
        lengths = [len(ids) - 1 for ids in completion_ids]
    return [
        1.0 / max(n, 1) if c.strip() else 0.0 for c, n in zip(completions, lengths, strict=True)
    ]
