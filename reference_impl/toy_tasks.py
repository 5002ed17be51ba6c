"""Toy tasks with verifiable rewards that GRPO learns from scratch on the tiny model in seconds.

Each reward function has TRL's signature, `f(prompts, completions, completion_ids, **columns)`,
so the same task trains under `reference_impl.train` and under `trl.GRPOTrainer`.
`completion_ids` are the token-id lists of the completions, as the trainer passes them.
Learning rates and batch shapes come from measured runs (grpo-skill's `tests/test_training.py` keeps
them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from datasets import Dataset

from reference_impl.tiny import EOS, VOCABULARY

_TOKEN_ID = {word: index for index, word in enumerate(VOCABULARY)}
RewardFunction = Callable[..., list[float]]


def _ids(text: str) -> list[int]:
    return [_TOKEN_ID[word] for word in text.split()]


def exact_answer_reward(prompts, completions, completion_ids, answer, **_) -> list[float]:
    """1.0 when the completion is exactly the answer's tokens followed by EOS, else 0.0."""
    return [
        1.0 if list(ids) == _ids(expected) + [_TOKEN_ID[EOS]] else 0.0
        for ids, expected in zip(completion_ids, answer, strict=True)
    ]


def first_token_reward(prompts, completions, completion_ids, answer, **_) -> list[float]:
    """1.0 when the first completion token is the (one-token) answer, else 0.0."""
    return [
        1.0 if len(ids) > 0 and ids[0] == _TOKEN_ID[expected] else 0.0
        for ids, expected in zip(completion_ids, answer, strict=True)
    ]


def copy_fraction_reward(prompts, completions, completion_ids, answer, **_) -> list[float]:
    """Fraction of the answer's tokens reproduced in order at the start of the completion."""
    rewards = []
    for ids, expected in zip(completion_ids, answer, strict=True):
        target = _ids(expected)
        matched = sum(1 for got, want in zip(ids, target, strict=False) if got == want)
        rewards.append(matched / len(target))
    return rewards


@dataclass(frozen=True)
class ToyTask:
    """A prompt set, its reward functions, and the hyperparameters measured to learn it."""

    name: str
    description: str
    dataset: Callable[[], Dataset]
    reward_funcs: tuple[RewardFunction, ...]
    max_reward: float
    learning_rate: float
    prompts_per_step: int
    num_generations: int
    max_completion_length: int


def _succ_dataset() -> Dataset:
    return Dataset.from_dict(
        {"prompt": [f"{d} =" for d in range(10)], "answer": [str((d + 1) % 10) for d in range(10)]}
    )


def _format_dataset() -> Dataset:
    return Dataset.from_dict({"prompt": ["A ="] * 8, "answer": ["7"] * 8})


def _copy_dataset() -> Dataset:
    prompts, answers = [], []
    for number in range(0, 1000, 7):
        digits = " ".join(f"{number:03d}")
        prompts.append(f"{digits} =")
        answers.append(digits)
    return Dataset.from_dict({"prompt": prompts, "answer": answers})


TOY_TASKS: dict[str, ToyTask] = {
    task.name: task
    for task in (
        ToyTask(
            name="succ",
            description="'d =' -> (d + 1) mod 10; reward 1 when the first token is that digit",
            dataset=_succ_dataset,
            reward_funcs=(first_token_reward,),
            max_reward=1.0,
            learning_rate=3e-3,
            prompts_per_step=8,
            num_generations=16,
            max_completion_length=2,
        ),
        ToyTask(
            name="format",
            description="'A =' -> '7', then stop; reward 1 for exactly that",
            dataset=_format_dataset,
            reward_funcs=(exact_answer_reward,),
            max_reward=1.0,
            learning_rate=3e-3,
            prompts_per_step=8,
            num_generations=16,
            max_completion_length=2,
        ),
        ToyTask(
            name="copy",
            description="'d1 d2 d3 =' -> 'd1 d2 d3'; reward = fraction of digits copied in order",
            dataset=_copy_dataset,
            reward_funcs=(copy_fraction_reward,),
            max_reward=1.0,
            learning_rate=1e-3,
            prompts_per_step=32,
            num_generations=8,
            max_completion_length=3,
        ),
    )
}
