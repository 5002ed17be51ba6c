"""Rewards and data of our GRPO run: answer `d =` with (d + 1) mod 10. Do not modify."""

from datasets import Dataset


def make_dataset() -> Dataset:
    prompts = [f"{d} =" for d in range(10)] * 20
    return Dataset.from_dict(
        {"prompt": prompts, "answer": [str((int(p[0]) + 1) % 10) for p in prompts]}
    )


def answer_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 when the (decoded) completion is exactly the answer."""
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer, strict=True)]


def brevity_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """Prefers short completions: 1.0 for one token plus EOS, less for longer ones."""
    return [1.0 / max(len(ids) - 1, 1) for ids in completion_ids]
