"""Rendering results: the rich table (people), `--json` (machines, the contract's shape) and JUnit XML (CI)."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

from rich.console import Console
from rich.table import Table
from rich.text import Text

from checker.checks import PLAYBOOK, CheckResult
from checker.coverage import uncovered, verdict
from checker.diagnosis import error_cause
from reference_impl.protocol import STAGES

STYLE = {"pass": "green", "fail": "bold red", "error": "bold magenta", "skip": "dim"}
# Distinct skip reasons shown per stage in the table; --json keeps every one.
MAX_SKIP_REASONS = 2


def short(value: float) -> str:
    """1e-06 -> '1e-6'; 0.0001 -> '1e-4'; 2.5e-05 -> '2.5e-5'; 0 -> '0'."""
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def shown(value: object) -> str:
    """A convention's value as people read it: floats below 1e-3 as 1e-6, not 1e-06 or 0.0001."""
    if isinstance(value, float) and 0 < abs(value) < 1e-3:
        return short(value)
    return str(value)


def summary(results: list[CheckResult]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for result in results:
        counts[result.status] += 1
    return counts


def to_json(
    target: str, kind: str, version: str, results: list[CheckResult], diagnosis: dict | None
) -> str:
    document = {
        "target": target,
        "kind": kind,
        "version": version,
        "results": [r.to_json() for r in results],
        "summary": summary(results),
        "uncovered": [{"stage": s, "reason": why} for s, why in uncovered(results).items()],
    }
    if diagnosis:
        document["diagnosis"] = diagnosis
    return json.dumps(document, indent=2)


def print_table(
    console: Console,
    target: str,
    results: list[CheckResult],
    diagnosis: dict | None,
    strict: bool = False,
    hint: str | None = None,
) -> None:
    """A per-stage table of counts, then one line per failure and error: expected, seen, likely
    cause, where in the candidate, and which section of the skill's playbook explains the rule;
    then each stage that no check covered, and why; the summary line, and `hint` (what to do
    first) after it."""
    counts = summary(results)
    if diagnosis:  # first: the one stage to look at before reading anything else
        text = Text("diagnosis: " + diagnosis["summary"].replace("`", ""), style="bold red")
        console.print(text, soft_wrap=True)
    table = Table(title=f"grpo-check {target}", title_justify="left")
    table.add_column("stage", style="cyan", no_wrap=True)
    for status in ("pass", "fail", "error", "skip"):
        table.add_column(status, justify="right", style=STYLE[status], no_wrap=True)
    table.add_column("failing checks / why skipped", overflow="fold")
    for stage in STAGES:
        rows = [r for r in results if r.stage == stage]
        if not rows:
            continue
        stage_counts = summary(rows)
        bad = [r.check.split(".", 1)[1] for r in rows if r.status in ("fail", "error")]
        skipped = sorted({r.message for r in rows if r.status == "skip"})
        if len(skipped) > MAX_SKIP_REASONS:
            hidden = len(skipped) - MAX_SKIP_REASONS
            skipped = [*skipped[:MAX_SKIP_REASONS], f"(+{hidden} more reasons: --json lists all)"]
        note = ", ".join(bad) if bad else "; ".join(skipped)
        root = diagnosis and stage in diagnosis["root_stages"]
        table.add_row(
            Text(stage + (" <- root" if root else ""), style="bold red" if root else "cyan"),
            *(
                str(stage_counts[s]) if stage_counts[s] else ""
                for s in ("pass", "fail", "error", "skip")
            ),
            Text(note, style="red" if bad else "dim"),
        )
    console.print(table)
    failures = [r for r in results if r.status in ("fail", "error")]
    print_failures(console, failures, diagnosis)
    missing = uncovered(results)
    for stage, why in missing.items():
        console.print(Text(f"not covered: {stage}: {why}", style="yellow"), soft_wrap=True)
    console.print(
        f"{counts['pass']} passed, {counts['fail']} failed, {counts['error']} errors, "
        f"{counts['skip']} skipped: {verdict(bool(failures), missing, strict)}"
    )
    if hint:
        console.print(Text(f"hint: {hint}", style="bold yellow"), soft_wrap=True)


def print_failures(console: Console, failures: list[CheckResult], diagnosis: dict | None) -> None:
    """One line per root cause, in full; the failures of knock-on stages folded under it.

    Checks that raise the same error are one cause: printed once with the others named. The
    failures of stages the diagnosis explains by a root stage get one line per stage.
    """
    if not failures:
        return
    explained = set(diagnosis["explained_stages"]) if diagnosis else set()
    console.print(Text("Failures (expected, seen: likely cause  [where]  see)", style="bold"))
    printed: set[str] = set()
    for result in failures:
        cause = error_cause(result.message) if result.status == "error" else None
        if result.stage in explained or cause in printed:
            continue
        same = [r for r in failures if r.status == "error" and error_cause(r.message) == cause]
        if cause:
            printed.add(cause)
        line = Text(f"{result.status.upper()} ", style=STYLE[result.status])
        line.append(f"{result.check}", style="bold")
        if len(same) > 1:
            line.append(f" (and {len(same) - 1} more checks with this error)", style="bold")
        line.append(f": {result.message}")
        if result.location:
            line.append(f"  [{result.location}]", style="yellow")
        line.append(f"  see {PLAYBOOK}#{result.stage}", style="dim")
        console.print(line, soft_wrap=True)  # one line per cause: greppable, never re-wrapped
    roots = ", ".join(diagnosis["root_stages"]) if diagnosis else ""
    for stage in [s for s in STAGES if s in explained]:
        rows = [r for r in failures if r.stage == stage]
        names = ", ".join(r.check.split(".", 1)[1] for r in rows)
        if all(r.status == "error" and error_cause(r.message) in printed for r in rows):
            why = "the same error as above"
        else:
            why = f"likely knock-on effects of {roots}; --json has their messages"
        line = f"  folded: {stage}: {len(rows)} failing ({names}): {why}"
        console.print(Text(line, style="dim"), soft_wrap=True)


def write_junit(path: str, target: str, results: list[CheckResult]) -> None:
    counts = summary(results)
    suite = ElementTree.Element(
        "testsuite",
        name=f"grpo-check {target}",
        tests=str(len(results)),
        failures=str(counts["fail"]),
        errors=str(counts["error"]),
        skipped=str(counts["skip"]),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"grpo_check.{result.stage}",
            name=result.check,
            time=f"{result.seconds:.3f}",
        )
        text = result.message + (f" ({result.location})" if result.location else "")
        if result.status == "fail":
            ElementTree.SubElement(case, "failure", message=text).text = text
        elif result.status == "error":
            ElementTree.SubElement(case, "error", message=text).text = text
        elif result.status == "skip":
            ElementTree.SubElement(case, "skipped", message=text)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
