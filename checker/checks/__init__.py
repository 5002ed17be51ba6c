"""The check registry: what a check is, how it reports, and every registered check in order.

A check is one small function `def name(ctx) -> None` with a docstring stating the rule. It passes
by returning, fails by raising `CheckFailure` (expected, seen, likely cause), and is skipped by
raising `Skip`. Anything the candidate itself does wrong (raises, returns the wrong type or
shape, mutates its inputs) surfaces as `CandidateError` from `Context.call` and becomes `error`.

Each check belongs to exactly one stage and lists `depends_on`: the other stages whose bugs can
make it fail too. The diagnosis (checker.diagnosis) uses that to name the root stage.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from reference_impl.protocol import STAGES

PLAYBOOK = "skills/grpo/references/debugging-playbook.md"
STAGE_MODULES = STAGES


class CheckFailure(Exception):
    """The candidate ran and gave a wrong result."""

    def __init__(self, expected: str, seen: str, cause: str = "", function: str | None = None):
        self.expected, self.seen, self.cause, self.function = expected, seen, cause, function
        super().__init__(self.line())

    def line(self) -> str:
        text = f"expected {self.expected}, saw {self.seen}"
        return f"{text}: {self.cause}" if self.cause else text


class CandidateError(Exception):
    """The candidate raised, returned the wrong type or shape, or mutated its inputs."""

    def __init__(self, message: str, function: str | None = None):
        self.function = function
        super().__init__(message)


class Skip(Exception):
    """The candidate does not provide what the check needs."""


@dataclass(frozen=True)
class Check:
    name: str
    stage: str
    run: Callable
    needs: tuple[str, ...]
    depends_on: tuple[str, ...] = ()
    heavy: bool = False  # needs transformers and the tiny model (runs in the second worker)
    order: int = 0  # position in pipeline order, so results from two workers merge in order

    @property
    def rule(self) -> str:
        return (self.run.__doc__ or "").strip().splitlines()[0]


@dataclass
class CheckResult:
    check: str
    stage: str
    status: str  # pass, fail, error, skip
    message: str = ""
    location: str | None = None
    seconds: float = 0.0
    depends_on: tuple[str, ...] = field(default_factory=tuple)
    order: int = 0

    def to_json(self) -> dict:
        item = {"check": self.check, "stage": self.stage, "status": self.status}
        item["message"] = self.message
        if self.location:
            item["location"] = self.location
        if self.status in ("fail", "error"):
            item["reference"] = f"{PLAYBOOK}#{self.stage}"
        return item


REGISTRY: dict[str, Check] = {}


def check(
    stage: str,
    needs: tuple[str, ...] | str,
    depends_on: tuple[str, ...] = (),
    heavy: bool = False,
) -> Callable:
    """Register `fn` as the check `<stage>.<fn name>`."""
    assert stage in STAGES, stage
    needs = (needs,) if isinstance(needs, str) else tuple(needs)

    def register(fn: Callable) -> Callable:
        name = f"{stage}.{fn.__name__}"
        REGISTRY[name] = Check(name, stage, fn, needs, tuple(depends_on), heavy)
        return fn

    return register


def all_checks(stages: tuple[str, ...] | list[str] = ()) -> list[Check]:
    """Every registered check in pipeline order, limited to `stages` when given."""
    for module in STAGE_MODULES:
        importlib.import_module(f"checker.checks.{module}")
    chosen = [c for c in REGISTRY.values() if not stages or c.stage in stages]
    rank = {stage: i for i, stage in enumerate(STAGES)}
    names = list(REGISTRY)
    ordered = sorted(chosen, key=lambda c: (rank[c.stage], names.index(c.name)))
    return [replace(c, order=rank[c.stage] * 1000 + names.index(c.name)) for c in ordered]
