"""Which stages no check covered, and why, so that a run never reads as passing a stage it skipped.

A stage is covered when at least one of its checks ran (passed, failed or raised). A stage whose
every check was skipped is uncovered; the reason is what the candidate lacks, condensed from the
skip messages: the functions it does not provide, the keywords a function does not take, or the
check's own reason (a declared convention, a release that has no such option, ...).
"""

from __future__ import annotations

import re

from checker.checks import CheckResult
from reference_impl.protocol import STAGES

_NOT_PROVIDED = re.compile(r"^the candidate does not provide (.+)$")
_NOT_TAKEN = re.compile(r"^(\w+) does not take (\w+)=")
# Distinct reasons named per stage; the table and --json keep every skip message.
MAX_REASONS = 3


def uncovered(results: list[CheckResult]) -> dict[str, str]:
    """Stage -> why no check of it ran, for each stage that has results and none that ran."""
    found = {}
    for stage in STAGES:
        rows = [r for r in results if r.stage == stage]
        if rows and all(r.status == "skip" for r in rows):
            found[stage] = reason([r.message for r in rows])
    return found


def reason(messages: list[str]) -> str:
    """The skip messages of one stage as one short reason: missing functions, then the keywords
    each function does not take, then any other reason, each named once."""
    missing: list[str] = []
    keywords: dict[str, list[str]] = {}
    other: list[str] = []
    for message in messages:
        if match := _NOT_PROVIDED.match(message):
            names = [n.strip() for n in match.group(1).split(",")]
            missing += [n for n in names if n not in missing]
        elif match := _NOT_TAKEN.match(message):
            taken = keywords.setdefault(match.group(1), [])
            if match.group(2) not in taken:
                taken.append(match.group(2))
        elif message not in other:
            other.append(message)
    parts = [f"the candidate does not provide {', '.join(missing)}"] if missing else []
    parts += [f"{name} does not take {', '.join(keys)}" for name, keys in keywords.items()]
    parts += other
    if len(parts) > MAX_REASONS:
        parts = [*parts[:MAX_REASONS], f"+{len(parts) - MAX_REASONS} more (--json lists all)"]
    return "; ".join(parts)


def verdict(failed: bool, missing: dict[str, str], strict: bool) -> str:
    """The end of the summary line: never "passed" alone while a stage went unchecked."""
    if failed:
        return "FAILED"
    if not missing:
        return "all checks that ran passed"
    stages = f"{len(missing)} stage{'s' if len(missing) > 1 else ''} not covered"
    if strict:
        return f"FAILED (--strict): {stages}"
    return f"the checks that ran passed, but {stages} (--strict fails on {'them' if len(missing) > 1 else 'it'})"
