"""Which stage to fix first when failures appear in several stages.

Each check lists `depends_on`: the other stages whose bugs can also make it fail (a KL-gradient
check relies on the ratio's gradient; an update check on every compute stage). A stage is
CLEARED when it ran checks that depend on nothing else and all of them passed: its own evidence
is clean, so it cannot be the cause of failures elsewhere. A failing check is DIRECT evidence
against its own stage when none of the stages it depends on is failing-and-not-cleared. The root
stages are those with direct evidence; the other failing stages are knock-on effects. If every
failure could be a knock-on effect, the earliest failing stage in pipeline order is named.

One rule comes first: when the same error message comes out of checks in several stages (a
trainer missing an attribute every check needs, an import that fails inside each call), that is
one cause, not a bug per stage; it is named once, with how many checks it stopped.
"""

from __future__ import annotations

import re

from checker.checks import PLAYBOOK, CheckResult
from reference_impl.protocol import STAGES

RAISED_BY = re.compile(r"^\w+ raised ")


def error_cause(message: str) -> str:
    """An error message without the function that raised it: `compute_loss raised X: y` and
    `compute_advantages raised X: y` are one cause when every function fails the same way."""
    return RAISED_BY.sub("", message, count=1)


def shared_error(results: list[CheckResult]) -> tuple[str, list[CheckResult]] | None:
    """The error that checks in two or more stages share, with those checks, if any."""
    by_message: dict[str, list[CheckResult]] = {}
    for result in results:
        if result.status == "error":
            by_message.setdefault(error_cause(result.message), []).append(result)
    message, group = max(by_message.items(), key=lambda item: len(item[1]), default=("", []))
    if len({r.stage for r in group}) < 2:
        return None
    return message, group


def diagnose(results: list[CheckResult]) -> dict | None:
    """`{"root_stages", "explained_stages", "summary", "references"}`, or None if all passed."""
    failing = [r for r in results if r.status in ("fail", "error")]
    if not failing:
        return None
    shared = shared_error(failing)
    if shared is None:
        return _by_dependencies(results, failing)
    message, group = shared
    stages = [s for s in STAGES if s in {r.stage for r in group}]
    summary = (
        f"one error stops {len(group)} checks in {len(stages)} stages; fix it first: {message}"
    )
    rest = [r for r in failing if r not in group]
    if not rest:
        return {
            "root_stages": stages[:1],
            "explained_stages": stages[1:],
            "summary": summary,
            "references": [f"{PLAYBOOK}#{stages[0]}"],
        }
    after = _by_dependencies([r for r in results if r not in group], rest)
    roots = stages[:1] + [s for s in after["root_stages"] if s != stages[0]]
    failing_stages = {r.stage for r in failing}
    return {
        "root_stages": roots,
        "explained_stages": [s for s in STAGES if s in failing_stages and s not in roots],
        "summary": f"{summary}; then: {after['summary']}",
        "references": [f"{PLAYBOOK}#{s}" for s in roots],
    }


def _by_dependencies(results: list[CheckResult], failing: list[CheckResult]) -> dict:
    """The module docstring's rule: root stages are those with direct evidence."""
    failing_stages = {r.stage for r in failing}
    cleared = {
        stage
        for stage in failing_stages
        if any(r.stage == stage and not r.depends_on and r.status == "pass" for r in results)
        and not any(r.stage == stage and not r.depends_on for r in failing)
    }
    suspects = failing_stages - cleared
    ordered = [s for s in STAGES if s in failing_stages]
    roots = [
        stage
        for stage in ordered
        if any(r.stage == stage and not (set(r.depends_on) & (suspects - {stage})) for r in failing)
    ] or ordered[:1]
    explained = [s for s in ordered if s not in roots]
    counts = {s: sum(r.stage == s for r in failing) for s in ordered}
    if len(roots) == 1:
        summary = f"fix `{roots[0]}` first ({counts[roots[0]]} failing)"
    else:
        listed = ", ".join(f"`{s}` ({counts[s]} failing)" for s in roots)
        summary = f"{len(roots)} stages fail on their own evidence: {listed}"
    if explained:
        summary += "; the failures in " + ", ".join(f"`{s}`" for s in explained)
        summary += " depend on " + ("it" if len(roots) == 1 else "them")
        summary += " and are likely knock-on effects"
    return {
        "root_stages": roots,
        "explained_stages": explained,
        "summary": summary,
        "references": [f"{PLAYBOOK}#{s}" for s in roots],
    }
