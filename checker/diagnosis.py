"""Which stage to fix first when failures appear in several stages.

Each check lists `depends_on`: the other stages whose bugs can also make it fail (a KL-gradient
check relies on the ratio's gradient; an update check on every compute stage). A stage is
CLEARED when it ran checks that depend on nothing else and all of them passed: its own evidence
is clean, so it cannot be the cause of failures elsewhere. A failing check is DIRECT evidence
against its own stage when none of the stages it depends on is failing-and-not-cleared. The root
stages are those with direct evidence; the other failing stages are knock-on effects. If every
failure could be a knock-on effect, the earliest failing stage in pipeline order is named.
"""

from __future__ import annotations

from checker.checks import PLAYBOOK, CheckResult
from reference_impl.protocol import STAGES


def diagnose(results: list[CheckResult]) -> dict | None:
    """`{"root_stages", "explained_stages", "summary", "references"}`, or None if all passed."""
    failing = [r for r in results if r.status in ("fail", "error")]
    if not failing:
        return None
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
