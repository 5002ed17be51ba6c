"""Prompt datasets -> the rows of each rollout, and what the reward functions are given of them.

A rollout takes `prompts_per_step` distinct rows of the dataset (shuffled passes over it, so each
row comes once per pass) and samples `group_size` completions for each.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch


def check_dataset(dataset: list[dict]) -> None:
    """A dataset is a non-empty list of dicts that all have a text `prompt` and the same keys
    (the other keys are handed to the reward functions); raises ValueError otherwise."""
    if not dataset:
        raise ValueError("the dataset has no rows")
    keys = set(dataset[0])
    for i, row in enumerate(dataset):
        if not isinstance(row.get("prompt"), str):
            raise ValueError(f"row {i} of the dataset has no text `prompt`")
        if set(row) != keys:
            raise ValueError(f"row {i} has keys {sorted(row)}, row 0 has {sorted(keys)}")


@dataclass
class PromptStream:
    """Shuffled passes over a dataset's row indices, `per_step` rows at a time.

    A new pass is shuffled (Python's `random.Random(seed)`) whenever fewer than `per_step`
    indices are left, and appended to them, so a rollout may span the end of one pass and the
    start of the next. `state()` and `restore()` carry the order and the shuffler across a
    checkpoint."""

    size: int
    per_step: int
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.order: list[int] = []

    def next_indices(self) -> list[int]:
        while len(self.order) < self.per_step:
            self.order += self.rng.sample(range(self.size), self.size)
        taken = self.order[: self.per_step]
        del self.order[: self.per_step]
        return taken

    def state(self) -> dict:
        return {"order": list(self.order), "rng": self.rng.getstate()}

    def restore(self, state: dict) -> None:
        self.order = list(state["order"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def group_rows(rows: list[dict], group_size: int) -> list[dict]:
    """Each row repeated `group_size` times in a row: the layout of the sampled completions."""
    return [row for row in rows for _ in range(group_size)]


def reward_inputs(rows: list[dict], group_size: int) -> tuple[list[str], dict[str, list]]:
    """The prompts and the dataset's other columns, one entry per completion, as the reward
    functions take them."""
    grouped = group_rows(rows, group_size)
    columns = {k: [r[k] for r in grouped] for k in rows[0] if k != "prompt"}
    return [r["prompt"] for r in grouped], columns


def render_prompts(rows: list[dict], template: str | None) -> list[dict]:
    """The rows with each prompt put into `template` at `{prompt}` (None: the rows as they are);
    the rows themselves are left unchanged. A template without `{prompt}` is refused."""
    if template is None:
        return rows
    if "{prompt}" not in template:
        raise ValueError(f"the prompt template {template!r} has no {{prompt}}")
    return [row | {"prompt": template.replace("{prompt}", row["prompt"])} for row in rows]


def encode_prompts(tokenizer, rows: list[dict]) -> dict[str, torch.Tensor]:
    """The rows' prompts tokenised and padded to one length, [P, Lp] `input_ids` and
    `attention_mask`, on the side the tokenizer pads."""
    return tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)


def decode_counted(tokenizer, completions: torch.Tensor, mask: torch.Tensor):
    """What the reward functions see of each completion: the ids of its counted tokens and
    their text (special tokens dropped)."""
    lengths = mask.sum(1).tolist()
    token_ids = [ids[:n] for ids, n in zip(completions.tolist(), lengths, strict=True)]
    return token_ids, tokenizer.batch_decode(token_ids, skip_special_tokens=True)


def split_rows(n_rows: int, parts: int) -> list[slice]:
    """`parts` contiguous slices covering rows 0 .. n_rows - 1 in order, as equal as they can be
    (the first ones one row longer when `parts` does not divide `n_rows`)."""
    base, extra = divmod(n_rows, parts)
    slices, start = [], 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        if stop > start:
            slices.append(slice(start, stop))
        start = stop
    return slices


def load_jsonl(path: str | Path) -> list[dict]:
    """A dataset from a file of one JSON object a line (blank lines skipped), checked as
    `check_dataset` checks it; a line that is not JSON is reported with its number."""
    rows = []
    with Path(path).open() as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
    check_dataset(rows)
    return rows


def keep_last_tokens(enc: dict[str, torch.Tensor], limit: int | None) -> dict[str, torch.Tensor]:
    """The encoded prompts cut to their last `limit` positions (None: as they are). With left
    padding a prompt's own tokens are its last ones, so a short prompt loses only padding."""
    if limit is None or enc["input_ids"].size(1) <= limit:
        return enc
    return {
        "input_ids": enc["input_ids"][:, -limit:],
        "attention_mask": enc["attention_mask"][:, -limit:],
    }
