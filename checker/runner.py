"""Running one check against a loaded candidate, and turning its outcome into a CheckResult.

Kept apart from the registry (checker.checks): it needs the check context, which needs the
registry's exceptions, so in one module the two would import each other.
"""

from __future__ import annotations

import time

from checker.checks import CandidateError, Check, CheckFailure, CheckResult, Skip
from reference_impl.protocol import STAGES


def run_one(chk: Check, candidate, seed: int) -> CheckResult:
    """Run one check in this process and turn its outcome into a CheckResult."""
    from checker.checks.context import Context  # imports torch, which the parent never does

    started = time.perf_counter()
    missing = [name for name in chk.needs if name not in candidate.functions]
    depends_on = chk.depends_on + tuple(
        sorted(candidate_dependencies(chk, candidate) - {chk.stage, *chk.depends_on})
    )
    result = CheckResult(chk.name, chk.stage, "pass", depends_on=depends_on, order=chk.order)
    location_function = chk.needs[0] if chk.needs else None
    custom = candidate.spec.custom.get(chk.stage)
    if custom:
        result.status, result.message = "skip", f"declared custom: {custom}"
    elif missing:
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
