"""The prompts we train on: `d =`, answered with (d + 1) mod 10."""

from datasets import Dataset


def make_dataset(copies: int = 20) -> Dataset:
    prompts = [f"{d} =" for d in range(10)] * copies
    answers = [str((d + 1) % 10) for d in range(10)] * copies
    return Dataset.from_dict({"prompt": prompts, "answer": answers})
