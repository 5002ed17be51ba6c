"""The check registry and the loop that runs checks against a loaded candidate.

A check is one small function `def name(ctx) -> None` with a docstring stating the rule. It passes
by returning, fails by raising `CheckFailure` (expected, seen, likely cause), and is skipped by
raising `Skip`. Anything the candidate itself does wrong (raises, returns the wrong type or
shape, mutates its inputs) surfaces as `CandidateError` from `Context.call` and becomes `error`.

Each check belongs to exactly one stage and lists `depends_on`: the other stages whose bugs can
make it fail too. The diagnosis (checker.diagnosis) uses that to name the root stage.
"""

from __future__ import annotations

import importlib
import time
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


def run_one(chk: Check, candidate, seed: int) -> CheckResult:
    """Run one check in this process and turn its outcome into a CheckResult."""
    from checker.checks.context import Context

    started = time.perf_counter()
    missing = [name for name in chk.needs if name not in candidate.functions]
    depends_on = chk.depends_on + tuple(
        sorted(candidate_dependencies(chk, candidate) - {chk.stage, *chk.depends_on})
    )
    result = CheckResult(chk.name, chk.stage, "pass", depends_on=depends_on, order=chk.order)
    location_function = chk.needs[0] if chk.needs else None
    if missing:
        result.status = "skip"
        result.message = f"the candidate does not provide {', '.join(missing)}"
    else:
        ctx = Context(candidate, seed, chk.name)
        try:
            chk.run(ctx)
            result.message = chk.rule
        except Skip as skip:
            result.status, result.message = "skip", str(skip)
        except CheckFailure as failure:
            result.status, result.message = "fail", failure.line()
            location_function = failure.function or ctx.last_function or location_function
        except CandidateError as error:
            result.status, result.message = "error", str(error)
            location_function = error.function or ctx.last_function or location_function
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the candidate may raise anything
            result.status = "error"
            result.message = _one_line(f"{type(error).__name__}: {error}")
            location_function = ctx.last_function or location_function
    if location_function:
        result.location = candidate.locations.get(location_function)
    result.seconds = time.perf_counter() - started
    return result


def candidate_dependencies(chk: Check, candidate) -> set[str]:
    """Stages that the candidate's functions used by `chk` also compute.

    A candidate function may run more of the pipeline than its protocol stage: the TRL adapter's
    `compute_loss` is TRL's `_compute_loss`, and a function candidate's may call its own KL
    helper. Such a function lists those stages in a `grpo_check_depends_on` attribute, so that a
    bug in one of them, seen through this check, is diagnosed as a knock-on effect.
    """
    return {
        stage
        for name in chk.needs
        for stage in getattr(candidate.functions.get(name), "grpo_check_depends_on", ())
        if stage in STAGES
    }


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
