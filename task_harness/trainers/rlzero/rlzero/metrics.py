"""What a run logs: one StepLog per rollout (train.py prints it), its statistics gathered over
micro-batches, and a JSON-lines file of them."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class StepLog:
    step: int
    reward: float
    loss: float
    length: float
    stats: dict[str, float] = field(default_factory=dict)


class PassStats:
    """Statistics of the micro-batches of one pass, each weighted by its counted tokens:
    `ratio_max` is the largest, every other statistic the token-weighted mean."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.ratio_max = -math.inf

    def add(self, stats: dict[str, float], tokens: float) -> None:
        for name, value in stats.items():
            if name == "ratio_max":
                # a NaN ratio is kept, as a NaN loss is: max() alone would drop it
                if math.isnan(value) or value > self.ratio_max:
                    self.ratio_max = value
                continue
            self.sums[name] = self.sums.get(name, 0.0) + value * tokens
            self.weights[name] = self.weights.get(name, 0.0) + tokens

    def means(self) -> dict[str, float]:
        out = {"ratio_max": self.ratio_max} if self.ratio_max != -math.inf else {}
        for name, total in self.sums.items():
            weight = self.weights[name]
            out[name] = total / weight if weight else 0.0
        return out


class Stopwatch:
    """Wall-clock seconds of the phases of one rollout, logged as `<phase>_seconds`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._started = time.perf_counter()

    def lap(self, phase: str) -> None:
        """Charge the time since the previous lap (or the start) to `phase`."""
        now = time.perf_counter()
        self.seconds[f"{phase}_seconds"] = now - self._started
        self._started = now

    def stats(self, sampled_tokens: float) -> dict[str, float]:
        """The phases' seconds and the sampled tokens per second of the rollout phase."""
        rollout = self.seconds.get("rollout_seconds", 0.0)
        rate = sampled_tokens / rollout if rollout > 0 else 0.0
        return self.seconds | {"tokens_per_second": rate}


def lengths(completion_mask) -> dict[str, float]:
    """Counted tokens per completion: the shortest and the longest of a rollout (the mean is
    StepLog.length)."""
    per_row = completion_mask.sum(dim=1)
    return {"length_min": float(per_row.min()), "length_max": float(per_row.max())}


def reached(logs: list[StepLog], target: float, window: int) -> bool:
    """Whether the mean reward of the last `window` rollouts reaches `target`."""
    recent = [entry.reward for entry in logs[-window:]]
    return len(recent) == window and sum(recent) / window >= target


def summary(logs: list[StepLog], target: float, window: int) -> dict[str, float | int | None]:
    """A finished run in a few figures: its rollouts, the best mean reward over `window`
    consecutive rollouts, and the first rollout at which that mean reached `target` (None: it
    never did)."""
    rewards = [entry.reward for entry in logs]
    means = [sum(rewards[end - window : end]) / window for end in range(window, len(rewards) + 1)]
    first = next((window + i for i, mean in enumerate(means) if mean >= target), None)
    return {
        "rollouts": len(logs),
        "best_mean_reward": max(means) if means else None,
        "reached_target_at": first,
    }


class JsonLines:
    """Appends each StepLog to a file as one JSON object a line (NaN written as null)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, log: StepLog) -> None:
        record = asdict(log)
        record |= record.pop("stats")
        clean = {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()
        }
        with self.path.open("a") as out:
            out.write(json.dumps(clean) + "\n")
